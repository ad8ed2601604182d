"""One function run in a forked child process, its result read back through a pipe. Torch-free.

Contract: ``Forked(fn)`` forks at once; the child runs ``fn(inbox)`` (a list of byte frames) and
exits; ``inbox()`` (in the child) waits for the one message the parent gives with ``send()``,
``None`` when the parent reads the result without sending one; ``result()`` waits for the
child and returns its frames, or ``None`` when the child did not finish (an exception in
``fn``, a signal, more than ``max_bytes`` of output); ``close()``
kills (SIGKILL) and reaps a child still running. Every child is reaped: by ``result()`` or by
``close()``, which the caller runs in a ``finally`` (Ctrl-C and SIGTERM reach the parent as
``KeyboardInterrupt`` under ftrun's handlers); the child dies with its parent (Linux
``PR_SET_PDEATHSIG``) and takes SIGINT/SIGTERM's default action. The child never returns into
the parent's code: it leaves by ``os._exit`` (no atexit handlers, no flushing of inherited
buffers).

The child inherits the parent's open descriptors: a function that reads a file the parent
opened reads it through that descriptor (by offset, ``os.pread``: the descriptor's position is
shared with the parent), never by its path again, which may name another file by then (a
temp+rename writer replaces it).

Forking is only safe in a process with one thread (``usable()``): a lock another thread held at
the fork would stay locked in the child.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import threading
from collections.abc import Callable
from typing import TypeVar

_LEN = struct.Struct("<Q")
T = TypeVar("T")
R = TypeVar("R")


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

    def __init__(self, fn: Callable[[Callable[[], bytes | None]], list[bytes]], max_bytes: int) -> None:
        self.max_bytes = max_bytes
        parent = os.getpid()
        r, w = os.pipe()  # child -> parent: the frames
        down_r, down_w = os.pipe()  # parent -> child: the one message
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                os.close(r)
                os.close(down_w)
                for s in (signal.SIGINT, signal.SIGTERM):
                    signal.signal(s, signal.SIG_DFL)
                _die_with_parent(parent)
                for frame in fn(lambda: _read_message(down_r)):
                    _write_all(w, _LEN.pack(len(frame)) + frame)
                code = 0
            except BaseException:  # anything: the parent reads no result and does the work itself
                pass
            finally:
                os._exit(code)
        os.close(w)
        os.close(down_r)
        self.pid: int | None = pid
        self.r: int | None = r
        self.down: int | None = down_w

    def send(self, message: bytes) -> bool:
        """Give the child its one message (``inbox()``); False when the child is gone."""
        if self.down is None:
            return False
        try:
            _write_all(self.down, _LEN.pack(len(message)) + message)
            return True
        except OSError:  # EPIPE: the child has exited (its result says how)
            return False
        finally:
            self._close_down()

    def _close_down(self) -> None:
        if self.down is not None:
            os.close(self.down)
            self.down = None

    def result(self) -> list[bytes] | None:
        """The child's frames once it has exited 0, else ``None`` (it is reaped either way)."""
        assert self.r is not None
        self._close_down()  # a child waiting in inbox() gets None: it never waits for this read
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
        self._close_down()


def _read_message(fd: int) -> bytes | None:
    """The parent's message (length-prefixed), or None when it closed the pipe without one."""
    data = bytearray()
    while True:
        b = os.read(fd, 1 << 16)
        if not b:
            break
        data += b
    if len(data) < _LEN.size:
        return None
    (n,) = _LEN.unpack_from(data)
    return bytes(data[_LEN.size : _LEN.size + n]) if len(data) == _LEN.size + n else None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# Files of a folder read at once, in forked children (scripts/bench_inspect.py --parallelism, on
# two CPUs): 8 x 19 MB plain traces in 0.86x the wall of one process reading them in turn at
# 1.2x its CPU (splitting each file instead: 1.44x), the same gzip'd in 0.56x the wall at 0.93x
# the CPU (split: 1.15x the wall). Only the small results are pickled back.
FILE_WORKERS = 4


def map_forked(fn: Callable[[T], R], items: list[T], workers: int | None = None) -> list[R]:
    """``[fn(x) for x in items]``, the items dealt round-robin to up to ``workers`` (default
    ``FILE_WORKERS``, at most this process's CPUs) forked children at once, each result pickled
    back. Where forking is not ``usable()``, with one item or one worker, all run here. An item
    whose child failed (an exception, a signal, too much output) is run here again, in order, so
    the results and the first exception are those of the plain loop. Every child is reaped."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    n = min(len(items), cpus, FILE_WORKERS if workers is None else workers)
    if n < 2 or not usable():
        return [fn(x) for x in items]
    groups = [list(range(k, len(items), n)) for k in range(n)]
    children: list[Forked] = []
    done: dict[int, R] = {}
    try:
        for g in groups:

            def run(_inbox: Callable[[], bytes | None], g: list[int] = g) -> list[bytes]:
                return [pickle.dumps(fn(items[i]), protocol=5) for i in g]

            children.append(Forked(run, max_bytes=1 << 36))
        for g, child in zip(groups, children, strict=True):
            frames = child.result()
            if frames is not None and len(frames) == len(g):
                done.update((i, pickle.loads(f)) for i, f in zip(g, frames, strict=True))
    finally:
        for child in children:
            child.close()
    return [done[i] if i in done else fn(x) for i, x in enumerate(items)]
