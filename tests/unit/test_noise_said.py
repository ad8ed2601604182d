"""Noise is said, not shown as a fact (issue 40 item 9): each figure seen printed as a fact though
it lay within its spread, on hand-made figures, and the same figure beyond its spread."""

from __future__ import annotations

import re
from types import SimpleNamespace

import msgspec
import pytest

from ftrun import layout
from ftrun.check.noise import NO_DIFFERENCE, Measured, mean_difference, repeats_needed, says
from ftrun.check.result import EventResult, Overlap, SyncFigures, WorkerOverlap
from ftrun.check.throughput import decompose, largest_reason, mean_decomposition
from ftrun.layout import EventRecord, RecoveryRecord
from ftrun.report import compare_view as view
from ftrun.report.compare_view import explanation_line
from ftrun.report.inspect_view import _exposed_cell, _remark, overlap_line
from ftrun.report.recovery_view import recovery_lines
from train_fixtures import event_record


def log(
    plain_ms: float,
    overlapped_ms: float,
    *,
    jitter_ms: float = 0.0,
    comm_ms: float | None = None,
    exposed_ms: tuple[float, ...] = (0.0,),
    delay: int = 3,
    window: int = 10,
    steps: int = 40,
) -> list[EventRecord]:
    """A rank's event log under F=1, w=``window``, tau=``delay``: plain steps compute ``plain_ms``,
    steps with the send in flight ``overlapped_ms``, send/sync steps ``comm_ms`` (default: plain),
    every step +/- ``jitter_ms`` by its parity (so each class's mean is its figure); the syncs wait
    ``exposed_ms`` in turn."""
    out, syncs = [], 0
    for s in range(1, steps + 1):
        local = (s - 1) % window + 1
        sent = 0 if local == window - delay else None
        synced = 0 if local == window else None
        in_flight = delay and window - delay < local < window
        compute = overlapped_ms if in_flight else plain_ms
        if sent is not None or synced is not None:
            compute = plain_ms if comm_ms is None else comm_ms
        compute += jitter_ms if s % 2 else -jitter_ms
        wait = 0.0
        extra = {}
        if synced is not None:
            wait = exposed_ms[syncs % len(exposed_ms)]
            extra["exposed_s"] = wait / 1e3
            syncs += 1
        rec = event_record(s, step_time_s=(compute + wait) / 1e3, sent=sent, synced=synced, t=float(s), **extra)
        out.append(EventRecord(**rec))
    return out


def run(name: str, recs: list[EventRecord], **over) -> dict:
    """One compare run (the fields the views read) from one rank's event log."""
    d = mean_decomposition([decompose(recs)])
    assert d is not None
    sps = d["steps"] / d["loop_s"]
    return {
        "name": name,
        "steps_per_s": sps,
        "decomposition": d,
        "overlap_slowdown": d["overlap_slowdown"],
        "overlap_lost_s": d["overlap_slowdown_s"],
        "backend": "gloo",
        **over,
    }


# the compare views on the runs as this file builds them (dicts of report.json's fields)
def _run(r: dict) -> layout.CompareRun:
    return msgspec.convert(r, layout.CompareRun)


def conclusion(runs: list[dict]) -> str:
    return view.conclusion([_run(r) for r in runs])


def explanation(runs: list[dict]) -> layout.Explanation | None:
    return view.explanation([_run(r) for r in runs])


def tells(a: dict, b: dict) -> layout.Told:
    return view.tells(_run(a), _run(b))


def rows(result: dict) -> list[list[str]]:
    return view.rows(msgspec.convert(result, layout.CompareReport))


def decomposition_rows(result: dict) -> list[list[str]]:
    return view.decomposition_rows(msgspec.convert(result, layout.CompareReport))


def cells(result_rows: list[list[str]], label: str) -> list[str]:
    return next(r[1:] for r in result_rows if r[0] == label)


# --- the helper ------------------------------------------------------------------------------


