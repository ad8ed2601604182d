"""The console script (``ftrun``, and ``python -m ftrun``). Importing this module does nothing."""


def main() -> None:
    """Install the start-up signal handlers, then import and run the CLI: a Ctrl-C while the
    CLI is still importing is one line, exit 130 (``ftrun.errors.exit_on_signal``)."""
    from ftrun.errors import exit_on_signal

    exit_on_signal()
    from ftrun.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
