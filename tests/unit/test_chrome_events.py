"""The typed events of ``--export-perfetto`` encode as the Chrome trace format wants them: a key
that does not apply is absent, not null (ftrun.report.chrome_events)."""

from __future__ import annotations

import msgspec

from ftrun.check.result import EventResult, SendFigures
from ftrun.report.chrome_events import ChromeEvent, MetaArgs, meta
from ftrun.report.perfetto import verdict_args


def test_a_metadata_event_carries_only_its_one_arg() -> None:
    ev = msgspec.to_builtins(meta("thread_sort_index", 3, 9, MetaArgs(sort_index=-1)))
    assert ev == {"name": "thread_sort_index", "ph": "M", "ts": 0, "pid": 3, "tid": 9, "args": {"sort_index": -1}}


def test_a_send_verdict_has_its_figures_and_no_null_keys() -> None:
    e = EventResult(
        replica=1,
        rank=0,
        kind="send",
        fragment=0,
        expected_fragment=0,
        expected_step=25,
        observed_step=26,
        ok=False,
        problem="late",
        notes=["a", "b"],
        send=SendFigures(allreduces=2, numel=None, bytes=None, collectives=2),
    )
    args = msgspec.to_builtins(verdict_args(e))
    assert args == {
        "verdict": "FAIL",
        "kind": "send",
        "replica": 1,
        "rank": 0,
        "evidence": "none",
        "expected_step": 25,
        "observed_step": 26,
        "fragment": 0,
        "expected_fragment": 0,
        "problem": "late",
        "notes": "a; b",
        "allreduces": 2,
        "collectives": 2,
    }


def test_an_instant_has_no_duration_and_a_slice_no_scope() -> None:
    instant = msgspec.to_builtins(ChromeEvent(name="x", ph="i", s="t", ts=1.0, pid=1, tid=2))
    assert "dur" not in instant and instant["s"] == "t" and "args" not in instant
    sliced = msgspec.to_builtins(ChromeEvent(name="x", ph="X", ts=1.0, dur=5.0, pid=1, tid=2))
    assert "s" not in sliced and sliced["dur"] == 5.0
