"""Exposed communication split into data and control planes (ftrun.check.comm), on hand-made spans."""

from __future__ import annotations

import pytest

from ftrun.check import comm
from ftrun.trace.spans import Allreduce, Collective, Send, Span, Sync

T, Q = (1, 1), (1, 7)  # training thread, torchft's quorum thread


def _send(ts: float) -> Send:
    return Send(Span(ts, ts + 2, T), (Allreduce(Span(ts + 0.5, ts + 1, T), ((4,),), ts + 0.6),))


def _step_of(bounds: list[tuple[float, float, int]]):
    return lambda ts: next((n for a, b, n in bounds if a <= ts <= b), None)


def test_control_is_quorum_before_send_plus_should_commit() -> None:
    steps = _step_of([(0, 99, 1), (100, 199, 2)])
    s = _send(150)
    quorums = [
        Span(10, 40, T),  # an earlier step's quorum: not this send's
        Span(120, 148, T),  # start_quorum right before prepare_sync: this one (28 us)
        Span(130, 149, Q),  # another thread: never
        Span(150.5, 150.6, T),  # nested in manager.allreduce (after the send began): never
    ]
    q = comm.quorum_before(s, sorted(quorums, key=lambda x: x.ts), steps)
    assert q == Span(120, 148, T)
    sync = Sync(Span(160, 190, T), Span(165, 170, T), Span(175, 180, T), Span(180, 186, T), None)
    (sc,) = comm.attribute([s], [Collective("gloo:all_reduce", Span(151, 170, (1, 2)), ((4,),), 4)])
    t = comm.sync_timing(sync, sc, 0, q)
    assert t.exposed_data_ms == pytest.approx(0.010)  # perform_sync start -> end of torchft::local_sgd::wait
    assert t.quorum_ms == pytest.approx(0.028)
    assert t.exposed_control_ms == pytest.approx(0.028 + 0.006)  # + should_commit


def test_quorum_in_another_step_is_not_the_sends() -> None:
    steps = _step_of([(0, 99, 1), (100, 199, 2)])
    assert comm.quorum_before(_send(150), [Span(50, 90, T)], steps) is None


def test_without_send_only_should_commit_counts() -> None:
    sync = Sync(Span(160, 190, T), None, Span(175, 180, T), Span(180, 183, T), None)
    t = comm.sync_timing(sync, None, None)
    assert t.quorum_ms is None and t.exposed_control_ms == pytest.approx(0.003)
