"""Goodput arithmetic (ftrun.check.goodput) and a chaos run's recovery figures
(ftrun.check.chaos_run) on hand-made step logs. Unit tests: no process."""

from __future__ import annotations

import msgspec
import pytest

from ftrun.chaos_summary import GoodputComparison
from ftrun.check.chaos_run import absorbed_hangs, recovery_stats
from ftrun.check.goodput import goodput_of, group_goodput, percentile, retained, retained_of
from ftrun.check.noise import Measured, ratio_spread
from ftrun.check.recovery_model import PHASES, Recovery
from ftrun.layout import EventRecord, FaultMarker
from ftrun.report.goodput_view import goodput_line, retained_clause
from train_fixtures import event_record


def rec(step, t, synced=None, commit=None, restart=0, step_time_s=1.0):
    return EventRecord(
        **event_record(step, t=t, synced=synced, commit=commit, restart=restart, step_time_s=step_time_s)
    )


def steady(n_syncs, every=5, t0=0.0, restart=0, fail=()):
    """A group's records: a sync every ``every`` steps, one step per second from ``t0``."""
    out = []
    for s in range(1, n_syncs * every + 1):
        sync = s % every == 0
        out.append(
            rec(s, t0 + s, synced=0 if sync else None, commit=(s not in fail) if sync else None, restart=restart)
        )
    return out


def test_useful_steps_are_those_whose_next_sync_commits():
    g = group_goodput(0, steady(4, fail=(10,)))  # syncs at 5, 10 (failed), 15, 20
    assert (g.useful_steps, g.lost_steps, g.tail_steps) == (15, 5, 0)


def test_a_relaunch_loses_the_steps_since_the_last_sync_and_steps_without_a_number_count_nothing():
    first = steady(1) + [rec(6, 6.0), rec(7, 7.0)]  # killed after step 7: 6 and 7 never synced
    again = [rec(None, 20.0, restart=1), rec(None, 21.0, restart=1)]  # relaunched, not yet aligned
    again += [
        rec(s, 16.0 + s, synced=0 if s % 5 == 0 else None, commit=True if s % 5 == 0 else None, restart=1)
        for s in range(9, 12)
    ]
    g = group_goodput(1, first + again)
    # 1-5 useful; 6-7 lost to the relaunch; 9-10 useful (sync at 10); 11 after the last sync: tail
    assert (g.useful_steps, g.lost_steps, g.tail_steps) == (7, 2, 1)


def test_goodput_rate_over_the_training_window_and_retained_against_a_twin():
    logs = {(0, 0): steady(4), (1, 0): steady(4, fail=(10,)), (1, 1): steady(4)}  # rank 1 is not read
    gp = goodput_of(logs)
    assert (gp.useful_steps, gp.lost_steps, gp.tail_steps) == (35, 5, 0)
    # the first step started at t=0 (its end 1.0 minus its 1.0 s), the last commit at t=20
    assert gp.train_s == pytest.approx(20.0) and gp.steps_per_s == pytest.approx(35 / 20)
    assert [g.replica for g in gp.groups] == [0, 1]
    twin = goodput_of({(0, 0): steady(4), (1, 0): steady(4)})
    assert retained(gp, twin) == pytest.approx(35 / 40)
    assert retained(gp, goodput_of({})) is None and goodput_of({}).steps_per_s is None


def test_goodput_retained_over_repeats_is_the_median_ratio_with_the_noise_spread_and_each_pairs_own():
    chaos, twin = [6.0, 8.0, 7.0], [10.0, 9.0, 11.0]
    r = retained_of(chaos, twin)
    assert (r.chaos_rate, r.twin_rate, r.retained) == (7.0, 10.0, pytest.approx(0.7))
    # repeat i's chaos run over repeat i's twin: the two trained one after the other
    assert r.per_repeat == [pytest.approx(0.6), pytest.approx(8 / 9, abs=1e-4), pytest.approx(7 / 11, abs=1e-4)]
    spread = ratio_spread(chaos, twin)
    assert spread is not None and r.spread == pytest.approx(spread, abs=1e-4) and 0 < r.spread < 0.7


