"""``ftrun plan --mtbf S --recovery-s S``: predicted goodput under a rate of faults
(``ftrun.plan.goodput``), and ``plan --check COMPARE_DIR`` of a chaos run against its twin.
Torch-free.

Inputs: flags, or ``--from`` a ``--chaos`` run dir (its summary's realized mean time between
faults, mean recovery and mean detect interval — the survivors' stall —, its replicas and H/F,
its median step time); flags win. Means, not medians: the model's cost is linear in each fault's
recovery and stall, so the expected cost of a fault is their mean, and a storm's few long
recoveries (a collective with the dead group waiting for its timeout) are most of its cost. The
check reads a compare dir whose report holds a chaos run beside its fault-free twin
(``ftrun.chaos_summary.GoodputComparison``): the prediction from the chaos run's own realized
MTBF and measured recoveries, with the twin's step time (R / its goodput), against the goodput
retained that compare measured.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import TypeVar

import msgspec

from ftrun import layout
from ftrun.errors import BadInput
from ftrun.plan.check_result import GoodputCheck, GoodputPlan
from ftrun.plan.goodput import GoodputInputs, GoodputPrediction, predict_goodput, relative_error


def _chaos_of(run_dir: Path) -> tuple[layout.TrainSummary, layout.Manifest]:
    summary = layout.read_train_summary(run_dir)
    if summary.chaos is None:
        raise BadInput(f"{run_dir}: not a --chaos run (its summary has no chaos figures)")
    return summary, layout.read_train_manifest(run_dir)


def _median_step_s(run_dir: Path, m: layout.Manifest) -> float | None:
    from ftrun.event_log import read_event_log

    times = [
        r.step_time_s
        for e in m.event_logs
        if e.rank == 0
        for r in read_event_log(run_dir / e.path)
        if r.step is not None and r.step_time_s > 0
    ]
    return statistics.median(times) if times else None


def inputs_from_run(run_dir: Path, step_s: float | None = None) -> tuple[GoodputInputs, dict[str, str]]:
    """The model's inputs from a chaos run dir (module docstring) and where each came from."""
    summary, m = _chaos_of(run_dir)
    c = summary.chaos
    assert c is not None  # _chaos_of refused a run without
    if c.by_kind.get("hang"):
        raise BadInput(f"{run_dir}: its faults include hangs, which the goodput model does not cover (kills only)")
    if c.realized_mtbf_s is None or not c.recoveries.totals_s:
        raise BadInput(f"{run_dir}: no fault recovered with a commit: no MTBF or recovery time to predict from")
    measured_step = step_s if step_s is not None else _median_step_s(run_dir, m)
    if measured_step is None:
        raise BadInput(f"{run_dir}: no step times in its event logs")
    sched = m.schedule
    detects = [span[1] - span[0] for r in summary.recovery if (span := r.spans.get("detect")) is not None]
    x = GoodputInputs(
        replicas=m.replicas,
        mtbf_s=c.realized_mtbf_s,
        recovery_s=statistics.fmean(c.recoveries.totals_s),
        step_s=measured_step,
        sync_window=max(1, sched.sync_every // sched.fragments),
        stall_s=statistics.fmean(detects) if detects else 0.0,
    )
    sources = {
        "mtbf_s": f"the run's realized MTBF ({c.fired} faults in {c.chaos_s} s)",
        "recovery_s": f"the mean of its {len(c.recoveries.totals_s)} recoveries (fault -> first commit)",
        "step_s": "given" if step_s is not None else "the median step time of its groups",
        "stall_s": f"the mean of its {len(detects)} detect intervals (fault -> the survivors' first quorum "
        "without the group)"
        if detects
        else "no detect interval measured: 0",
    }
    return x, sources


def plan_goodput(
    from_dir: str | None,
    mtbf_s: float | None,
    recovery_s: float | None,
    replicas: int | None,
    step_ms: float | None,
    sync_window: int | None,
) -> GoodputPlan:
    """``ftrun plan --mtbf/--recovery-s`` (module docstring): the prediction ``--json`` prints."""
    step_s = None if step_ms is None else step_ms / 1000
    for flag, v in (("--mtbf", mtbf_s), ("--recovery-s", recovery_s), ("--step-ms", step_ms)):
        if v is not None and not v >= 0:
            raise BadInput(f"{flag} {v}: must be >= 0")
    if from_dir is not None:
        base, sources = inputs_from_run(Path(from_dir), step_s)
    else:
        missing = [f for f, v in (("--mtbf", mtbf_s), ("--recovery-s", recovery_s)) if v is None]
        if missing:
            raise BadInput(f"plan: goodput needs {' and '.join(missing)} (or --from a --chaos run dir)")
        base = GoodputInputs(replicas=2, mtbf_s=1.0, recovery_s=0.0, step_s=0.0, sync_window=10)
        sources = {}
    x = GoodputInputs(
        replicas=replicas or base.replicas,
        mtbf_s=mtbf_s if mtbf_s is not None else base.mtbf_s,
        recovery_s=recovery_s if recovery_s is not None else base.recovery_s,
        step_s=step_s if step_s is not None else base.step_s,
        sync_window=sync_window or base.sync_window,
        stall_s=base.stall_s,
    )
    if x.mtbf_s <= 0:
        raise BadInput(f"--mtbf {x.mtbf_s}: must be > 0")
    given = (("mtbf_s", mtbf_s), ("recovery_s", recovery_s), ("step_s", step_s))
    sources.update({k: "given" for k, v in given if v is not None})
    p = predict_goodput(x)
    return GoodputPlan(inputs=_rounded(x), sources=sources, prediction=_rounded(p))


_S = TypeVar("_S", GoodputInputs, GoodputPrediction)


def _rounded(x: _S) -> _S:
    """``x`` with each float rounded to 4 decimals (what is printed)."""
    floats = {k: round(v, 4) for k, v in msgspec.structs.asdict(x).items() if isinstance(v, float)}
    return msgspec.structs.replace(x, **floats)


def _report(cmp_dir: Path) -> layout.CompareReport:
    """report.json, bounded (``BadInput``: one line naming the file)."""
    return layout.read_compare_report(cmp_dir / layout.REPORT_JSON)


def has_goodput(cmp_dir: Path) -> bool:
    """Whether a compare dir's report holds a chaos run beside its twin (an unreadable report:
    False, and plan --check's reading of it says what is wrong)."""
    if not (cmp_dir / layout.REPORT_JSON).is_file():
        return False
    try:
        return _report(cmp_dir).goodput is not None
    except BadInput:
        return False


def check_goodput(cmp_dir: Path, tolerance: float) -> GoodputCheck:
    """``plan --check COMPARE_DIR`` of a chaos run and its twin (module docstring); the verdict
    fails when the predicted goodput retained is off the measured by more than ``tolerance`` (relative)."""
    report = _report(cmp_dir)
    g = report.goodput
    assert g is not None  # has_goodput said so
    dirs = {r.name: r.run_dir for r in report.runs}
    chaos_dir = dirs.get(g.chaos)
    if not isinstance(chaos_dir, str) or "," in chaos_dir:
        raise BadInput(f"--check {cmp_dir}: report.json names no run dir for the chaos run {g.chaos}")
    run_dir = (cmp_dir / chaos_dir) if not Path(chaos_dir).is_absolute() else Path(chaos_dir)
    twin_rate, measured = g.twin_steps_per_s, g.retained
    if not twin_rate or measured is None:
        raise BadInput(f"--check {cmp_dir}: the twin's goodput was not measured")
    base, sources = inputs_from_run(run_dir)
    step_s = base.replicas / twin_rate  # the twin's useful step, sync included
    x = GoodputInputs(base.replicas, base.mtbf_s, base.recovery_s, step_s, base.sync_window, base.stall_s)
    sources["step_s"] = f"the twin {g.twin}: replicas / its goodput"
    p = predict_goodput(x)
    err = relative_error(p.retained, measured)
    ok = err is not None and err <= tolerance
    return GoodputCheck(
        check=str(cmp_dir),
        tolerance=tolerance,
        inputs=_rounded(x),
        sources=sources,
        prediction=_rounded(p),
        measured_retained=measured,
        relative_error=None if err is None else round(err, 4),
        twin_differs=list(g.differs),
        verdict="pass" if ok else "fail",
        measured_spread=g.retained_spread,
        measured_repeats=g.repeats,
    )
