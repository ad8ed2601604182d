"""A trained cell's verdict and figures, read from its run dir (torch-free)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from ftrun import grid, layout
from ftrun.errors import BadInput


def evaluate(cell: grid.Cell, run_dir: Path, rc: int, err: str) -> layout.SweepRow:
    """A trained cell's verdict and metrics (``crashed`` when the training failed before the
    end; a run that finished but whose replicas disagreed is analysed: ``fail``): its row of
    sweep.json but what the sweep adds (its wall time, config and versions: ``run_cell``)."""
    row = layout.SweepRow(name=cell.name, params=cell.params, run_dir=str(run_dir), verdict="crashed")
    summary, broken = None, None
    if (run_dir / layout.SUMMARY).exists():
        try:
            summary = layout.read_train_summary(run_dir)
        except BadInput as e:  # the cell's problem (one line naming the file), as inspect's below
            broken = str(e)
    if rc != 0 and (summary is None or summary.failures):
        from ftrun.launch.diagnose import ftrun_error

        return msgspec.structs.replace(row, problem=ftrun_error(err) or f"ftrun train exited {rc}")
    if broken is not None:
        return msgspec.structs.replace(row, verdict="fail", problem=broken)
    from ftrun.check.analyze import analyze
    from ftrun.check.commits import torchft_errors
    from ftrun.check.metrics import run_metrics

    try:
        report = analyze([run_dir], allow_failed_commits=True)
        m = run_metrics(cell.name, run_dir, report)
    except BadInput as e:
        return msgspec.structs.replace(row, verdict="fail", problem=f"inspect: {e}")
    unexplained = [(c.replica, c.rank, c.sync_step) for c in report.failed_commits if not c.explained]
    v, problem = grid.verdict(report.verdict, report.problems(), unexplained)
    errors = torchft_errors([c for c in report.failed_commits if not c.explained])
    if v == "failed-commits" and errors:
        problem = f"{problem}; {errors}"
    replicas = cell.config.hosts.replicas if cell.config is not None else 1
    group_error = first_group_error(run_dir, replicas) if v != "pass" else None
    if group_error:
        problem = f"{problem}; first error in {group_error}"
    recovery_s, phase, phase_s = recovery_metrics(summary)
    return msgspec.structs.replace(
        row,
        verdict=v,
        problem=problem,
        failed_commits=len(unexplained),
        failed_commits_explained=len(report.failed_commits) - len(unexplained),
        numerics=m.numerics,
        commits=m.commits,
        steps_per_s=m.steps_per_s,
        exposed_comm_per_sync_ms=m.per_sync_exposed_ms,
        exposed_control_per_sync_ms=m.per_sync_exposed_control_ms,
        hidden_share=m.hidden_comm_share,
        final_loss=m.final_loss,
        # the first fault's recovery (ftrun.check.recovery): seconds to the group's first commit, largest phase
        recovery_s=recovery_s,
        recovery_largest_phase=phase,
        recovery_largest_phase_s=phase_s,
        notes=report.notes,
    )


def recovery_metrics(summary: layout.TrainSummary | None) -> tuple[float | None, str | None, float | None]:
    """The first recovery of the summary: its seconds, its largest phase and that phase's seconds
    (all None when the run recovered from nothing)."""
    b = summary.recovery if summary is not None else []
    if not b:
        return None, None, None
    big = b[0].largest_phase
    return b[0].total_s, big, b[0].phase_s(big)


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
