"""The console script (``ftrun``, and ``python -m ftrun``). Importing this module does nothing."""


def main() -> None:
    """Install the start-up signal handlers, then run the command line: a Ctrl-C while it is
    still importing is one line, exit 130 (``ftrun.errors.exit_on_signal``). ``ftrun.entry`` runs
    a plain ``inspect-trace`` without importing typer and hands everything else to ``ftrun.cli``.
    Output goes through ``ftrun.stdio.guard_stdio``: a reader that goes away (``| head``) or a
    closed stdout (``>&-``) is a quiet exit with the verdict's code."""
    from ftrun.errors import exit_on_signal
    from ftrun.stdio import guard_stdio

    exit_on_signal()
    guard_stdio()  # a closed stdout or a broken pipe: a quiet exit with the command's own code
    from ftrun.entry import main as entry_main

    entry_main()


if __name__ == "__main__":
    main()
