"""torchft_compat.participants: the quorum's participant count, without torchft's per-call
profiler op once the quorum is known; torchft's own num_participants otherwise."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from ftrun.torchft_compat import participants


class FakeManager:
    def __init__(self, fut: Future | None, n: int = 3) -> None:
        self._quorum_future = fut
        self._participating_replica_world_size = n
        self.asked = 0

    def num_participants(self) -> int:
        self.asked += 1
        assert self._quorum_future is not None
        self._quorum_future.result()  # torchft: wait_quorum, then the count
        assert self._participating_replica_world_size >= 0, "internal error"
        return self._participating_replica_world_size


def done(value=None, error: Exception | None = None) -> Future:
    f: Future = Future()
    f.set_exception(error) if error is not None else f.set_result(value)
    return f


def test_no_quorum_yet_is_none():
    assert participants(FakeManager(None)) is None


def test_a_known_quorum_is_read_without_torchfts_call():
    m = FakeManager(done(), n=2)
    assert participants(m) == 2
    assert m.asked == 0


def test_a_pending_quorum_goes_through_torchft():
    class Pending(Future):
        def done(self) -> bool:
            return False

        def result(self, timeout=None):
            return None

    m = FakeManager(Pending(), n=4)
    assert participants(m) == 4
    assert m.asked == 1


def test_a_failed_quorum_raises_torchfts_error():
    m = FakeManager(done(error=TimeoutError("quorum timed out")))
    with pytest.raises(TimeoutError, match="quorum timed out"):
        participants(m)
    assert m.asked == 1


def test_an_unset_count_goes_through_torchft():
    m = FakeManager(done(), n=-1)
    with pytest.raises(AssertionError):
        participants(m)  # torchft's own check ("internal error") fires, not a silent -1