def test_says_within_beyond_and_below() -> None:
    ms = lambda v: f"{v:.1f} ms"  # noqa: E731
    assert says(Measured(-1.8, 3.0), ms, cost=True) == NO_DIFFERENCE
    assert says(Measured(-4.9, 1.0), ms, cost=True) == "none (4.9 ms less)"  # never a negative cost
    assert says(Measured(4.9, 1.0), ms, cost=True) == "4.9 ms"
    assert says(Measured(0.53, 0.1), lambda v: f"{v:.2f}x", null=1.0, cost=True) == "none (0.53x)"
    assert says(Measured(2.24), lambda v: f"{v:.0%}", at_most=1.0) == NO_DIFFERENCE  # a goodput
    assert says(Measured(1.0, 0.0), lambda v: f"{v:.2f}x", null=1.0) == "1.00x"  # 1 by definition
    assert says(Measured(3.0), lambda v: f"{v}", cost=True) == NO_DIFFERENCE  # no spread: no cost claimed
    m = mean_difference([9.0, 11.0], [10.0, 10.0])
    assert m is not None and m.value == 0.0 and m.spread == pytest.approx(2 * 2**0.5 / 2**0.5)


def test_repeats_rule() -> None:
    # the run: 13.9 of a 19.9 ms/step difference was the machine
    assert repeats_needed(19.9, 13.9) == 4  # ceil(8 * (13.9 / 19.9)^2) = ceil(3.9)
    assert repeats_needed(19.9, 1.0) == 3  # never fewer than three
    assert repeats_needed(1.0, 13.9) is None  # more than 20
    assert repeats_needed(0.0, 1.0) is None


# --- compare's decomposition table -----------------------------------------------------------


def test_send_sync_work_and_overlap_slowdown_within_the_spread() -> None:
    """Seen: ``send/sync step work -1.8 ms/step``, ``overlap slowdown -4.9 ms/step``."""
    r = run("streaming", log(100.0, 95.0, comm_ms=95.0, jitter_ms=20.0))
    d = r["decomposition"]
    assert d["overlap_slowdown_s"] < 0 and d["comm_step_work_s"] < 0  # the raw figures: negative
    table = decomposition_rows({"runs": [r]})
    assert cells(table, "overlap slowdown (ms/step)") == [NO_DIFFERENCE]
    assert cells(table, "send/sync step work (ms/step)") == [NO_DIFFERENCE]


def test_costs_beyond_the_spread_shown_and_a_faster_class_is_no_cost() -> None:
    slow = run("s", log(100.0, 130.0, comm_ms=110.0, jitter_ms=1.0))
    fast = run("f", log(100.0, 80.0, comm_ms=100.0, jitter_ms=1.0))
    table = decomposition_rows({"runs": [slow, fast]})
    # 6 overlapped steps of 40 (tau=3: two per round of four)... 8 x 30 ms / 40 = 6.0 ms per step
    assert cells(table, "overlap slowdown (ms/step)") == ["6.0", "none (4.0 less)"]
    assert cells(table, "send/sync step work (ms/step)")[0] == "2.0"


# --- compare's run table ---------------------------------------------------------------------

_BASE = {
    "schedule": {"fragments": 1, "sync_every": 10, "fragment_sync_delay": 3, "steps": 40},
    "syncs": 4,
    "commits": 4,
    "loss_at_steps": {},
    "verdict": "pass",
    "exposed_comm_s": 0.0,
}


def test_compute_lost_and_slowdown_within_the_spread() -> None:
    """Seen: ``compute lost to overlap -0.30 s`` and an overlap "slowdown" of 0.53x."""
    noisy = run("noisy", log(100.0, 90.0, jitter_ms=40.0))
    faster = run("faster", log(100.0, 53.0, jitter_ms=1.0))
    slower = run("slower", log(100.0, 130.0, jitter_ms=1.0))
    table = rows({"runs": [{**_BASE, **x} for x in (noisy, faster, slower)]})
    assert noisy["overlap_lost_s"] < 0 and noisy["overlap_slowdown"] < 1  # the raw figures
    assert cells(table, "compute lost to overlap") == [NO_DIFFERENCE, "none (0.38 s less)", "0.24 s"]
    assert cells(table, "overlap slowdown (in flight / not)") == [NO_DIFFERENCE, "none (0.53x)", "1.30x"]


def test_inspect_overlap_line_says_the_slowdown_only_beyond_its_spread() -> None:
    def report(slowdown: float, spread: float | None) -> SimpleNamespace:
        w = WorkerOverlap(0, 0, 8, 24, 53.0, 100.0, slowdown, spread)
        return SimpleNamespace(overlap=Overlap(per_send=[], workers=[w]))

    assert overlap_line(report(0.53, 0.6), 0, 0).endswith(f": {NO_DIFFERENCE}")  # type: ignore[arg-type]
    assert overlap_line(report(0.53, 0.05), 0, 0).endswith(": none (0.53x)")  # type: ignore[arg-type]
    assert overlap_line(report(1.3, 0.05), 0, 0).endswith(": 1.30x")  # type: ignore[arg-type]
    assert overlap_line(report(1.3, None), 0, 0).endswith(f": {NO_DIFFERENCE}")  # type: ignore[arg-type]


