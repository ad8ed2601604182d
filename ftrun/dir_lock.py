"""A lock file held for a command's life: one writer per output dir (``ftrun sweep``). Torch-free.

``DirLock.take(dir, flag)`` opens ``dir/.ftrun-lock`` and takes an exclusive ``flock`` on it,
without waiting; the holder's pid is written into the file so that a refused command can name
it. The kernel drops the lock when the holder exits, however it ends (SIGKILL included): a
stale file never blocks anyone. The descriptor is close-on-exec, so the lock is not held by
children that outlive the holder.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

from ftrun.errors import BadInput

LOCK_FILE = ".ftrun-lock"
_PID_BYTES = 32  # a pid and a newline; more is not read


class DirLock:
    """At most one exclusive lock on one dir's ``LOCK_FILE``; ``release()`` (or the ``with``
    block's end) drops it."""

    def __init__(self) -> None:
        self.fd = -1
        self.path: Path | None = None

    def take(self, directory: Path, flag: str) -> None:
        """Lock ``directory`` for this process. ``BadInput`` (one line naming the holder's pid)
        when another process (or another ``DirLock`` of this one) holds it."""
        path = Path(directory) / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as e:
            raise BadInput(f"{flag}: cannot open {path} ({e.strerror or e})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _read_pid(fd)
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise BadInput(
                    f"{flag}: {directory} is in use by pid {holder} (a sweep still running); "
                    "wait for it to end or stop it first"
                ) from None
            raise BadInput(f"{flag}: cannot lock {path} ({e.strerror or e})") from None
        try:  # the pid, for the next one refused; a write that fails leaves the lock valid
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass
        self.release()
        self.fd, self.path = fd, path

    def release(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
        self.fd, self.path = -1, None

    def __enter__(self) -> DirLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_pid(fd: int) -> str:
    """The pid the holder wrote, or ``?`` (not written yet, or not a pid)."""
    try:
        text = os.pread(fd, _PID_BYTES, 0).decode("ascii", "replace").strip()
    except OSError:
        return "?"
    return text if text.isdigit() else "?"