def test_goodput_retained_without_enough_rates_has_no_spread_and_a_run_without_a_rate_counts_nowhere():
    one = retained_of([7.0], [10.0])  # one pair (read mode, or --repeat 1): as measured, spread unknown
    assert (one.retained, one.per_repeat, one.spread) == (pytest.approx(0.7), [pytest.approx(0.7)], None)
    gap = retained_of([None, 8.0, 6.0], [10.0, None, 10.0])  # repeat 1's chaos, repeat 2's twin: no rate
    assert (gap.chaos_rate, gap.twin_rate, gap.retained) == (7.0, 10.0, pytest.approx(0.7))
    assert gap.per_repeat == [pytest.approx(0.6)]  # only repeat 3 has both
    assert gap.spread is not None  # two rates a side
    none = retained_of([None], [10.0])
    assert (none.chaos_rate, none.retained, none.per_repeat, none.spread) == (None, None, [], None)


def test_goodput_retained_is_said_as_noise_says_a_share():
    assert retained_clause(Measured(0.7, None)) == "70.0% retained"  # one pair: as measured
    assert retained_clause(Measured(0.7, 0.05)) == "70.0% ± 5.0% retained"
    within = retained_clause(Measured(0.97, 0.05))  # within its spread of 100%: no loss claimed
    assert within.startswith("goodput lost: no difference measured") and "97.0% ± 5.0%" in within
    above = retained_clause(Measured(1.03, None))  # never printed above 100%
    assert "no difference measured" in above and "103" not in above
    g = GoodputComparison(
        chaos="chaos",
        twin="twin",
        chaos_steps_per_s=7.0,
        twin_steps_per_s=10.0,
        retained=0.7,
        chaos_goodput=goodput_of({}),
        twin_goodput=goodput_of({}),
        differs=[],
        repeats=3,
        retained_per_repeat=[0.6, 0.8, 0.7],
        retained_spread=0.05,
    )
    line = goodput_line(g)
    assert "median of 3 runs each" in line and "70.0% ± 5.0% retained" in line
    assert line.endswith("each repeat: 60.0%, 80.0%, 70.0%")
    assert goodput_line(msgspec.structs.replace(g, retained=None)).endswith(": not measured")
    assert goodput_line(msgspec.structs.replace(g, retained_per_repeat=[0.9, 1.2])).endswith(
        "each repeat: 90.0%, ≥ 100%"
    )


def test_percentile_is_nearest_rank():
    assert percentile([], 0.9) is None
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([float(x) for x in range(1, 11)], 0.9) == 9.0
    assert percentile([5.0], 0.9) == 5.0


def _recovery(t0, total, **phases):
    ph = {p: phases.get(p) for p in PHASES}
    return Recovery(f"kill 1@{int(t0)}", 1, t0, total, ph, dict.fromkeys(PHASES), {}, 0.0)


def test_recovery_stats_median_p90_phases_and_hangs_absorbed():
    recs = [_recovery(float(i), float(i + 1), relaunch=float(i) / 2, heal=0.1) for i in range(10)]
    recs.append(_recovery(50.0, None))  # never back
    recs.append(_recovery(60.0, None))  # a hang the group absorbed
    st = recovery_stats(recs, absorbed={60.0})
    assert (st.count, st.never_back, st.absorbed) == (10, 1, 1)
    assert st.median_s == pytest.approx(5.5) and st.p90_s == pytest.approx(9.0)
    assert st.phases_median_s["relaunch"] == pytest.approx(2.25) and st.phases_median_s["heal"] == pytest.approx(0.1)
    assert st.phases_median_s["detect"] is None


def test_a_hang_is_absorbed_when_the_group_commits_after_the_stall_without_a_relaunch():
    hang = FaultMarker(replica=0, step=3, action="hang", seconds=2.0, fired_at=3.0, fired_step=3)
    logs = {(0, 0): steady(2)}  # commits at t=5 (the stall's end, not after it) and t=10
    assert absorbed_hangs([hang], logs) == {3.0}
    relaunched = {(0, 0): steady(1) + [rec(None, 8.0, restart=1), rec(10, 10.0, synced=0, commit=True, restart=1)]}
    assert absorbed_hangs([hang], relaunched) == set()  # its processes were relaunched: a recovery, not absorbed
    kill = FaultMarker(replica=0, step=6, action="kill", fired_at=6.5, fired_step=6)
    assert absorbed_hangs([hang, kill], {(0, 0): steady(1)}) == set()  # no commit before the next fault
