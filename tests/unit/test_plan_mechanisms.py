"""ftrun.plan's model of what the link emulator does not replace, and of a run's own drift
(hand-computed timelines; hand-made traces and event logs; no process).

Reference: step 100 ms, R = 2, 8 Mbit/s and 10 ms: an allreduce of 100 kB holds 120 ms.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

from ftrun.plan import Workload, data_hidden_bandwidth, simulate
from ftrun.plan.measure import drift_spread
from ftrun.schedule import Schedule
from ftrun.trace.sync_costs import sync_costs

BW, LAT = 8e6, 0.01
PLAIN = Schedule(1, 10, 0)


def test_the_send_issues_its_collectives_while_it_runs() -> None:
    # tau = 0: the hold (120 ms) starts when the send's 30 ms of CPU work starts, so 90 ms are left at the sync
    base = Workload(0.1, (100_000,), 2)
    p = simulate(Workload(0.1, (100_000,), 2, send_s=0.03), PLAIN, BW, LAT, steps=10)
    assert p.exposed_data_s == pytest.approx(0.09)
    assert p.wall_s == pytest.approx(simulate(base, PLAIN, BW, LAT, steps=10).wall_s - 0.03)
    assert p.compute_s == pytest.approx(1.0)


def test_a_collective_completes_at_the_later_of_its_hold_and_its_real_chain() -> None:
    # 9 tensors on 2 threads: 5 real allreduces of 40 ms = 200 ms > the 120 ms hold, on the profiled steps only
    w = Workload(
        0.1, (100_000,), 2, real_collective_s=0.04, collective_threads=2, fragment_tensors=(9,), real_steps=((9, 10),)
    )
    p = simulate(w, PLAIN, BW, LAT, steps=20)  # syncs at 10 (profiled) and 20 (not)
    assert p.exposed_data_s == pytest.approx(0.2 + 0.12)
    fast = Workload(
        0.1, (100_000,), 2, real_collective_s=0.01, collective_threads=2, fragment_tensors=(9,), real_steps=((1, 20),)
    )
    assert simulate(fast, PLAIN, BW, LAT, steps=20).exposed_data_s == pytest.approx(2 * 0.12)  # the hold covers 50 ms


def test_a_sync_runs_its_own_work_after_its_data_and_that_is_no_wait_for_data() -> None:
    sched = Schedule(2, 20, 5)  # 500 ms after each send: the 120 ms hold is hidden
    w = Workload(0.1, (100_000, 100_000), 2, sync_work_s=0.004)
    p = simulate(w, sched, BW, LAT, steps=20)
    assert p.exposed_data_s == pytest.approx(2 * 0.004)
    assert data_hidden_bandwidth(w, sched, LAT, 1e5, 1e12) == data_hidden_bandwidth(
        Workload(0.1, (100_000, 100_000), 2), sched, LAT, 1e5, 1e12
    )
    assert (
        simulate(Workload(0.1, (100_000,), 1, sync_work_s=0.004), PLAIN, BW, LAT).exposed_data_s == 0.0
    )  # alone: no collective


def test_measured_drift_spread_replaces_the_iid_square_root() -> None:
    # each group is 10 ms slow for 4 steps then 10 ms fast for 4: over 4 steps it drifts 40 ms,
    # where independent steps of the same 10 ms spread would give 20 ms
    dev0 = [0.01] * 4 + [-0.01] * 4 + [0.01] * 4 + [-0.01] * 4
    dev = [dev0, [-d for d in dev0]]
    sd = drift_spread(dev, (0.0, 0.0), 4)
    assert sd[0] == pytest.approx(0.01 * math.sqrt(2))
    assert sd[3] > 2 * sd[0]  # grows faster than sqrt(4) = 2
    w = Workload(0.1, (1,), 2, jitter_s=sd[0])
    slow = Workload(0.1, (1,), 2, jitter_s=sd[0], drift_sd=sd)
    h4 = Schedule(1, 4, 0)
    assert simulate(slow, h4, BW, LAT, steps=8).exposed_control_s > simulate(w, h4, BW, LAT, steps=8).exposed_control_s


def test_a_replay_of_the_runs_own_arrivals_gives_its_quorum_waits() -> None:
    # group 1 arrives 30 ms after group 0 at each quorum (15 ms after the mean): the mean group
    # waits 15 ms, plus the 20 ms held round trip; the replay leaves nothing to chance (jitter ignored)
    replay = tuple((s, (-0.015 / 4, 0.015 / 4)) for s in range(1, 9))
    w = Workload(0.1, (1,), 2, jitter_s=0.05, replay=replay)
    p = simulate(w, Schedule(1, 4, 0), BW, LAT, steps=8)
    assert p.exposed_control_s == pytest.approx(2 * (0.015 + 0.02))


def _trace(path: Path, events: list[dict]) -> Path:
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": [{"ph": "X", "pid": 1, **e} for e in events]}, f)
    return path


def test_sync_costs_from_a_window_trace(tmp_path: Path) -> None:
    # one send: 5 real allreduces on 2 threads (the first waits 9 ms for the peer), then a sync
    # whose data was in 2 ms before it began; its wait ends 3 ms in
    ev = [{"name": "gloo:all_reduce", "ts": 0, "dur": 9000, "tid": 1}]
    ev += [
        {"name": "gloo:all_reduce", "ts": 9000 + 1000 * i, "dur": d, "tid": 1 + i % 2}
        for i, d in enumerate((2000, 3000, 4000, 5000))
    ]
    ev += [{"name": "ftrun::link::hold", "ts": 10000, "dur": 20000, "tid": 7}]
    ev += [
        {"name": "torchft::local_sgd::perform_sync", "ts": 32000, "dur": 8000, "tid": 5},
        {"name": "torchft::local_sgd::wait", "ts": 34500, "dur": 500, "tid": 5},
    ]
    c = sync_costs([_trace(tmp_path / "r0.pt.trace.json.gz", ev)])
    assert c.real_collective_s == pytest.approx(0.017 / 3)  # the chain: 0 .. 17 ms, ceil(5 / 2) = 3 rounds
    assert c.collective_threads == 2
    assert c.sync_work_s == pytest.approx(0.003)
    assert c.traced_syncs == 1
    # a sync still waiting for its hold: only what follows the hold's end is its own work
    ev2 = [
        {"name": "ftrun::link::hold", "ts": 0, "dur": 10000, "tid": 7},
        {"name": "torchft::local_sgd::perform_sync", "ts": 2000, "dur": 9000, "tid": 5},
        {"name": "torchft::local_sgd::wait", "ts": 10500, "dur": 500, "tid": 5},
    ]
    assert sync_costs([_trace(tmp_path / "r1.pt.trace.json.gz", ev2)]).sync_work_s == pytest.approx(0.001)
    assert sync_costs([]).real_collective_s is None


def test_a_replay_of_the_runs_own_pace_exposes_what_a_fast_spell_leaves() -> None:
    # tau = 2 steps of 100 ms would hide the 120 ms hold by 80 ms; the run ran those two steps
    # in 50 ms each, so its sync waited 20 ms: the pace replay says so, the mean step cannot
    sched = Schedule(1, 10, 2)
    mean = Workload(0.1, (100_000,), 2)
    assert simulate(mean, sched, BW, LAT, steps=10).exposed_data_s == 0.0
    paced = Workload(0.1, (100_000,), 2, step_times=((9, 0.05), (10, 0.05)))
    assert simulate(paced, sched, BW, LAT, steps=10).exposed_data_s == pytest.approx(0.02)


def test_the_replay_counts_a_groups_own_should_commit_in_its_arrival(tmp_path: Path) -> None:
    from ftrun.plan.measure import measure_arrivals
    from train_fixtures import event_record

    # both groups compute 100 ms a step; at the sync of step 2 group 1's should_commit takes 30 ms
    # (its own RPC, no wait on group 0): it arrives 30 ms later, 15 ms behind the mean
    run = tmp_path / "r"
    (run / "events").mkdir(parents=True)
    for r in range(2):
        t, lines = 1000.0, []
        for step in range(1, 5):
            commit = 0.03 if (r == 1 and step == 2) else 0.0
            rec = event_record(step, step_time_s=0.1 + commit, synced=0 if step == 2 else None, commit_s=commit)
            t += rec["step_time_s"]
            rec["t"] = t
            lines.append(json.dumps(rec))
        (run / "events" / f"replica{r}_rank0.jsonl").write_text("\n".join(lines) + "\n")
    replay = dict(measure_arrivals([run], 2, hold_s=0.0).replay)
    assert replay[2] == pytest.approx((-0.015, 0.015))
    assert replay[3] == pytest.approx((0.0, 0.0))
