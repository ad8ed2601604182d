"""What a quorum waits for in ``ftrun plan --check``'s replay: where in a step each group's own
work falls relative to the points that align the groups, the process group's reconfiguration
inside a quorum, a run's own should_commit times (hand-computed timelines; hand-made event logs,
lifecycle logs and traces; no process).

Reference: step 100 ms, R = 2, 8 Mbit/s and 10 ms: an allreduce of 100 kB holds 120 ms (a sync
with tau = 0 always blocks, so it aligns the groups); a quorum's held round trip is 20 ms.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from ftrun.plan import Workload, simulate
from ftrun.plan.measure import commit_times, measure_arrivals, measure_reconfigure
from ftrun.schedule import Schedule
from ftrun.trace.sync_costs import sync_costs
from train_fixtures import event_record

BW, LAT = 8e6, 0.01
HOLD = 0.02  # linkcost.control_s("quorum", 10 ms)
PLAIN4 = Schedule(1, 4, 0)  # quorum, send and blocking sync at steps 4 and 8


def test_what_a_group_does_after_its_sync_data_delays_it_at_the_next_quorum() -> None:
    # at the sync of step 4 group 1's should_commit takes 20 ms longer than group 0's: the sync
    # aligned the groups when the allreduce finished, so group 1 reaches the quorum of step 8
    # 20 ms after group 0 and the mean group waits 10 ms there
    after = Workload(0.1, (100_000,), 2, replay=((1, (0.0, 0.0)),), replay_sync=((4, (-0.01, 0.01)),))
    assert simulate(after, PLAIN4, BW, LAT, steps=8).exposed_control_s == pytest.approx(2 * HOLD + 0.01)
    # the same 20 ms counted before the step's quorum (where the replay used to put it) lands
    # on the quorum of step 4 instead, and the sync erases it
    before = Workload(0.1, (100_000,), 2, replay=((4, (-0.01, 0.01)),))
    assert simulate(before, PLAIN4, BW, LAT, steps=8).exposed_control_s == pytest.approx(2 * HOLD + 0.01)
    assert simulate(before, PLAIN4, BW, LAT, steps=4).exposed_control_s == pytest.approx(HOLD + 0.01)
    assert simulate(after, PLAIN4, BW, LAT, steps=4).exposed_control_s == pytest.approx(HOLD)


def test_the_send_cpu_work_after_a_quorum_carries_to_the_next_one_when_no_sync_aligns() -> None:
    # tau = 2 on a link that costs nothing: no sync blocks, nothing aligns the groups but the
    # quorums (steps 2, 6). Group 1's send takes 20 ms longer at step 2: after that quorum.
    sched = Schedule(1, 4, 2)
    after = Workload(0.1, (1,), 2, replay=((1, (0.0, 0.0)),), replay_send=((2, (-0.01, 0.01)),))
    assert simulate(after, sched, 1e12, 0.0, steps=5).exposed_control_s == pytest.approx(0.0)
    assert simulate(after, sched, 1e12, 0.0, steps=8).exposed_control_s == pytest.approx(0.01)
    before = Workload(0.1, (1,), 2, replay=((2, (-0.01, 0.01)),))
    assert simulate(before, sched, 1e12, 0.0, steps=5).exposed_control_s == pytest.approx(0.01)


def test_a_reconfiguring_quorum_and_a_runs_own_commits_are_control_time() -> None:
    # the quorum of step 4 reconfigured the process group (15 ms); the sync of step 4 had a 20 ms
    # should_commit on average over the groups, the one of step 8 the run's median (1 ms)
    w = Workload(0.1, (100_000,), 2, commit_s=0.001, commit_times=((4, 0.02),), reconfigure=((4, 0.015),))
    p = simulate(w, PLAIN4, BW, LAT, steps=8)
    assert p.exposed_control_s == pytest.approx(2 * HOLD + 0.015 + 0.02 + 0.001)
    plain = simulate(Workload(0.1, (100_000,), 2, commit_s=0.001), PLAIN4, BW, LAT, steps=8)
    assert p.wall_s - plain.wall_s == pytest.approx(0.015 + 0.019)


def _write_run(run: Path, per_group: list[list[dict]], lifecycle: list[list[dict]] | None = None) -> Path:
    (run / "events" / "lifecycle").mkdir(parents=True)
    for r, recs in enumerate(per_group):
        (run / "events" / f"replica{r}_rank0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in recs))
    for r, evs in enumerate(lifecycle or []):
        (run / "events" / "lifecycle" / f"replica{r}_rank0.jsonl").write_text(
            "".join(json.dumps(e) + "\n" for e in evs)
        )
    return run


def _group(
    t0: float, steps: int, sync_step: int, send_s: float, tail_s: float, commit_s: float, exposed_s: float = 0.05
) -> list[dict]:
    """100 ms of compute a step; at ``sync_step`` (tau = 0) a quorum of 0 s, a send of ``send_s``,
    a sync whose data wait is ``exposed_s`` and that spends ``tail_s`` after it (``commit_s`` of it
    in should_commit), as the worker records them (``sync_s`` = the whole perform_sync)."""
    t, out = t0, []
    for step in range(1, steps + 1):
        if step == sync_step:
            dt = 0.1 + send_s + exposed_s + tail_s
            rec = event_record(
                step,
                step_time_s=dt,
                sent=0,
                synced=0,
                quorum_s=0.0,
                send_s=send_s,
                sync_s=exposed_s + tail_s,
                exposed_s=exposed_s,
                commit_s=commit_s,
            )
        else:
            dt = 0.1
            rec = event_record(step, step_time_s=dt)
        t += dt
        rec["t"] = t
        out.append(rec)
    return out


def test_the_replay_splits_a_step_where_the_groups_align(tmp_path: Path) -> None:
    # group 1's send takes 10 ms longer (after the quorum) and its sync 30 ms longer after its
    # data (20 ms more should_commit, 10 ms more outer step): neither is before the quorum
    run = _write_run(
        tmp_path / "r",
        [_group(1000.0, 6, 3, 0.005, 0.005, 0.001), _group(1000.0, 6, 3, 0.015, 0.035, 0.021)],
    )
    arr = measure_arrivals([run], 2, hold_s=0.0)
    assert dict(arr.replay)[3] == pytest.approx((0.0, 0.0))
    assert dict(arr.replay_send)[3] == pytest.approx((-0.005, 0.005))
    assert dict(arr.replay_sync)[3] == pytest.approx((-0.015, 0.015))
    # a trace that measured the sync's own work inside its wait for both groups adds it (8 ms more
    # on group 1); measured for one group only, it says nothing about the difference
    both = measure_arrivals([run], 2, 0.0, own_work={(0, 3): 0.001, (1, 3): 0.009})
    assert dict(both.replay_sync)[3] == pytest.approx((-0.019, 0.019))
    one = measure_arrivals([run], 2, 0.0, own_work={(1, 3): 0.009})
    assert dict(one.replay_sync)[3] == pytest.approx((-0.015, 0.015))
    ((step, commit),) = commit_times([run], 2)
    assert (step, commit) == (3, pytest.approx(0.011))


def test_the_reconfigure_is_the_later_groups_configure_in_the_step_it_ran_in(tmp_path: Path) -> None:
    recs = [_group(1000.0, 4, 2, 0.005, 0.005, 0.001), _group(1000.0, 4, 2, 0.005, 0.005, 0.001)]
    # step 2 spans 1000.1 .. 1000.26 on both groups' clocks
    life = [
        [{"event": "configure", "incarnation": 0, "t_start": 1000.11, "t": 1000.114, "quorum_id": 1}],
        [{"event": "configure", "incarnation": 0, "t_start": 1000.11, "t": 1000.127, "quorum_id": 1}],
    ]
    run = _write_run(tmp_path / "r", recs, life)
    got = measure_reconfigure([run], 2)
    assert [s for s, _ in got] == [2]
    assert got[0][1] == pytest.approx(0.017)
    assert measure_reconfigure([_write_run(tmp_path / "none", recs)], 2) == ()


def test_sync_costs_attribute_each_traced_sync_to_its_group_and_step(tmp_path: Path) -> None:
    ev = [
        {"name": "ftrun::step#40 manager_step=1", "ts": 0, "dur": 50000, "tid": 5},
        {"name": "gloo:all_reduce", "ts": 1000, "dur": 20000, "tid": 1},
        {"name": "torchft::local_sgd::perform_sync", "ts": 10000, "dur": 30000, "tid": 5},
        {"name": "torchft::local_sgd::wait", "ts": 12000, "dur": 12000, "tid": 5},
    ]
    path = tmp_path / "replica1_rank0.21.pt.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": [{"ph": "X", "pid": 1, **e} for e in ev]}, f)
    c = sync_costs([path], [1])
    assert c.sync_work_s == pytest.approx(0.003)  # the wait ends 3 ms after the last collective
    ((replica, step, work),) = c.per_sync
    assert (replica, step, work) == (1, 40, pytest.approx(0.003))
    assert sync_costs([path]).per_sync == ()  # no replica given: nothing attributed


def test_a_what_if_leaves_a_blocking_sync_with_the_measured_spread_of_the_syncs_tails(tmp_path: Path) -> None:
    import math

    # statistics instead of a replay: groups that leave a blocking sync sd = 20 ms apart (and do not
    # drift while stepping) meet at the next quorum 20 / sqrt(pi) ms after the mean group, on average
    w = Workload(0.1, (100_000,), 2, sync_spread_s=0.02)
    p = simulate(w, PLAIN4, BW, LAT, steps=8)
    assert p.exposed_control_s == pytest.approx(2 * HOLD + 0.02 / math.sqrt(math.pi), rel=1e-3)
    assert simulate(w, PLAIN4, BW, LAT, steps=4).exposed_control_s == pytest.approx(HOLD)  # the first: no sync before
    # a replay knows each group's own tail: the statistic is not added on top of it
    replayed = Workload(0.1, (100_000,), 2, sync_spread_s=0.02, replay=((1, (0.0, 0.0)),))
    assert simulate(replayed, PLAIN4, BW, LAT, steps=8).exposed_control_s == pytest.approx(2 * HOLD)
    # measured: group 1's tails are 30 ms longer at one sync and equal at another; deviations +-15 ms
    # and 0, so the spread is sqrt((2 x 15^2 + 0) / 4 x 2) = 15 ms
    recs = [_group(1000.0, 8, 3, 0.005, 0.005, 0.001), _group(1000.0, 8, 3, 0.005, 0.035, 0.001)]
    for r in range(2):  # a second sync at step 6, alike on both groups
        x = recs[r][5]
        x.update(sent=0, synced=0, quorum_s=0.0, send_s=0.0, sync_s=0.05, exposed_s=0.05, commit_s=0.0)
    arr = measure_arrivals([_write_run(tmp_path / "r", recs)], 2, hold_s=0.0)
    assert arr.sync_spread_s == pytest.approx(0.015)