# --- the reason sentence and the machine caveat ---------------------------------------------


def test_waits_less_within_the_spread_is_no_difference() -> None:
    """Seen: "streaming waits -2.7 ms per step less"."""
    a = run("streaming", log(100.0, 100.0, exposed_ms=(60.0, 20.0)))["decomposition"]
    b = run("baseline", log(100.0, 100.0, delay=0, window=20, exposed_ms=(10.0, 50.0)))["decomposition"]
    text = largest_reason("streaming", a, "baseline", b, "gloo")
    assert text == f"streaming and baseline wait on communication alike per step ({NO_DIFFERENCE})"


def test_waits_more_beyond_the_spread_says_more() -> None:
    a = run("streaming", log(100.0, 100.0, exposed_ms=(100.0,)))["decomposition"]
    b = run("baseline", log(100.0, 100.0, delay=0, window=20, exposed_ms=(10.0,)))["decomposition"]
    text = largest_reason("streaming", a, "baseline", b, "gloo")
    assert text is not None and text.startswith("streaming waits 9.5 ms per step more on communication")


@pytest.mark.parametrize("a_plain, how", [(110.0, "slower"), (90.0, "faster")])
def test_machine_caveat_either_way(a_plain: float, how: str) -> None:
    """Seen: "the machine, not the schedule" only when the machine worked against streaming."""
    a = run("streaming", log(a_plain, a_plain, jitter_ms=1.0, exposed_ms=(2.0,)))["decomposition"]
    b = run("baseline", log(100.0, 100.0, delay=0, window=20, jitter_ms=1.0, exposed_ms=(200.0,)))["decomposition"]
    text = largest_reason("streaming", a, "baseline", b, "gloo")
    assert text is not None and "streaming waits 9.8 ms per step less" in text
    # 10 ms, give or take the jitter's odd/even imbalance over the plain steps (0.1 ms)
    assert re.search(
        rf"streaming's unoverlapped steps computed (9\.9|10\.0|10\.1) ms per step {how} than baseline's", text
    )
    assert "the machine, not the schedule" in text


# --- compare's one-line answer ---------------------------------------------------------------


def _two(a_plain: float, b_plain: float, **over) -> list[dict]:
    a = run("streaming", log(a_plain, a_plain, jitter_ms=1.0, exposed_ms=(2.0,)), **over)
    b = run("baseline", log(b_plain, b_plain, delay=0, window=20, jitter_ms=1.0, exposed_ms=(200.0,)), **over)
    return [a, b]


def test_one_run_each_cannot_tell_and_says_how_many_repeats() -> None:
    """Seen: "throughput 1.17x ... the named terms explain it" from one run each, where most of
    the difference was the machine's compute speed."""
    runs = _two(86.0, 100.0)
    t = tells(runs[0], runs[1])
    assert t.repeats == 1 and not t.told
    assert t.difference_ms == pytest.approx(-14.0 - 9.8, abs=0.01)  # the machine 14, the schedule 9.8 ms/step
    assert t.spread_ms == pytest.approx(14.0, abs=0.2) and t.repeats_needed == 3
    line = explanation_line(explanation(runs))
    assert line.startswith("throughput 1.28x") and "from one run each: one run cannot tell which is faster" in line
    assert "--repeat 3 would tell a 23.8 ms/step difference from a run-to-run spread of 14.1 ms/step" in line
    assert "N = ceil(8 (s/d)^2)" in line and "explain it" not in line
    assert "unoverlapped steps computed 14.1 ms per step faster than baseline's (the machine" in line


def test_repeats_within_their_spread_say_no_difference() -> None:
    """Seen: with --repeat 3 the same question gave 0.98x, no difference."""
    a, b = _two(100.0, 100.0, repeats=3)
    a["steps_per_s"], b["steps_per_s"] = 9.8, 10.0
    a["spread"], b["spread"] = {"steps_per_s": [9.0, 10.5]}, {"steps_per_s": [9.5, 10.4]}
    line = explanation_line(explanation([a, b]))
    assert line.startswith(f"throughput 0.98x, within the spread of 3 runs each: {NO_DIFFERENCE}")
    assert "faster" not in line.split("(")[0]


