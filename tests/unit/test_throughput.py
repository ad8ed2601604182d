"""The throughput decomposition (ftrun.check.throughput) and the per-send overlap slowdown
(ftrun.check.overlap), on hand-made event logs with known step times, and on tests/data."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftrun.check.throughput import decompose, explained_ratio, largest_reason, mean_decomposition, step_costs
from ftrun.layout import EventRecord
from train_fixtures import event_record

DATA = Path(__file__).parent.parent / "data" / "cpu_run"


def log(
    steps: int,
    window: int,
    delay: int,
    plain_ms: float,
    overlapped_ms: float,
    *,
    send_ms: float = 0.0,
    exposed_ms: float = 0.0,
    quorum_ms: float = 0.0,
) -> list[EventRecord]:
    """A rank's event log of ``steps`` steps under F=1, w=``window``, tau=``delay``: plain steps
    compute ``plain_ms``, steps with the send in flight ``overlapped_ms``; a send step adds
    ``send_ms`` of compute and ``quorum_ms`` of quorum wait, a sync step ``exposed_ms`` of wait."""
    out = []
    for s in range(1, steps + 1):
        local = (s - 1) % window + 1
        sent = 0 if local == window - delay else None
        synced = 0 if local == window else None
        in_flight = delay and window - delay < local <= window
        compute = overlapped_ms if in_flight else plain_ms
        if sent is not None:
            compute += send_ms
        extra = {}
        wait = 0.0
        if synced is not None:
            extra["exposed_s"] = exposed_ms / 1e3
            wait += exposed_ms
        if sent is not None:
            extra["quorum_s"] = quorum_ms / 1e3
            wait += quorum_ms
        out.append(
            EventRecord(
                **event_record(
                    s,
                    participants=2,
                    quorum_id=1,
                    loss=1.0,
                    step_time_s=(compute + wait) / 1e3,
                    sent=sent,
                    synced=synced,
                    commit=True if synced is not None else None,
                    t=float(s),
                    **extra,
                )
            )
        )
    return out


def test_decomposition_recovers_known_overlap_and_adds_up():
    d = decompose(log(40, 10, 3, plain_ms=100.0, overlapped_ms=120.0, send_ms=30.0, exposed_ms=5.0, quorum_ms=8.0))
    assert (d.plain_steps, d.overlapped_steps, d.comm_steps) == (24, 8, 8)  # per round: 6 plain, 2 between, send, sync
    assert d.median_plain_compute_s == pytest.approx(0.100)
    assert d.median_overlapped_compute_s == pytest.approx(0.120)
    assert d.overlap_slowdown == pytest.approx(1.2)
    assert d.overlap_slowdown_s == pytest.approx(8 * 0.020)
    # send steps compute 30 ms more; sync steps compute at the overlapped speed (20 ms more)
    assert d.comm_step_work_s == pytest.approx(4 * 0.030 + 4 * 0.020)
    assert d.exposed_data_s == pytest.approx(4 * 0.005) and d.exposed_control_s == pytest.approx(4 * 0.008)
    assert d.compute_at_base_s == pytest.approx(40 * 0.100)
    named = d.compute_at_base_s + d.overlap_slowdown_s + d.comm_step_work_s + d.exposed_data_s + d.exposed_control_s
    assert named + d.unaccounted_s == pytest.approx(d.loop_s)
    assert d.unaccounted_s == pytest.approx(0.0, abs=1e-9)  # every step sits on its class's median


def test_baseline_without_overlap_has_slowdown_one():
    d = decompose(log(40, 20, 0, plain_ms=100.0, overlapped_ms=999.0, exposed_ms=50.0))
    assert d.overlapped_steps == 0 and d.comm_steps == 2
    assert d.overlap_slowdown == 1.0 and d.overlap_slowdown_s == 0.0


def test_a_slow_plain_step_moves_the_base_not_the_overlap_median():
    recs = log(20, 10, 3, plain_ms=100.0, overlapped_ms=100.0)
    slow = recs[2]  # one of the 12 plain steps 60 ms slower
    recs[2] = EventRecord(**{**{f: getattr(slow, f) for f in slow.__struct_fields__}, "step_time_s": 0.160})
    d = decompose(recs)
    assert d.median_plain_compute_s == pytest.approx(0.100) and d.overlap_slowdown == pytest.approx(1.0)
    assert d.compute_at_base_s == pytest.approx(20 * 0.105)  # the mean: 100 + 60/12 ms
    assert d.overlap_slowdown_s == pytest.approx(4 * -0.005)  # the accounting is exact, against the mean
    assert d.unaccounted_s == pytest.approx(0.0, abs=1e-9)


def test_restart_ends_what_was_in_flight():
    recs = log(10, 10, 5, plain_ms=100.0, overlapped_ms=100.0)[:6]  # sent at step 5, step 6 in flight
    again = [EventRecord(**{**{f: getattr(r, f) for f in r.__struct_fields__}, "restart": 1}) for r in recs[5:]]
    kinds = [c.kind for c in step_costs(recs[:5] + again)]
    assert kinds == ["plain"] * 4 + ["comm", "plain"]


def test_no_plain_step_leaves_the_terms_unmeasured():
    d = decompose(log(2, 2, 1, plain_ms=100.0, overlapped_ms=100.0))  # every step sends or syncs
    assert d.plain_steps == 0 and d.compute_at_base_s is None and d.overlap_slowdown is None
    assert d.unaccounted_s == pytest.approx(d.loop_s)


def test_explained_ratio_and_the_largest_reason_name_the_overlap():
    # streaming hides its data but its overlapped steps run 30% slower; baseline waits 200 ms a sync
    a = mean_decomposition([decompose(log(40, 10, 3, plain_ms=100.0, overlapped_ms=130.0, exposed_ms=2.0))])
    b = mean_decomposition([decompose(log(40, 20, 0, plain_ms=100.0, overlapped_ms=100.0, exposed_ms=200.0))])
    measured = (a["steps"] / a["loop_s"]) / (b["steps"] / b["loop_s"])
    assert explained_ratio(a, b) == pytest.approx(measured, rel=1e-9)
    reason = largest_reason("streaming", a, "baseline", b, "gloo")
    assert "waits 9.8 ms per step less" in reason
    assert "its steps overlapping communication computed 30% longer on average (median +30%)" in reason
    assert "collectives share the CPU cores" in reason
    assert "SMs" in largest_reason("streaming", a, "baseline", b, "nccl")


def test_gain_that_became_throughput_says_so():
    a = mean_decomposition([decompose(log(40, 10, 3, plain_ms=100.0, overlapped_ms=100.0, exposed_ms=2.0))])
    b = mean_decomposition([decompose(log(40, 20, 0, plain_ms=100.0, overlapped_ms=100.0, exposed_ms=200.0))])
    assert "the gain became throughput" in largest_reason("streaming", a, "baseline", b, "gloo")


def test_inspect_reports_overlap_per_send_and_worker():
    from ftrun.check.analyze import analyze

    report = analyze([DATA])
    ov = report.to_json()["overlap"]
    assert len(ov["per_send"]) == 4  # two sends per replica in the window (steps 25->30, 35->40)
    assert {(s["send_step"], s["sync_step"]) for s in ov["per_send"]} == {(25, 30), (35, 40)}
    assert all(s["overlapped_steps"] == 4 for s in ov["per_send"])  # the tau - 1 steps between, no send/sync step
    for w in ov["workers"]:
        assert w["overlapped_steps"] == 8 and w["slowdown"] == pytest.approx(
            w["median_overlapped_ms"] / w["median_other_ms"], rel=1e-2
        )


def test_plan_adds_the_overlap_slowdown_to_the_steps_between_send_and_sync():
    from ftrun.plan import Workload, plain, simulate
    from ftrun.schedule import Schedule

    sched = Schedule(2, 20, 5)  # w = 10: steps 6..9 and 16..19 sit between a send and its sync
    fast = simulate(Workload(0.020, (1000, 1000), 2), sched, 1e12, 0.0)
    slow = simulate(Workload(0.020, (1000, 1000), 2, overlap_slowdown=1.5), sched, 1e12, 0.0)
    assert slow.compute_s == pytest.approx(fast.compute_s + 8 * 0.010)
    assert slow.wall_s == pytest.approx(fast.wall_s + 8 * 0.010)
    base = simulate(Workload(0.020, (2000,), 2, overlap_slowdown=1.5), plain(sched), 1e12, 0.0)
    assert base.compute_s == pytest.approx(20 * 0.020)  # tau = 0: nothing computes while in flight


def test_plan_from_a_run_takes_its_measured_slowdown(tmp_path):
    """--from: the run's overlap slowdown, and a step_s that gives back the run's compute."""
    import msgspec

    from ftrun.plan.measure import measure_overlap

    events = tmp_path / "events"
    events.mkdir()
    for r in (0, 1):
        recs = log(40, 10, 3, plain_ms=100.0, overlapped_ms=125.0)
        (events / f"replica{r}_rank0.jsonl").write_bytes(b"\n".join(msgspec.json.encode(x) for x in recs) + b"\n")
    slowdown, share = measure_overlap([tmp_path], 2)
    assert slowdown == pytest.approx(1.25) and share == pytest.approx(8 / 40)
