"""A chaos run's whole-run timeline (ftrun.report.chaos_timeline): the lanes from hand-made step
logs, fault markers and recovery breakdowns, and one picture drawn from them. Unit tests: no process."""

from __future__ import annotations

import pytest

from ftrun.check.goodput import group_goodput, step_fates
from ftrun.layout import EventRecord, FaultMarker, RecoveryRecord
from ftrun.report.chaos_timeline import ChaosTimeline, GroupLane, LaneFault, build, draw
from train_fixtures import event_record

T = 1000.0  # unix seconds of the first step's start


def rec(step, t, synced=None, commit=None, restart=0):
    return EventRecord(**event_record(step, t=T + t, synced=synced, commit=commit, restart=restart, step_time_s=1.0))


def steady(steps, every=5, restart=0, at=0.0, fail=()):
    """One step per second, the first ending at ``at + 1``; a sync every ``every`` steps."""
    out = []
    for i, s in enumerate(steps):
        sync = s % every == 0
        out.append(
            rec(s, at + i + 1, synced=0 if sync else None, commit=(s not in fail) if sync else None, restart=restart)
        )
    return out


def killed_run():
    """Group 0 trains steps 1-20; group 1 steps 1-7, is killed at 7.0 s (before step 8), relaunched,
    two unaligned records, then steps 13-20 from 11.0 s."""
    g1 = steady(range(1, 8))
    g1 += [rec(None, 9.5, restart=1), rec(None, 10.0, restart=1)]
    g1 += steady(range(13, 21), restart=1, at=11.0 - 1.0)
    logs = {(0, 0): steady(range(1, 21)), (1, 0): g1, (1, 1): []}  # rank 1 is not read
    fault = FaultMarker(replica=1, step=8, action="kill", fired_at=T + 7.0, fired_step=8)
    recovery = RecoveryRecord(
        fault="kill 1@8",
        replica=1,
        fault_at=T + 7.0,
        phases={"relaunch": 2.0, "join": 1.0},
        unaccounted_s=0.0,
        total_s=5.0,
        spans={"relaunch": (0.0, 2.0), "join": (2.0, 3.0), "heal": None},
    )
    return logs, fault, recovery


def test_step_fates_agree_with_group_goodput():
    logs, _, _ = killed_run()
    recs = logs[(1, 0)]
    fates = step_fates(recs)
    g = group_goodput(1, recs)
    assert (fates.count("useful"), fates.count("lost"), fates.count("tail")) == (
        g.useful_steps,
        g.lost_steps,
        g.tail_steps,
    )
    assert fates[5:9] == ["lost", "lost", None, None]  # 6, 7 died before their sync; unaligned records count nothing


def test_lanes_hold_each_groups_steps_by_fate_on_the_run_clock():
    logs, fault, recovery = killed_run()
    tl = build("run", logs, [fault], [recovery], {(1, 8, "kill"): 5}, chaos_start=T + 1.0, chaos_end=T + 15.0)
    assert tl.t0 == T and tl.end_s == pytest.approx(20.0)
    assert (tl.chaos_start_s, tl.chaos_end_s) == (1.0, 15.0)
    assert [lane.replica for lane in tl.lanes] == [0, 1]
    g0, g1 = tl.lanes
    assert g0.useful == [(0.0, 20.0)] and g0.lost == [] and g0.faults == []  # consecutive steps merge
    # group 1: 1-5 useful, 6-7 lost to the kill, 13-15 and 16-20 useful again from 10 s (one bar)
    assert g1.useful == [(0.0, 5.0), (10.0, 18.0)]
    assert g1.lost == [(5.0, 7.0)]
    assert g1.tail == []


def test_a_fault_carries_its_kind_lost_steps_recovery_and_phases():
    logs, fault, recovery = killed_run()
    tl = build("run", logs, [fault], [recovery], {(1, 8, "kill"): 5})
    (f,) = tl.lanes[1].faults
    assert (f.at_s, f.action, f.step, f.lost_steps) == (7.0, "kill", 8, 5)
    assert f.back_s == pytest.approx(12.0)  # the fault + total_s: the group's first commit again
    assert f.phases == [("relaunch", 7.0, 9.0), ("join", 9.0, 10.0)]  # on the run clock; heal not measured
    assert tl.chaos_start_s is None and tl.chaos_end_s is None


def test_a_fault_without_its_breakdown_is_never_back_and_a_hang_counts_no_lost_steps():
    logs, _, _ = killed_run()
    hang = FaultMarker(replica=0, step=12, action="hang", seconds=5.0, fired_at=T + 11.0, fired_step=12)
    tl = build("run", logs, [hang], [], {})
    (f,) = tl.lanes[0].faults
    assert (f.action, f.lost_steps, f.back_s, f.phases, f.seconds, f.absorbed) == ("hang", None, None, [], 5.0, False)
    tl = build("run", logs, [hang], [], {}, absorbed=frozenset({T + 11.0}))  # the group rode it out
    assert tl.lanes[0].faults[0].absorbed


def test_a_group_with_a_fault_but_no_log_still_gets_its_lane():
    logs, fault, _ = killed_run()
    tl = build("run", {(0, 0): logs[(0, 0)]}, [fault], [], {})
    assert [lane.replica for lane in tl.lanes] == [0, 1]
    assert tl.lanes[1].useful == [] and len(tl.lanes[1].faults) == 1


def test_draw_writes_a_png(tmp_path):
    phases = [("detect", 30.0, 30.5), ("relaunch", 30.0, 40.0), ("join", 40.0, 52.0), ("catch_up", 52.0, 53.0)]
    lanes = [
        GroupLane(0, [(0.0, 120.0)], [], [(120.0, 121.0)], []),
        GroupLane(1, [(0.0, 28.0), (53.0, 120.0)], [(28.0, 30.0)], [], [LaneFault(30.0, "kill", 60, 12, 53.0, phases)]),
        GroupLane(2, [(0.0, 120.0)], [], [], [LaneFault(80.0, "hang", 160, None, None, [], 5.0, True)]),
        GroupLane(3, [(0.0, 60.0)], [(60.0, 62.0)], [], [LaneFault(62.0, "sigterm", 124, 40, None)]),
    ]
    tl = ChaosTimeline("hand-made", 0.0, 121.0, 2.0, 100.0, lanes)
    out = draw(tl, tmp_path / "chaos_timeline.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in tmp_path.iterdir() if p != out]  # written temp + rename: nothing else left
