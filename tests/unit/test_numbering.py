"""The ProfilerStep numbering is proven from the trace, never fitted; a commit is read from the
outer optimizer's step. Hand-made chrome traces through ``extract``; no process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ftrun.check.fired_faults import FiredFaults
from ftrun.check.match import choose_numbering
from ftrun.check.numbering import END, TOP, of_trace, prove
from ftrun.errors import NotChecked
from ftrun.schedule import Schedule
from ftrun.trace.spans import extract
from ftrun.trace.stream import TraceFile

LS = "torchft::local_sgd::"


def _x(name: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def _trace(tmp_path: Path, name: str, steps: range, at: str, optimizer: bool = True, commit: str = "outer") -> Path:
    """ProfilerStep#k for k in ``steps`` (1000 us each); the inner optimizer step of every loop
    iteration sits in its ProfilerStep (``at`` top: #k holds step k, #0 none; end: #k holds step
    k+1). Step 4 syncs: perform_sync with should_commit and then, by ``commit``, the outer
    optimizer's step ("outer"), only save_parameters ("save") or nothing ("none")."""
    ev = []
    for k in steps:
        t0 = k * 1000.0
        ev.append(_x(f"ProfilerStep#{k}", t0, 999))
        training_step = k if at == TOP else k + 1
        if training_step == 0:
            continue
        if optimizer:
            ev.append(_x("Optimizer.step#SGD.step", t0 + 100, 50))
        if training_step == 4:
            ev.append(_x(LS + "perform_sync", t0 + 200, 500))
            ev.append(_x("torchft::manager::should_commit", t0 + 250, 50))
            if commit == "outer":
                ev.append(_x("Optimizer.step#SGD.step", t0 + 350, 50))
            if commit in ("outer", "save"):
                ev.append(_x(LS + "save_parameters", t0 + 450, 50))
    p = tmp_path / name
    p.write_text(json.dumps({"traceEvents": ev}))
    return p


def _spans(path: Path):
    return extract(path, TraceFile(path))


def test_step_zero_proves_the_numbering(tmp_path):
    assert of_trace(_spans(_trace(tmp_path, "top.json", range(0, 8), TOP))) == TOP
    assert of_trace(_spans(_trace(tmp_path, "end.json", range(0, 8), END))) == END
    proof = prove([_spans(_trace(tmp_path, "e2.json", range(0, 8), END))])
    assert proof.numbering == END and "ProfilerStep#0 holds an optimizer step in e2.json" in proof.evidence


def test_no_step_zero_or_no_optimizer_spans_prove_nothing(tmp_path):
    assert of_trace(_spans(_trace(tmp_path, "late.json", range(3, 9), END))) is None
    # an empty ProfilerStep#0 proves 'top' only where other steps show their optimizer step
    assert of_trace(_spans(_trace(tmp_path, "bare.json", range(0, 8), TOP, optimizer=False))) is None
    proof = prove([_spans(_trace(tmp_path, "late2.json", range(3, 9), TOP))])
    assert proof.numbering is None and not proof.absolute and "ProfilerStep#0" in proof.evidence


def test_traces_that_disagree_are_a_conflict(tmp_path):
    a = _spans(_trace(tmp_path, "a.json", range(0, 8), TOP))
    b = _spans(_trace(tmp_path, "b.json", range(0, 8), END))
    proof = prove([a, b])
    assert proof.conflict and proof.numbering is None and "a.json: top" in proof.evidence


def test_auto_without_proof_refuses_a_fit_and_a_contradicted_flag_is_a_problem(tmp_path):
    from ftrun.check.numbering import NumberingProof

    schedule = Schedule(2, 8, 2)
    unproven = NumberingProof(None, "no trace captured ProfilerStep#0")
    with pytest.raises(NotChecked, match="step numbering not proven.*under 'top'.*under 'end'.*A fit is no proof"):
        choose_numbering([], schedule, {}, "auto", FiredFaults(), unproven)
    off, info, problems = choose_numbering([], schedule, {}, "top", FiredFaults(), unproven)
    assert (off, info.used, info.proven, problems) == (0, "top", False, [])
    proven = NumberingProof(END, "ProfilerStep#0 holds an optimizer step in x.json")
    off, info, problems = choose_numbering([], schedule, {}, "top", FiredFaults(), proven)
    assert off == 1 and info.used == END and info.proven
    assert problems and problems[0].startswith("--step-numbering top contradicts the trace")
    off, info, problems = choose_numbering([], schedule, {}, "auto", FiredFaults(), proven)
    assert off == 1 and problems == []


def test_a_commit_is_read_from_the_outer_optimizer_step(tmp_path):
    """save_parameters skipped (stale originals) is no failed commit: the outer step is there."""
    got = {
        c: _spans(_trace(tmp_path, f"{c}.json", range(0, 8), TOP, commit=c)).syncs[0].committed
        for c in ("outer", "save", "none")
    }
    assert got == {"outer": True, "save": False, "none": False}
    # a trace without any optimizer span falls back on save_parameters
    bare = {
        c: _spans(_trace(tmp_path, f"b{c}.json", range(0, 8), TOP, optimizer=False, commit=c)).syncs[0].committed
        for c in ("save", "none")
    }
    assert bare == {"save": True, "none": False}
