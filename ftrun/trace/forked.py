"""One function run in a forked child process, its result read back through a pipe. Torch-free.

Contract: ``Forked(fn)`` forks at once; the child runs ``fn()`` (a list of byte frames) and
exits; ``result()`` waits for it and returns those frames, or ``None`` when the child did not
finish (an exception in ``fn``, a signal, more than ``max_bytes`` of output); ``close()``
kills (SIGKILL) and reaps a child still running. Every child is reaped: by ``result()`` or by
``close()``, which the caller runs in a ``finally`` (Ctrl-C and SIGTERM reach the parent as
``KeyboardInterrupt`` under ftrun's handlers); the child dies with its parent (Linux
``PR_SET_PDEATHSIG``) and takes SIGINT/SIGTERM's default action. The child never returns into
the parent's code: it leaves by ``os._exit`` (no atexit handlers, no flushing of inherited
buffers).

Forking is only safe in a process with one thread (``usable()``): a lock another thread held at
the fork would stay locked in the child.
"""

from __future__ import annotations

import os
import signal
import struct
import threading
from collections.abc import Callable

_LEN = struct.Struct("<Q")


def usable() -> bool:
    """Whether this process can fork a helper here: ``os.fork`` exists, one thread, two CPUs for it."""
    if not hasattr(os, "fork") or threading.active_count() != 1:
        return False
    try:
        return len(os.sched_getaffinity(0)) >= 2
    except (AttributeError, OSError):
        return (os.cpu_count() or 1) >= 2


def _die_with_parent(parent: int) -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the pipe's EPIPE ends it at its first write
        pass
    if os.getppid() != parent:  # the parent died before prctl
        os._exit(1)


class Forked:
    """``fn`` running in a child process (see the module contract)."""

    def __init__(self, fn: Callable[[], list[bytes]], max_bytes: int) -> None:
        self.max_bytes = max_bytes
        parent = os.getpid()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                os.close(r)
                for s in (signal.SIGINT, signal.SIGTERM):
                    signal.signal(s, signal.SIG_DFL)
                _die_with_parent(parent)
                for frame in fn():
                    _write_all(w, _LEN.pack(len(frame)) + frame)
                code = 0
            except BaseException:  # anything: the parent reads no result and does the work itself
                pass
            finally:
                os._exit(code)
        os.close(w)
        self.pid: int | None = pid
        self.r: int | None = r

    def result(self) -> list[bytes] | None:
        """The child's frames once it has exited 0, else ``None`` (it is reaped either way)."""
        assert self.r is not None
        data = bytearray()
        while True:
            b = os.read(self.r, 1 << 20)
            if not b:
                break
            data += b
            if len(data) > self.max_bytes:
                self.close()
                return None
        os.close(self.r)
        self.r = None
        assert self.pid is not None
        _, status = os.waitpid(self.pid, 0)
        self.pid = None
        if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
            return None
        frames, i = [], 0
        while i < len(data):
            if i + _LEN.size > len(data):
                return None
            (n,) = _LEN.unpack_from(data, i)
            i += _LEN.size
            if i + n > len(data):
                return None
            frames.append(bytes(data[i : i + n]))
            i += n
        return frames

    def close(self) -> None:
        """Kill and reap the child if it still runs; close the pipe."""
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(self.pid, 0)
            self.pid = None
        if self.r is not None:
            os.close(self.r)
            self.r = None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
