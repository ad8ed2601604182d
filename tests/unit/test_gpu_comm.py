"""Queue delay, its cause and ``serialized`` on CUDA-shaped and Gloo traces (ftrun.check.gpu_comm)."""

from __future__ import annotations

from pathlib import Path

import pytest

import kineto_cuda as kc
from ftrun.check import comm, gpu_comm
from ftrun.check.analyze import analyze
from ftrun.trace.spans import Allreduce, Collective, Send, Span, Sync, TraceSpans

DATA = Path(__file__).parent.parent / "data" / "cpu_run"


def _sync_rows(report):
    return {(e.replica, e.observed_step): e for e in report.events if e.kind == "sync"}


def _queued_run(tmp_path: Path, extra_us: float = 2000.0, gap_us: float = 0.0) -> Path:
    """Each replica's first kernel of fragment 1's send queues behind fragment 0's last kernel,
    starting ``gap_us`` after its end (negative: before it, as real clocks show)."""
    run = kc.convert_run(DATA, tmp_path / "run")
    for p in (run / "traces").glob("*.gz"):
        tr = kc.read(p)
        first_f1 = len(kc.kernels(tr)) - 16  # fragment 1's send allreduces 16 tensors (manifest)
        kc.write(kc.queue_behind(tr, first_f1, extra_us, gap_us), p)
    return run


def test_converted_run_has_no_serialized_collective(tmp_path):
    rep = analyze([kc.convert_run(DATA, tmp_path / "run")])
    syncs = _sync_rows(rep)
    assert syncs and all(e.sync.serialized is False and e.sync.serialized_collectives == 0 for e in syncs.values())
    sends = [e for e in rep.events if e.kind == "send"]
    assert all(e.send.queue_delay_ms is not None for e in sends)


def test_kernel_queued_behind_another_fragments_kernel_is_flagged(tmp_path):
    rep = analyze([_queued_run(tmp_path)])
    syncs = _sync_rows(rep)
    flagged = {k: e.sync.serialized_collectives for k, e in syncs.items() if e.sync.serialized}
    assert flagged == {(0, 40): 1, (1, 40): 1}  # fragment 1's sync on both replicas; fragment 0's not
    assert rep.verdict == "pass"  # a cost, not a schedule error


@pytest.mark.parametrize("gap_us", [-13.0, -3.7, -0.1, 10.0, 84.0, 264.0])
def test_real_clock_gaps_are_still_held(tmp_path, gap_us):
    """Real queued kernels start up to 13 us before their predecessor ends and up to 264 us after."""
    rep = analyze([_queued_run(tmp_path, gap_us=gap_us)])
    flagged = {k: e.sync.serialized_collectives for k, e in _sync_rows(rep).items() if e.sync.serialized}
    assert flagged == {(0, 40): 1, (1, 40): 1}
    sends = {(e.replica, e.observed_step): e for e in rep.events if e.kind == "send"}
    assert sends[(0, 35)].send.queue_cause == sends[(1, 35)].send.queue_cause == "previous collective"


@pytest.mark.parametrize("gap_us", [-20.0, 400.0])
def test_starts_outside_the_window_are_not_held(tmp_path, gap_us):
    rep = analyze([_queued_run(tmp_path, gap_us=gap_us)])
    assert not any(e.sync.serialized for e in _sync_rows(rep).values())


def test_overlapping_kernels_keep_the_cause_split():
    """b starts 5 us before a ends (same stream): held by a; c (another stream) is not."""
    a = Collective("k", Span(100.0, 1000.0, (0, 20)), None, None, launch_ts=90.0, stream=(0, 20), kernels=1)
    b = Collective("k", Span(995.0, 1100.0, (0, 20)), None, None, launch_ts=500.0, stream=(0, 20), kernels=1)
    sends = [
        Send(Span(0, 50, "t"), (Allreduce(Span(80, 95, "t"), None, 80.0),)),
        Send(Span(400, 600, "t"), (Allreduce(Span(480, 520, "t"), None, 480.0),)),
    ]
    t = TraceSpans(Path("x"), "ftrun", [], sends, [], [a, b], stream_waits=[Span(490.0, 492.0, "t")])
    q = gpu_comm.queueing(t, comm.attribute(t.sends, t.collectives))
    assert [(x.cause, x.serialized, x.blocker_send) for x in q] == [
        (None, False, None),
        ("previous collective", True, 0),
    ]
    assert gpu_comm.EARLY_US == 15.0 and gpu_comm.PIN_KERNEL_US == 300.0


def test_queue_just_past_the_pin_is_not_serialized_when_started_late():
    """A kernel that starts well after the blocker ended was not held by it."""

    def coll(ts, end, launch, stream=(0, 20)):
        return Collective(
            "ncclDevKernel_AllReduce", Span(ts, end, stream), None, None, launch_ts=launch, stream=stream, kernels=1
        )

    a = coll(100.0, 1000.0, 90.0)
    b_pinned = coll(1010.0, 1100.0, 500.0)
    b_late = coll(1400.0, 1500.0, 500.0)
    b_other_stream = coll(1010.0, 1100.0, 500.0, stream=(0, 21))
    for b, expect in ((b_pinned, True), (b_late, False), (b_other_stream, False)):
        sends = [
            Send(Span(0, 50, "t"), (Allreduce(Span(80, 95, "t"), None, 80.0),)),
            Send(Span(400, 600, "t"), (Allreduce(Span(480, 520, "t"), None, 480.0),)),
        ]
        t = TraceSpans(Path("x"), "ftrun", [], sends, [], sorted([a, b], key=lambda c: c.span.ts))
        comms = comm.attribute(t.sends, t.collectives)
        q = gpu_comm.queueing(t, comms)
        assert gpu_comm.send_queue(q, 1).serialized == int(expect), (b, q)
        assert gpu_comm.send_queue(q, 0).serialized == 0


def test_stream_wait_is_the_cause_without_a_blocking_kernel():
    k = Collective(
        "ncclDevKernel_AllReduce", Span(900.0, 950.0, (0, 20)), None, None, launch_ts=500.0, stream=(0, 20), kernels=1
    )
    send = Send(Span(400, 600, "t"), (Allreduce(Span(480, 520, "t"), None, 480.0),))
    t = TraceSpans(Path("x"), "ftrun", [], [send], [], [k], stream_waits=[Span(490.0, 492.0, "t")])
    q = gpu_comm.queueing(t, comm.attribute(t.sends, t.collectives))
    assert [(x.cause, x.serialized, x.delay_us) for x in q] == [("stream wait", False, 400.0)]
    t.stream_waits = [Span(490.0, 492.0, "other thread")]
    q = gpu_comm.queueing(t, comm.attribute(t.sends, t.collectives))
    assert q[0].cause is None


def test_commit_synchronizes_shown_apart():
    sc = Span(100.0, 400.0, "t")
    s = Sync(Span(0, 500, "t"), None, Span(50, 90, "t"), sc, None, (Span(120, 220, "t"), Span(230, 250, "t")))
    assert gpu_comm.commit_sync_ms(s) == 0.12
    assert gpu_comm.commit_sync_ms(Sync(Span(0, 500, "t"), None, None, None, None)) is None


def test_real_gloo_run_commit_sync_read():
    rep = analyze([DATA])
    syncs = [e.sync for e in rep.events if e.kind == "sync"]
    assert syncs and all(s.commit_sync_ms is not None and s.commit_sync_ms <= s.should_commit_ms for s in syncs)
    assert all(s.serialized is False for s in syncs)
