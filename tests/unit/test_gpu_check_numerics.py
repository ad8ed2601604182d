"""scripts/gpu_check.py's numeric part, CPU side: what a run's numeric check must say for the GPU check
to pass (the quantized run: every checked sync a quantized one), and that its planned runs are valid
ftrun configurations. No process, no GPU (the script itself runs only on a lent GPU machine)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import msgspec

from ftrun.check.numerics import Numerics, quantized_not_checked
from ftrun.check.numerics_result import unplaced_problem
from ftrun.config.build import build
from ftrun.layout import NumericsProblem

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _json(n: Numerics) -> dict:
    """The check as a summary.json holds it (what the script reads)."""
    return msgspec.to_builtins(n.record())


def _problem(text: str, cause: str) -> NumericsProblem:
    return unplaced_problem("average", cause, text)


def test_the_quantized_run_must_have_its_quantized_rounds_checked() -> None:
    gc = _script()
    ok = msgspec.to_builtins(
        Numerics(status="checked", checked=4, replica_syncs_checked=8, quantized_checked=4).record()
    )
    assert gc.numerics_requirement(ok, quantized=True) is None
    assert gc.numerics_requirement(ok, quantized=False) == "4 sync(s) checked as quantized in a run without --quantize"
    # torchft ran its plain allreduce on some: not the quantized path the run asked for
    mixed = msgspec.to_builtins(
        Numerics(status="checked", checked=4, replica_syncs_checked=8, quantized_checked=1).record()
    )
    assert gc.numerics_requirement(mixed, quantized=True) == (
        "3 of 4 checked syncs were not quantized (torchft ran its plain allreduce)"
    )
    # the wrapper not installed: not checked (never a pass), the reason carried through
    why = quantized_not_checked("quantized allreduce not sketched: torchft.manager.allreduce_quantized takes (x)")
    skipped = _json(Numerics(why=why, committed=8, not_checked={why: 8}))
    assert gc.numerics_requirement(skipped, quantized=True) == f"numerics not checked: {why}"
    partly = msgspec.to_builtins(
        Numerics(status="checked", checked=2, quantized_checked=2, not_checked={why: 4}).record()
    )
    assert gc.numerics_requirement(partly, quantized=True) == f"4 quantized replica-sync(s) not checked: {why}"
    plain = _json(Numerics(status="checked", checked=3, replica_syncs_checked=6))
    assert gc.numerics_requirement(plain, quantized=False) is None
    assert gc.numerics_requirement(None, quantized=False) == "no numeric check in the run's summary"
    bad = Numerics(status="checked", checked=3, problems=[_problem("sync step 6 ...: wrong", "a stale buffer")])
    assert gc.numerics_requirement(_json(bad), quantized=False).startswith("1 numeric problem(s); first: sync step 6")
    none = _json(Numerics(status="checked", checked=0))
    assert gc.numerics_requirement(none, quantized=True) == "no sync checked"


def test_the_corrupted_quantized_run_must_fail_on_the_divide() -> None:
    gc = _script()
    cause = "divided by participants + 1 = 3 instead of 2 participants (the world size instead of the participants?)"
    num = msgspec.to_builtins(
        Numerics(status="checked", checked=4, problems=[_problem("sync step 6 ...", cause)]).record()
    )
    brief = gc.numerics_brief(num)
    assert brief["problems"] == 1 and brief["first_cause"] == cause and brief["line"].startswith("numerics: 1 problem")
    assert gc.corrupt_requirement({"exit": 1, "numerics": brief}) is None
    assert gc.corrupt_requirement({"exit": 0, "numerics": brief}) == "exit 0, not 1"
    other = gc.numerics_brief(_json(Numerics(status="checked", problems=[_problem("x", "a stale buffer")])))
    assert "not the divide by participants + 1" in gc.corrupt_requirement({"exit": 1, "numerics": other})


def _flags(args: list[str]) -> dict:
    """``ftrun train`` arguments -> ``ftrun.config.build`` keys (the flags gpu_check uses)."""
    out: dict = {}
    i = 0
    while i < len(args):
        key = args[i].removeprefix("--").replace("-", "_")
        if key in ("quantize", "bucketize"):
            out[key] = True
            i += 1
            continue
        value = args[i + 1]
        if key == "corrupt_allreduce":
            out[key] = [value]
        elif key == "link":
            out[key] = value
        else:
            out[key] = int(value) if value.isdigit() else value
        i += 2
    return out


def test_the_planned_runs_are_valid_configurations() -> None:
    gc = _script()
    plan = {name: args for name, args, _ in gc.plan_runs()}
    assert list(plan) == ["streaming", "bucketized", "link", "quantize", "baby-nccl", "quantize-corrupt"]
    for name, args in plan.items():
        cfg = build(**_flags(args))  # BadInput (e.g. a corrupt step that is not a sync step) fails here
        assert cfg.optimizer.quantize == (name.startswith("quantize")), name
    assert plan["quantize-corrupt"] == [*plan["quantize"], "--corrupt-allreduce", gc.CORRUPT]


def test_a_run_skipped_for_time_is_not_a_pass() -> None:
    """The corrupted quantized run proves the check fails only once it has run: skipped, the
    summary is not ok and names it."""
    gc = _script()
    passed = {"ok": True, "inspect": {"verdict": "pass"}, "numerics_problem": None}
    runs = {"streaming": passed, "quantize": {"ok": True, "numerics_problem": None}}
    assert gc.overall({**runs, "quantize-corrupt": {"ok": False, "corrupt_problem": None}}) == (True, [])
    skipped = {"ok": False, "error": gc.SKIPPED}
    assert gc.overall({**runs, "quantize-corrupt": skipped}) == (False, ["quantize-corrupt"])


def test_a_baby_nccl_run_on_a_release_that_fails_its_commits_must_show_failed_commits() -> None:
    """Issue 45: torchft 0.2's Baby groups fail every commit, so the baby-nccl run is not ok (its
    train check FAILs); what it must show is the sweep cell verdict ``failed-commits``."""
    gc = _script()
    assert gc.expected_verdict("baby-nccl", True) == "failed-commits"
    assert gc.expected_verdict("baby-nccl", False) == gc.expected_verdict("nccl", True) == "pass"
    passed = {"ok": True, "inspect": {"verdict": "pass"}, "numerics_problem": None}
    runs = {"streaming": passed, "quantize": {"ok": True}, "quantize-corrupt": {"ok": False}}
    baby = {"ok": False, "exit": 1, "verdict": "fail", "expected": "failed-commits", "cell_verdict": "failed-commits"}
    baby["verdict_problem"] = gc.verdict_problem(baby, baby["expected"])
    assert baby["verdict_problem"] is None and gc.overall({**runs, "baby-nccl": baby}) == (True, [])
    wrong = {**baby, "cell_verdict": "fail", "cell_problem": "p"}
    wrong["verdict_problem"] = gc.verdict_problem(wrong, "failed-commits")
    assert wrong["verdict_problem"] == "verdict fail, not failed-commits (exit 1): p"
    assert gc.overall({**runs, "baby-nccl": wrong}) == (False, [])
    # where the release commits on Baby groups, the run must pass as any other
    healthy = {"ok": False, "expected": "pass", "cell_verdict": "pass", "verdict_problem": None}
    assert gc.overall({**runs, "baby-nccl": healthy}) == (False, [])
