"""The command line behind the ``ftrun`` console script (``ftrun.__main__``): ``ftrun.cli.main``, with one shortcut.

A command line that is plainly ``ftrun inspect-trace ...`` runs the check without importing
typer, whose import is about a fifth of a small trace's whole ``inspect-trace``. Plainly means:
only the options ``ftrun.cli``'s ``inspect-trace`` declares (``INSPECT_VALUES``,
``INSPECT_FLAGS``), each at most once, every value and path a non-blank string that does not
start with ``-``, integers that ``int`` reads, at least one path. Anything else (``--help``, an
unknown or repeated option, a bad value, another command) goes to ``ftrun.cli.main`` untouched,
so typer words every usage error as before. An error of the check itself (bad input, Ctrl-C,
a full disk) is worded by ``ftrun.cli.guarded``, imported only then: one home for how errors
read. ``tests/unit/test_entry_fast_inspect.py`` holds the tables to typer's declaration and the
parsed values to what typer hands ``inspect_trace``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

INSPECT = "inspect-trace"
# option -> (field of ``ftrun.config.commands.InspectOptions``, type of its value)
INSPECT_VALUES: dict[str, tuple[str, type]] = {
    "--fragments": ("fragments", int),
    "--sync-every": ("sync_every", int),
    "--fragment-sync-delay": ("fragment_sync_delay", int),
    "--step-numbering": ("step_numbering", str),
    "--export-perfetto": ("export_perfetto", str),
    "--max-trace-mb": ("max_trace_mb", int),
    "--junit": ("junit", str),
}
INSPECT_FLAGS: dict[str, str] = {
    "--json": "json_out",
    "--allow-failed-commits": "allow_failed_commits",
    "--merge-jobs": "merge_jobs",
    "--overwrite": "overwrite",
}


class InspectLine:
    """What a plain ``inspect-trace`` command line gives ``inspect_trace``: its paths, and the
    options given by field (typed as ``INSPECT_VALUES`` says; the rest: the declaration's defaults)."""

    def __init__(self) -> None:
        self.paths: list[Path] = []
        self.given: set[str] = set()
        self.values: dict[str, object] = {}


def plain_inspect(argv: Sequence[str]) -> InspectLine | None:
    """The values of a plain ``inspect-trace`` command line, else None."""
    if len(argv) < 2 or argv[0] != INSPECT:
        return None
    line = InspectLine()
    rest = list(argv[1:])
    rest.reverse()
    while rest:
        arg = rest.pop()
        if not arg.startswith("-"):
            if not arg.strip():
                return None
            line.paths.append(Path(arg))
            continue
        opt, eq, value = arg.partition("=")
        kind: type
        if opt in INSPECT_FLAGS and not eq:
            name, kind = INSPECT_FLAGS[opt], bool
        elif opt in INSPECT_VALUES:
            name, kind = INSPECT_VALUES[opt]
            if not eq:
                if not rest:
                    return None
                value = rest.pop()
            if not value.strip() or value.startswith("-"):
                return None
        else:
            return None
        if name in line.given:
            return None
        line.given.add(name)
        try:
            line.values[name] = True if kind is bool else kind(value)
        except ValueError:
            return None
    return line if line.paths else None


def _inspect(line: InspectLine) -> int:
    from ftrun.errors import raise_on_signal

    old = raise_on_signal()  # as ftrun.cli.guarded: Ctrl-C / SIGTERM -> KeyboardInterrupt -> one line, 130
    try:
        import msgspec

        from ftrun.commands.inspect_trace import inspect_trace
        from ftrun.config.commands import InspectOptions

        return inspect_trace(line.paths, msgspec.convert(line.values, InspectOptions), on_done=_exit_now)
    except (Exception, KeyboardInterrupt) as e:
        import typer

        from ftrun.cli import guarded

        err = e

        def again():
            raise err

        try:
            guarded(again)  # prints its one line and raises typer.Exit, or re-raises (a bug: the traceback)
        except typer.Exit as x:
            return x.exit_code
        raise AssertionError("unreachable: guarded returned") from err
    finally:
        import signal

        for sig, handler in old.items():
            signal.signal(sig, handler)


def _exit_now(code: int) -> None:
    """The check's output is written: end the process without freeing what it built, nor the
    interpreter's teardown (measured after a 295 MB trace's ``--json``: 0.10-0.12 s between the
    output and the exit, ~5% of the whole, on a slow 2-core machine). Nothing is left to run: the
    trace reader's child and thread are joined, the files written are closed. A flush that fails
    (a closed pipe, a full disk) raises here, and is worded as any other error of the check."""
    import os

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main() -> None:
    got = plain_inspect(sys.argv[1:])
    if got is None:
        from ftrun.cli import main as cli_main

        cli_main()
        return
    sys.exit(_inspect(got))