def test_repeats_beyond_their_spread_say_which_and_why() -> None:
    a, b = _two(100.0, 100.0, repeats=3)
    sa, sb = a["steps_per_s"], b["steps_per_s"]
    a["spread"], b["spread"] = {"steps_per_s": [sa * 0.99, sa * 1.01]}, {"steps_per_s": [sb * 0.99, sb * 1.01]}
    line = explanation_line(explanation([a, b]))
    assert line.startswith("streaming is faster: throughput 1.10x, beyond the spread of 3 runs each")
    assert "streaming waits 9.8 ms per step less on communication than baseline" in line
    assert "the machine" not in line  # the two machines computed alike


# --- inspect's sync row and recovery's goodput -----------------------------------------------


def _sync(exposed: float, s2d: float) -> EventResult:
    fig = SyncFigures(exposed, 0.0, s2d, s2d, None, exposed, 0.0, None, None, None, True)
    return EventResult(0, 0, "sync", 0, 0, 10, 10, True, sync=fig)


def test_exposed_above_its_send_to_done_is_not_shown_as_measured() -> None:
    """Seen: a sync whose exposed data (35.4 ms) exceeds its whole send->done (9.5 ms)."""
    e = _sync(35.4, 9.5)
    assert _exposed_cell(e) == "?"
    remark = _remark(e)
    assert remark is not None and "exposed data 35.40 ms exceeds its whole send→done 9.50 ms" in remark.plain
    ok = _sync(5.0, 9.5)
    assert _exposed_cell(ok) == "5.00" and _remark(ok) is None


@pytest.mark.parametrize("goodput, said", [(2.24, f"goodput: {NO_DIFFERENCE}"), (0.8, "goodput: 80%")])
def test_goodput_never_above_100_percent(goodput: float, said: str) -> None:
    """Seen: ``goodput 224%``."""
    s = {"failed_commits": 0, "steps_without_group": 3, "steps_per_s_during": 2.24 * goodput / goodput}
    s |= {"steps_per_s_before": 1.0, "goodput": goodput}
    rec = {"fault": "kill 1@25", "replica": 1, "fault_at": 0.0, "phases": {}, "unaccounted_s": None, "total_s": None}
    (text,) = recovery_lines(msgspec.convert({**rec, "survivors": s}, RecoveryRecord))
    assert f"({said})" in text


def test_exposed_share_within_its_spread_is_no_difference() -> None:
    a = run("streaming", log(100.0, 100.0, exposed_ms=(60.0, 20.0)))
    b = run("baseline", log(100.0, 100.0, delay=0, window=20, exposed_ms=(10.0, 110.0)))
    far = run("far", log(100.0, 100.0, delay=0, window=20, exposed_ms=(400.0,)))
    fields = {"hidden_comm_share": None, "per_sync_exposed_ms": None, "peak_sync_bytes": 0}
    for r in (a, b, far):
        d = r["decomposition"]
        r |= {**fields, "exposed_comm_s": d["exposed_data_s"], "exposed_control_s": d["exposed_control_s"]}
    near = conclusion([a, b])
    assert f"streaming's exposed communication (data + control) against baseline's: {NO_DIFFERENCE} (133%" in near
    assert "streaming's exposed communication (data + control) is 20% of far's" in conclusion([a, far])


def test_a_median_slowdown_is_not_claimed_where_the_means_do_not_differ() -> None:
    """tests/data/cpu_run's figures: medians 0.67x (spread 0.23), but the compute it cost, -0.49 s,
    lies within its spread (0.54 s): a skewed class, no slowdown claimed."""
    from ftrun.check.throughput import slowdown_measured

    x = lambda v: f"{v:.2f}x"  # noqa: E731
    skewed = {"overlap_slowdown": 0.67, "overlap_slowdown_spread": 0.23}
    skewed |= {"overlap_slowdown_s": -0.49, "overlap_slowdown_s_spread": 0.54}
    assert says(slowdown_measured(skewed), x, null=1.0, cost=True) == NO_DIFFERENCE
    agreed = {"overlap_slowdown": 1.47, "overlap_slowdown_spread": 0.2}
    agreed |= {"overlap_slowdown_s": 0.3, "overlap_slowdown_s_spread": 0.1}
    assert says(slowdown_measured(agreed), x, null=1.0, cost=True) == "1.47x"
