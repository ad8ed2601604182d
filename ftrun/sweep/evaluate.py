"""A trained cell's verdict and figures, read from its run dir (torch-free)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ftrun import grid, layout
from ftrun.errors import BadInput


def evaluate(cell: grid.Cell, run_dir: Path, rc: int, err: str) -> dict[str, Any]:
    """A trained cell's verdict and metrics (``crashed`` when the training failed before the
    end; a run that finished but whose replicas disagreed is analysed: ``fail``)."""
    out: dict[str, Any] = {"verdict": "crashed", "problem": None}
    summary, broken = None, None
    if (run_dir / layout.SUMMARY).exists():
        try:
            summary = layout.read_train_summary(run_dir)
        except BadInput as e:  # the cell's problem (one line naming the file), as inspect's below
            broken = str(e)
    if rc != 0 and (summary is None or summary.failures):
        from ftrun.launch.diagnose import ftrun_error

        out["problem"] = ftrun_error(err) or f"ftrun train exited {rc}"
        return out
    if broken is not None:
        return {"verdict": "fail", "problem": broken}
    from ftrun.check.analyze import analyze
    from ftrun.check.metrics import run_metrics

    try:
        report = analyze([run_dir], allow_failed_commits=True)
        m = run_metrics(cell.name, run_dir, report)
    except BadInput as e:
        return {"verdict": "fail", "problem": f"inspect: {e}"}
    v, problem = grid.verdict(report.verdict, report.problems(), [c.to_json() for c in report.failed_commits])
    group_error = first_group_error(run_dir, cell.config.hosts.replicas) if v != "pass" else None
    if group_error:
        problem = f"{problem}; first error in {group_error}"
    return {
        "verdict": v,
        "problem": problem,
        "failed_commits": sum(1 for c in report.failed_commits if not c.explained),
        "failed_commits_explained": sum(1 for c in report.failed_commits if c.explained),
        "numerics": m["numerics"],
        "commits": m["commits"],
        "steps_per_s": m["steps_per_s"],
        "exposed_comm_per_sync_ms": m["per_sync_exposed_ms"],
        "exposed_control_per_sync_ms": m["per_sync_exposed_control_ms"],
        "hidden_share": m["hidden_comm_share"],
        "final_loss": m["final_loss"],
        # the first fault's recovery (ftrun.check.recovery): seconds to the group's first commit, largest phase
        **recovery_metrics(summary),
        "notes": report.notes,
    }


def recovery_metrics(summary: layout.TrainSummary | None) -> dict[str, Any]:
    """The first recovery of the summary: its seconds, its largest phase and that phase's seconds
    (all None when the run recovered from nothing)."""
    b = summary.recovery if summary is not None else []
    if not b:
        return {"recovery_s": None, "recovery_largest_phase": None, "recovery_largest_phase_s": None}
    big = b[0].get("largest_phase")
    return {
        "recovery_s": b[0].get("total_s"),
        "recovery_largest_phase": big,
        "recovery_largest_phase_s": (b[0].get("phases") or {}).get(big) if big else None,
    }


def first_group_error(run_dir: Path, replicas: int) -> str | None:
    """``logs/replicaR.log: <its failure cause>`` for the first group log holding one (a rank's
    signal or first exception line: what went wrong inside torchft, as found; ftrun works
    around nothing)."""
    from ftrun.launch.diagnose import failure_cause, read_log

    for r in range(replicas):
        p = layout.group_log(run_dir, r)
        text = read_log(p)
        err = failure_cause(text) if text is not None else ""
        if err:
            return f"{p.relative_to(run_dir)}: {err}"
    return None
