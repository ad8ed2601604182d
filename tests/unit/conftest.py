"""Fixtures shared by the unit tests (tests/conftest.py holds the suite-wide rules)."""

from __future__ import annotations

import signal

import pytest


@pytest.fixture
def deadline():
    """Fail (not hang) a test that blocks for more than 10 s (a read waiting on a FIFO)."""

    def boom(signum, frame):
        raise TimeoutError("blocked")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)
