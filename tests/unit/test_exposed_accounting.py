"""Exposed and hidden communication on hand-made traces (issue 40 item 8): ftrun's own wait for a
fragment's collectives right before torchft's ``perform_sync`` (``ftrun::sketch::wait``) is
counted as exposed, one interval to the end of torchft's wait; hidden is only the part of
send→done after the send's own span and before the training thread began to wait, and what flew
while the thread was still issuing the send is its own figure (issuing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ftrun.check import comm
from ftrun.torchft_compat import LABELS, SKETCH_WAIT, ftrun_step_label
from ftrun.trace.spans import extract
from ftrun.trace.stream import TraceFile

MAIN, GLOO = 1, 7  # the training thread, a Gloo worker thread


def _x(name: str, ts: float, dur: float, tid: int = MAIN) -> dict:
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def _step(step: int, t0: float, *, send_at: float | None, sync_at: float | None, pre_wait: float | None) -> list[dict]:
    """One 1000 us training step: a send at ``t0 + send_at`` (prepare_sync, one allreduce issued
    10 us in, its Gloo collective running 300 us from there), a sync at ``t0 + sync_at`` (with
    ``pre_wait`` us of ftrun's wait right before it when given; torchft's wait, restore, commit)."""
    ev = [_x(ftrun_step_label(step, step // 4), t0, 999)]
    if send_at is not None:
        s = t0 + send_at
        ev += [
            _x(LABELS.prepare_sync, s, 40),
            _x(LABELS.allreduce, s + 10, 5),
            _x("gloo:all_reduce", s + 12, 300, GLOO),
        ]
    if sync_at is not None:
        s = t0 + sync_at
        if pre_wait is not None:
            ev.append(_x(SKETCH_WAIT, s - pre_wait - 5, pre_wait))  # then 5 us of sketching the SUMs
        ev += [
            _x(LABELS.perform_sync, s, 200),
            _x(LABELS.wait, s + 20, 2),  # torchft's work.wait()s (20 us: the callbacks) come first
            _x(LABELS.restore_parameters, s + 30, 10),
            _x(LABELS.should_commit, s + 50, 20),
        ]
    return ev


def _timings(tmp_path: Path, events: list[dict]) -> list[comm.SyncTiming]:
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events}))
    spans = extract(p, TraceFile(p))
    scs = comm.attribute(spans.sends, spans.collectives)
    out = []
    for sync in spans.syncs:
        sc = next((c for c in reversed(scs) if c.issue_ts <= sync.span.ts), None)
        out.append(comm.sync_timing(sync, sc, 0))
    return out


def test_plain_diloco_pre_wait_is_exposed_and_nothing_is_hidden(tmp_path: Path) -> None:
    """τ = 0: send and sync in one step; ftrun waits 250 us before perform_sync."""
    (t,) = _timings(tmp_path, _step(4, 4000, send_at=100, sync_at=400, pre_wait=250))
    # issue 4110, collective done 4412; the thread waits from 4145 (ftrun's wait) to 4422 (torchft's
    # wait end): it waited on the fragment in flight, so the fragment was done for it at 4422
    assert t.send_to_done_ms == pytest.approx((4422 - 4110) / 1000)
    # every moment in flight in one bucket: issuing, hidden, exposed
    assert t.issuing_ms + t.hidden_ms + t.exposed_ms == pytest.approx(t.send_to_done_ms)
    assert t.exposed_ms == pytest.approx((4422 - 4145) / 1000)
    assert t.issuing_ms == pytest.approx((4140 - 4110) / 1000)  # the send's own issuing: not hidden
    assert t.hidden_ms == pytest.approx((4145 - 4140) / 1000)  # between its send and ftrun's wait
    assert t.hidden_ms / t.send_to_done_ms < 0.02


def test_without_the_pre_wait_torchfts_wait_is_the_same_exposed_time(tmp_path: Path) -> None:
    """``--no-sketches``: torchft's perform_sync waits first thing; the blocked interval is the same
    length whichever of the two waited (the instrument moves no wait, only its span)."""
    with_ = _timings(tmp_path, _step(4, 4000, send_at=100, sync_at=400, pre_wait=250))[0]
    # torchft alone: perform_sync starts where ftrun's wait did, its wait()s take what ftrun's took
    ev = _step(4, 4000, send_at=100, sync_at=None, pre_wait=None)
    s = 4145
    ev += [
        _x(LABELS.perform_sync, s, 400),
        _x(LABELS.wait, s + 275, 2),
        _x(LABELS.restore_parameters, s + 290, 10),
        _x(LABELS.should_commit, s + 310, 20),
    ]
    (without,) = _timings(tmp_path, ev)
    assert without.exposed_ms == pytest.approx(with_.exposed_ms)
    assert without.hidden_ms == pytest.approx(with_.hidden_ms)


def test_streaming_sync_hides_what_flew_before_it_waited(tmp_path: Path) -> None:
    """τ > 0: sent at step 2, synced at step 4, its collective done long before: all hidden."""
    ev = _step(2, 2000, send_at=100, sync_at=None, pre_wait=None)
    ev += _step(3, 3000, send_at=None, sync_at=None, pre_wait=None)
    ev += _step(4, 4000, send_at=None, sync_at=400, pre_wait=3)
    (t,) = _timings(tmp_path, ev)
    assert t.send_to_done_ms == pytest.approx(0.302)
    # issued 4110 in a send (prepare_sync) to 4140: 30 us in flight while the thread issued it
    assert t.issuing_ms == pytest.approx(0.030) and t.hidden_ms == pytest.approx(0.272)
    assert t.exposed_ms == pytest.approx((4422 - 4392) / 1000)  # ftrun's 3 us, the sketch, torchft's wait


def test_a_pre_wait_of_another_step_or_sync_is_not_this_syncs(tmp_path: Path) -> None:
    """A ``ftrun::sketch::wait`` before the sync's step began, or before the thread's previous
    perform_sync, belongs to no later sync."""
    ev = _step(2, 2000, send_at=100, sync_at=None, pre_wait=None)
    ev.append(_x(SKETCH_WAIT, 2900, 50))  # an orphan (its perform_sync left the window, say)
    ev += _step(3, 3000, send_at=None, sync_at=300, pre_wait=None)
    ev.append(_x(SKETCH_WAIT, 3600, 50))  # after step 3's sync, before step 4's: in step 3
    ev += _step(4, 4000, send_at=None, sync_at=400, pre_wait=None)
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    syncs = extract(p, TraceFile(p)).syncs
    assert [s.pre_wait for s in syncs] == [None, None]
    t = comm.sync_timing(syncs[1], None, None)
    assert t.exposed_ms == pytest.approx(0.022) and t.hidden_ms is None  # perform_sync start -> wait end


def test_a_pre_wait_on_another_thread_is_not_the_training_threads(tmp_path: Path) -> None:
    ev = _step(4, 4000, send_at=100, sync_at=400, pre_wait=None)
    ev.append(_x(SKETCH_WAIT, 4200, 100, tid=GLOO))
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    (sync,) = extract(p, TraceFile(p)).syncs
    assert sync.pre_wait is None
    assert comm.blocked_from(sync) == sync.span.ts


def test_exposed_is_not_clamped_to_send_to_done(tmp_path: Path) -> None:
    """A sync that began after its fragment was in and then blocked longer than the fragment flew
    keeps its figure (the views say it is no wait on the link); everything in flight was hidden."""
    ev = _step(4, 4000, send_at=100, sync_at=None, pre_wait=None)  # issue 4110, done 4412
    ev += [_x(LABELS.perform_sync, 4500, 900), _x(LABELS.wait, 4500 + 800, 2)]
    (t,) = _timings(tmp_path, ev)
    assert t.exposed_ms == pytest.approx((5302 - 4500) / 1000)
    assert t.send_to_done_ms == pytest.approx((4412 - 4110) / 1000)
    assert t.exposed_ms > t.send_to_done_ms
    assert t.issuing_ms + t.hidden_ms == pytest.approx(t.send_to_done_ms)  # no wait on it at all
    assert t.issuing_ms == pytest.approx(0.030)


def test_waiting_in_flight_the_fragment_is_done_when_the_wait_ends(tmp_path: Path) -> None:
    """The training thread waits from 4150, before the collective ends (4412), to 4942: the
    completion callbacks ran in that wait, so send→done ends there and exposed never exceeds it."""
    ev = _step(4, 4000, send_at=100, sync_at=None, pre_wait=None)
    ev += [_x(LABELS.perform_sync, 4150, 900), _x(LABELS.wait, 4140 + 800, 2)]
    (t,) = _timings(tmp_path, ev)
    assert t.exposed_ms == pytest.approx((4942 - 4150) / 1000)
    assert t.send_to_done_ms == pytest.approx((4942 - 4110) / 1000)
    assert t.issuing_ms == pytest.approx((4140 - 4110) / 1000)  # its send's span ended at 4140
    assert t.hidden_ms == pytest.approx((4150 - 4140) / 1000)


def test_plans_sync_work_starts_at_the_first_wait(tmp_path: Path) -> None:
    """``sync_costs``' sync work (the sync's own work after its data is in) reads the same first
    wait: the numeric check's sketch of the SUMs, between its wait and perform_sync, is counted."""
    from ftrun.trace.sync_costs import sync_costs

    ev = _step(4, 4000, send_at=100, sync_at=400, pre_wait=250)
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    got = sync_costs([p], [0])
    # collective done at 4412 (after ftrun's wait began at 4145): torchft's wait ends at 4422
    assert got.sync_work_s == pytest.approx((4422 - 4412) / 1e6)
    ev = _step(4, 4000, send_at=100, sync_at=None, pre_wait=None)
    ev += _step(5, 5000, send_at=None, sync_at=400, pre_wait=250)  # done long before: all of it is work
    p.write_text(json.dumps({"traceEvents": ev}))
    got = sync_costs([p], [0])
    assert got.sync_work_s == pytest.approx((5422 - 5145) / 1e6)
    assert got.per_sync == ((0, 5, pytest.approx((5422 - 5145) / 1e6)),)
