"""Fixtures shared by the unit tests (tests/conftest.py holds the suite-wide rules)."""

from __future__ import annotations

import signal

import pytest

from ftrun.trace import stream, stream_source


@pytest.fixture
def deadline():
    """Fail (not hang) a test that blocks for more than 60 s (a read waiting on a FIFO): a hang
    guard, far above what the test takes on a loaded machine, never a bound on its time."""

    def boom(signum, frame):
        raise TimeoutError("blocked")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


class _InProcess:
    """``Forked`` without a fork: ``fn`` runs at ``result()``, after what the parent sent;
    ``fail`` makes its result ``None``."""

    made: list[_InProcess] = []
    fail = False

    def __init__(self, fn, max_bytes: int) -> None:
        self.fn, self.message, self.closed, self.frames = fn, None, False, None
        _InProcess.made.append(self)

    def send(self, message: bytes) -> bool:
        self.message = message
        return True

    def result(self):
        """``fn`` runs now, with what the parent sent (a real child reads it when it is sent)."""
        if self.fail:
            return None
        try:
            self.frames = self.fn(lambda: self.message)
        except Exception:  # a child that raises: no result, as from a real one
            self.frames = None
        return self.frames

    def close(self) -> None:
        self.closed = True


@pytest.fixture(autouse=True)
def _files_in_turn(monkeypatch):
    """Unit tests start no process: a folder's files are read in turn here (the forked pool,
    ``ftrun.trace.forked.map_forked``, has its own tests with an in-process child)."""
    monkeypatch.setattr(stream.forked, "FILE_WORKERS", 1)


@pytest.fixture
def halves(monkeypatch):
    """Every file, plain or gzip, is read in halves (the child in this process), in small chunks."""
    _InProcess.made, _InProcess.fail = [], False
    monkeypatch.setattr(stream, "Forked", _InProcess)
    monkeypatch.setattr(stream.forked, "usable", lambda: True)
    monkeypatch.setattr(stream, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(stream, "GZ_PARALLEL_BYTES", 0)
    monkeypatch.setattr(stream, "CHUNK", 512)
    monkeypatch.setattr(stream_source, "CHUNK", 512)  # (the source pours a chunk at a time too)
    monkeypatch.setattr(stream_source, "_INFLATED", 300)  # a gzip stream in pieces that cut across the seam
    return _InProcess
