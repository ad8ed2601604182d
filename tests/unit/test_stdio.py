"""A reader that goes away (``ftrun ... | true``) or a closed stdout (``>&-``) is a quiet exit
with the command's own code (``ftrun.stdio``, issue 42 item 5). No process is started: the
streams are built on a pipe whose reading end is closed, and on a descriptor number not open."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from ftrun.console import console
from ftrun.stdio import QuietStream, _is_open, _null_stream

REPO = Path(__file__).resolve().parents[2]


def _broken_pipe() -> io.TextIOWrapper:
    r, w = os.pipe()
    os.close(r)  # the reader went away (Python ignores SIGPIPE: a write gets EPIPE)
    return open(w, "w", buffering=1, encoding="utf-8")  # noqa: SIM115


def test_a_broken_pipe_is_silent_from_then_on() -> None:
    raw = _broken_pipe()
    with pytest.raises(BrokenPipeError):  # what the command met before: a traceback, or exit 1
        raw.write("x" * 100_000)
        raw.flush()
    raw = _broken_pipe()
    out = QuietStream(raw)
    assert out.write("x" * 100_000) == 100_000
    out.flush()
    assert out.gone
    assert out.write("more\n") == 5  # dropped
    raw.close()  # the interpreter's last flush: its descriptor is /dev/null now, nothing raises


def test_rich_on_a_broken_pipe_does_not_exit_1(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = _broken_pipe()
    monkeypatch.setattr("sys.stdout", QuietStream(raw))
    con = console()
    for _ in range(200):
        con.print("a line of a table " * 4)  # rich's own handler raised SystemExit(1) here
    raw.close()


def test_rich_console_on_a_raw_broken_pipe_goes_quiet() -> None:
    raw = _broken_pipe()
    con = console(file=raw)
    for _ in range(200):
        con.print("a line of a table " * 4)
    assert con.quiet
    with pytest.raises(BrokenPipeError):
        raw.close()


def test_other_errors_still_raise() -> None:
    class Full(io.StringIO):
        def write(self, s: str) -> int:
            raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        QuietStream(Full()).write("x")


def test_a_closed_descriptor_becomes_dev_null() -> None:
    fd = 200
    while _is_open(fd):
        fd += 1
    stream = _null_stream(fd)  # what `>&-` leaves: the number is not open
    try:
        assert os.path.samestat(os.fstat(fd), os.stat(os.devnull))
        stream.write("dropped\n")
        stream.flush()
    finally:
        os.close(fd)


def test_the_console_script_installs_it() -> None:
    text = (REPO / "ftrun" / "__main__.py").read_text()
    assert "guard_stdio()" in text
