"""scripts/gpu_pgs.py (``gpu_check.sh pgs``), CPU side: its plan of cells for each set of GPU
process groups a host offers, within the time budget; every planned cell a valid ftrun
configuration; what a cell must show to pass; and on a host without CUDA it checks nothing and
says so. No GPU, no training (the matrix itself runs only on a lent GPU machine)."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import pytest
from test_gpu_check_numerics import _flags

from ftrun import layout
from ftrun.config.build import build
from train_fixtures import failed_commits_run, load_script, train_summary

ROOT = Path(__file__).resolve().parents[2]


def _script():
    sys.path.insert(0, str(ROOT / "scripts"))  # it imports gpu_check, as when run from scripts/
    return load_script("gpu_pgs")


gp = _script()
NO = "--backend nccl2: no CUDA GPU visible on this host (torch's native NCCL group runs on GPUs)"
# every subset of the four groups runnable here (the others refused with a line)
SUBSETS = [set(c) for n in range(5) for c in itertools.combinations(gp.GPU_BACKENDS, n)]


@pytest.mark.parametrize("runnable", SUBSETS, ids=lambda s: "+".join(sorted(s)) or "none")
def test_the_plan_fits_the_budget_and_covers_every_runnable_group_first(runnable) -> None:
    why = {b: None if b in runnable else f"--backend {b}: missing" for b in gp.GPU_BACKENDS}
    plan = gp.plan_cells(why, 350)
    assert plan.unavailable == {b: w for b, w in why.items() if w}
    assert plan.estimate_s == sum(gp.ESTIMATE_S[c.kind] for c in plan.cells) <= 350 - gp.MARGIN_S
    assert {c.backend for c in plan.cells + plan.not_run} == runnable
    assert len(plan.cells) + len(plan.not_run) == 4 * len(runnable)  # every kind for every group: run or listed
    # every runnable group gets its streaming run first; then cells in the matrix's order, as the budget holds
    assert [(c.backend, c.kind) for c in plan.cells[: len(runnable)]] == [
        (b, "streaming") for b in gp.GPU_BACKENDS if b in runnable
    ]
    order = [(k, b) for k, _ in gp.KINDS for b in gp.GPU_BACKENDS]
    assert [order.index((c.kind, c.backend)) for c in plan.cells] == sorted(
        order.index((c.kind, c.backend)) for c in plan.cells
    )


def test_the_h200s_likely_groups_run_their_streaming_and_kill_cells_then_what_fits() -> None:
    """torchft-nightly on torch 2.14 with CUDA and no torchcomms build: NCCL, Baby-NCCL and nccl2."""
    why = {"nccl": None, "baby-nccl": None, "nccl2": None, "torchcomms": "--backend torchcomms: not installed"}
    plan = gp.plan_cells(why, 350)
    assert [c.name for c in plan.cells] == [
        *("nccl-streaming", "baby-nccl-streaming", "nccl2-streaming"),
        *("nccl-kill", "baby-nccl-kill", "nccl2-kill"),
        *("nccl-baseline", "baby-nccl-baseline"),
    ]
    assert [c.name for c in plan.not_run] == [
        *("nccl2-baseline", "nccl-bucketized", "baby-nccl-bucketized", "nccl2-bucketized")
    ]
    assert plan.estimate_s == 3 * (25 + 75) + 2 * 20 == 350 - gp.MARGIN_S
    assert gp.plan_cells(why, 600).not_run == []  # a longer budget holds the whole matrix


def test_every_planned_cell_is_a_valid_configuration() -> None:
    for cell in gp.plan_cells(dict.fromkeys(gp.GPU_BACKENDS), 10_000).cells:
        flags = _flags(cell.args)
        if cell.kind == "kill":  # (_flags knows gpu_check's own flags only)
            flags.update(kill=[flags["kill"]], profile_recovery=flags["profile_recovery"] == "on")
        cfg = build(**flags)
        assert cfg.hosts.backend == cell.backend
        if cell.kind == "kill":
            assert (
                cfg.hosts.replicas == 3 and cfg.faults.restarts == 1 and [str(f) for f in cfg.faults.kill] == ["1@15"]
            )


def _run(**kw) -> dict:
    """A ``train`` result with its verdict as a sweep cell (``gpu_check.cell_verdict``)."""
    return {
        **{"exit": 0, "verdict": "pass", "cell_verdict": "pass", "cell_problem": None, "recovered_s": []},
        **{"_numerics": {"status": "checked", "checked": 2}, **kw},
    }


def test_what_a_cell_must_show_to_pass() -> None:
    stream, kill = gp.Cell("nccl", "streaming"), gp.Cell("nccl2", "kill")
    assert gp.cell_result(stream, _run(), False)["problem"] is None
    failed = _run(verdict="fail", cell_verdict="fail", cell_problem="sync of fragment 0 missing at step 20", exit=1)
    assert gp.cell_result(stream, failed, False)["problem"] == (
        "verdict fail, not pass (exit 1): sync of fragment 0 missing at step 20"
    )
    unchecked = _run(_numerics={"status": "not checked", "why": "no sketches"})
    assert gp.cell_result(stream, unchecked, False)["problem"] == "numerics not checked: no sketches"
    assert gp.cell_result(kill, _run(recovered_s=[3.2]), False)["problem"] is None
    assert gp.cell_result(kill, _run(recovered_s=[None]), False)["problem"] == "the killed group did not commit again"
    assert gp.cell_result(kill, _run(), False)["problem"] == "the killed group did not commit again"
    timed_out = {"ok": False, "error": "timed out after 50 s"}
    assert gp.cell_result(stream, timed_out, False)["problem"] == "timed out after 50 s"
    # torchft 0.2's Baby groups fail every commit (its known defect): that is what the cell must show,
    # as a sweep cell's verdict (grid.verdict); the train check itself says "fail" (exit 1) for it
    baby = gp.Cell("baby-nccl", "streaming")
    assert gp.cell_result(baby, _run(verdict="fail", cell_verdict="failed-commits", exit=1), True)["problem"] is None
    assert gp.cell_result(baby, _run(), True)["problem"] == "verdict pass, not failed-commits (exit 0)"
    assert gp.cell_result(baby, _run(), False)["problem"] is None
    broken = _run(verdict="fail", cell_verdict="fail", cell_problem="p", exit=1)  # the schedule failed too
    assert gp.cell_result(baby, broken, True)["problem"] == "verdict fail, not failed-commits (exit 1): p"


def test_a_cell_is_judged_as_a_sweep_cell_is(tmp_path) -> None:
    """Issue 45: a Baby-NCCL cell on torchft 0.2 was flagged "verdict fail, not failed-commits": the
    train check says "fail" for failed commits; ``failed-commits`` is the sweep cell's verdict
    (``ftrun.grid.verdict``), which ``cell_verdict`` gives (the schedule held, commits failed)."""
    run = failed_commits_run(tmp_path)
    (run / layout.SUMMARY).write_text(json.dumps(train_summary(ok=False, run_dir=str(run))))
    got = {"exit": 1, "verdict": "fail", "run_dir": str(run), "_stderr": "", "_numerics": None, "recovered_s": []}
    r = gp.cell_verdict("baby-nccl-streaming", got)
    assert r["cell_verdict"] == "failed-commits" and "_stderr" not in r, r
    assert r["cell_problem"].startswith("4 commit(s) failed on 2 rank(s) that no injected fault explains")
    assert gp.cell_result(gp.Cell("baby-nccl", "streaming"), r, True)["problem"] is None
    assert gp.cell_result(gp.Cell("nccl", "streaming"), dict(r), True)["problem"].startswith(
        "verdict failed-commits, not pass (exit 1): 4 commit(s) failed"
    )
    timed_out = {"ok": False, "error": "timed out after 50 s", "run_dir": str(run)}
    assert gp.cell_verdict("x", timed_out) == timed_out  # not finished: nothing judged, its error stays


def test_without_cuda_nothing_is_checked_and_it_says_so(monkeypatch, capsys) -> None:
    monkeypatch.setattr(gp, "cuda_available", lambda: (False, "torch 2.13.0+cpu: CUDA not available"))
    monkeypatch.setattr(gp, "train", lambda *a: pytest.fail("trained without CUDA"))
    assert gp.main([]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {
        "cuda": False,
        "device": "torch 2.13.0+cpu: CUDA not available",
        "note": "no CUDA: the GPU process groups are not checked on this host",
    }


def test_a_cell_the_budget_cannot_hold_is_not_a_pass(monkeypatch, capsys) -> None:
    monkeypatch.setattr(gp, "cuda_available", lambda: (True, "1 x fake"))
    monkeypatch.setattr(gp, "availability", lambda: {"nccl": None, "baby-nccl": NO, "nccl2": NO, "torchcomms": NO})
    monkeypatch.setenv("GPU_CHECK_BUDGET_S", "40")  # the streaming cell only
    monkeypatch.setenv("OUT", "/nonexistent-gpu-pgs")
    ran = []
    monkeypatch.setattr(gp, "train", lambda out, name, args, t: ran.append((name, t)) or _run())
    monkeypatch.setattr(gp, "cell_verdict", lambda name, r: r)  # (no run dir to judge)
    assert gp.main([]) == 1
    out = json.loads(capsys.readouterr().out)
    assert [n for n, _ in ran] == ["nccl-streaming"] and ran[0][1] <= 2 * gp.ESTIMATE_S["streaming"]
    assert out["cells"]["nccl-streaming"]["problem"] is None and out["ok"] is False
    assert set(out["not_run"]) == {"nccl-kill", "nccl-baseline", "nccl-bucketized"}
    assert out["unavailable"]["nccl2"] == NO
