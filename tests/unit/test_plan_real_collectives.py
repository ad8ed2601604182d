"""``ftrun plan`` models the backend's own collectives on every send where the run timed them.

The link emulator holds a collective's completion but runs it for real: at 1 Gbit/s the
baseline's 29 loopback Gloo allreduces (15 rounds on 2 threads) outlast the ~15 ms hold, on
every sync, not only on the profiled ones. The event log's ``real_s`` (at each sync: its send's
start to its last collective's real completion) is that cost, measured on every send.

``tests/data/gbit_baseline``: a recorded case — the baseline run of ``scripts/validate_plan.py
--link 1gbit,2ms`` (``ftrun compare streaming baseline --link 1gbit,2ms``, 60 steps, 2 replica
groups, profiled steps 21-40; load 2.6-2.8), its manifest (the window traces not kept) and event
logs (the sketches' ``numerics`` stripped), and its row of the compare's ``report.json``. Its
syncs' real collectives took 51, 35 and 48 ms (the traced one, step 40, was the fast one).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_plan_cli import invoke

from ftrun.plan import Workload, simulate
from ftrun.plan.measure import read_run, real_collective_times, real_pace_s
from ftrun.plan.request import real_collectives
from ftrun.schedule import Schedule

RECORDED = Path(__file__).resolve().parents[1] / "data" / "gbit_baseline"
BW, LAT = 8e6, 0.01  # an allreduce of 100 kB across 2 holds 120 ms
PLAIN = Schedule(1, 10, 0)


def test_the_check_of_a_recorded_gbit_baseline_models_every_syncs_real_collectives() -> None:
    res = invoke("--check", str(RECORDED), "--tolerance", "0.10", "--json")
    assert res.exit_code == 0, res.output
    run = json.loads(res.output)["runs"][0]
    pred, meas = run["predicted"], run["measured"]
    # the link's hold alone (15.4 ms from the send's start) would leave 9.5 ms a sync, not 38.8
    assert pred["exposed_data_ms_per_sync"] == pytest.approx(meas["exposed_data_ms_per_sync"], rel=0.10)
    assert run["within_tolerance"]["exposed_ms_per_sync"] and run["within_tolerance"]["steps_per_s"]
    # from the statistic (the pace over every timed send) too, not only from each send's own
    stat = run["expected_from_statistics"]
    assert stat["exposed_data_ms_per_sync"] == pytest.approx(meas["exposed_data_ms_per_sync"], rel=0.10)


def test_real_times_come_from_every_sync_of_the_event_logs() -> None:
    times = real_collective_times([RECORDED / "baseline"], 2, 0)
    assert [(step, frag) for step, frag, _ in times] == [(20, 0), (40, 0), (60, 0)]
    assert [tuple(round(x * 1e3, 1) for x in s) for _, _, s in times] == [(51.4, 51.2), (35.6, 35.4), (47.9, 47.9)]
    assert real_pace_s(times, (29,), 2) == pytest.approx(0.0478935 / 15)  # the median send (step 60) over its 15 rounds
    work = read_run([RECORDED / "baseline"]).work
    assert work.real_every_send and dict(work.real_times)[60] == pytest.approx((0.047856, 0.047931))
    assert work.real_chain_s(0, 60) == pytest.approx(0.0478935)  # the groups' mean


def test_a_sends_own_real_time_or_the_pace_on_every_send_outlasts_the_hold() -> None:
    base = {"real_collective_s": 0.04, "collective_threads": 2, "fragment_tensors": (9,), "real_steps": ((9, 10),)}
    # profiled steps only: the unprofiled sync (20) is the hold's 120 ms
    assert simulate(Workload(0.1, (100_000,), 2, **base), PLAIN, BW, LAT, steps=20).exposed_data_s == pytest.approx(
        0.2 + 0.12
    )
    every = Workload(0.1, (100_000,), 2, real_every_send=True, **base)
    assert simulate(every, PLAIN, BW, LAT, steps=20).exposed_data_s == pytest.approx(2 * 0.2)
    # each send's own (the later of it and the hold): 150 ms, and 50 ms under the 120 ms hold
    own = Workload(
        0.1, (100_000,), 2, real_every_send=True, real_times=((10, (0.15, 0.15)), (20, (0.05, 0.05))), **base
    )
    assert simulate(own, PLAIN, BW, LAT, steps=20).exposed_data_s == pytest.approx(0.15 + 0.12)
    # another split or another R: a run's own per-send times do not fit; the pace does
    assert own.split(2).real_times == () and own.with_replicas(3).real_times == ()
    assert own.split(2).real_every_send and own.split(2).real_collective_s == 0.04


def test_a_what_if_from_a_run_states_where_its_real_collectives_were_measured(tmp_path: Path) -> None:
    res = invoke("--from", str(RECORDED / "baseline"), "--link", "10gbit,2ms", "--json")
    assert res.exit_code == 0, res.output
    real = json.loads(res.output)["inputs"]["real_collectives"]
    assert real["ms_per_round"] == pytest.approx(0.0478935 / 29 * 1e3)  # no traces kept: 1 thread, 29 rounds
    assert "every send" in real["how"]
    # a run that timed them on its traced sends only (before real_s): that pace, on every send, said so
    traced = real_collectives(Workload(0.02, (1000,), 2, real_collective_s=0.003, collective_threads=2))
    assert traced.ms_per_round == pytest.approx(3.0) and "profiled sends only" in traced.how
    # a run that measured them nowhere (no real_s, no trace): the hold alone, never a pace
    old = tmp_path / "old"
    shutil.copytree(RECORDED / "baseline", old)
    for log in (old / "events").glob("replica*_rank0.jsonl"):
        lines = [json.loads(x) for x in log.read_text().splitlines()]
        log.write_text("".join(json.dumps({k: v for k, v in x.items() if k != "real_s"}) + "\n" for x in lines))
    res = invoke("--from", str(old), "--link", "10gbit,2ms", "--json")
    real = json.loads(res.output)["inputs"]["real_collectives"]
    assert real["ms_per_round"] is None and "the link's hold alone" in real["how"]
    assert "real collectives: not measured by the run" in " ".join(invoke("--from", str(old)).output.split())


def test_a_group_whose_process_saw_its_collectives_done_later_leaves_the_sync_later() -> None:
    """A blocking sync releases each group when its own process saw the send's collectives done
    (its ``real_s``), not all at once: one group descheduled in its wait (on a loaded machine its
    process saw them done 80 ms after the other's) leaves 80 ms later, and the next quorum's wait
    for the later group is that much shorter when that group was the early one. Two syncs of
    plain DiLoCo, H = 10: group 1 is 100 ms ahead at the second quorum, before the first sync."""
    stalls = ((15, (0.05, -0.05)),)  # between the syncs, group 0 falls 100 ms behind group 1
    kw = {"fragment_tensors": (9,), "real_every_send": True, "stalls": stalls}
    together = Workload(0.1, (100_000,), 2, real_times=((10, (0.2, 0.2)),), **kw)
    apart = Workload(0.1, (100_000,), 2, real_times=((10, (0.16, 0.24)),), **kw)
    a, b = (simulate(w, PLAIN, BW, LAT, steps=20) for w in (together, apart))
    assert b.exposed_data_s == pytest.approx(a.exposed_data_s)  # the groups' mean wait: the same 200 ms
    # the quorum of step 20 waits, on average over the groups, half the later group's lead:
    # 100 ms apart -> 50 ms; with group 1 leaving the first sync 80 ms later, 20 ms apart -> 10 ms
    hold = 2 * LAT  # the quorum's held round trip (the first quorum, step 10, waits for no one)
    assert a.exposed_control_s == pytest.approx(2 * hold + 0.05)
    assert b.exposed_control_s == pytest.approx(2 * hold + 0.01)
