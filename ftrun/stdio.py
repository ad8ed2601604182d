"""The console script's one output path: stdout and stderr that a reader going away (a broken
pipe: ``ftrun ... | head``) or a shell that closed them (``>&-``) cannot turn into a traceback
or into another exit code. Installed once by ``ftrun.__main__.main`` (``guard_stdio``); every
print, rich console (``ftrun.console``, which reads ``sys.stdout`` when it prints) and JSON
write goes through it. Imports nothing heavy: the fast ``inspect-trace`` path pays nothing.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any


class QuietStream:
    """A text stream that a reader going away cannot turn into an error: once a write or flush
    meets EPIPE (``ftrun ... | head``, ``| true``), /dev/null is put under its descriptor (as
    Python's SIGPIPE note advises: the interpreter's own last flush then succeeds) and every
    later write is dropped. The command carries on to its end and exits with its own code (a
    PASS stays 0), as a Unix tool killed by SIGPIPE leaves no message. Any other error (a full
    disk) is raised as before. Everything else is the wrapped stream's (``isatty``, ``fileno``...)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.gone = False

    def _broken(self) -> None:
        self.gone = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.dup2(devnull, self._stream.fileno(), inheritable=False)
            finally:
                os.close(devnull)

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._broken()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._broken()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _null_stream(fd: int) -> Any:
    """A text stream on /dev/null placed at ``fd`` (a standard descriptor the shell closed:
    ``>&-``), so that no file ftrun opens later takes that number and receives its output."""
    devnull = os.open(os.devnull, os.O_RDWR)
    if devnull != fd:
        os.dup2(devnull, fd)
        os.close(devnull)
    return open(fd, "w", closefd=False, encoding="utf-8", errors="backslashreplace")  # noqa: SIM115


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def guard_stdio() -> None:
    """The console script's one output path (``ftrun.__main__``): stdout and stderr become
    ``QuietStream``s; one that the shell closed (``>&-``: Python's is None, or its descriptor
    is) becomes /dev/null first. Every print, rich console and JSON write goes through them, so
    a closed stdout or a broken pipe is a quiet exit with the command's own code."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        if not _is_open(fd):
            stream = _null_stream(fd)
            if name != "stdin":
                setattr(sys, name, stream)
        elif name != "stdin" and getattr(sys, name) is None:
            setattr(sys, name, open(fd, "w", closefd=False, encoding="utf-8", errors="backslashreplace"))  # noqa: SIM115
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, QuietStream):
            setattr(sys, name, QuietStream(stream))
