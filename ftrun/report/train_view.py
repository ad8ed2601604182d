"""What ``ftrun train`` shows: a live line per replica group, then a summary table."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from ftrun import layout
from ftrun.console import LiveTable, console as make_console, count, line, styled
from ftrun.report.numerics_view import numerics_line
from ftrun.schedule import label as schedule_label
from ftrun.torchft_compat import describe_versions


def progress_table(state: Any) -> Table:
    """One line per replica group (``state``: the supervisor's ``ftrun.launch.supervise.RunState``,
    read by its fields: report does not import launch). Fits 80 columns: no cell wraps, short headers (two lines where
    needed), the step total in the title, and no vertical rules."""
    t = Table(
        title=f"ftrun train · {state.run_dir} · {state.cfg.steps} steps",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    for col, right in (
        ("group", True),
        ("step", True),
        ("loss", True),
        ("manager\nstep", True),
        ("commits", True),
        ("failed", True),
        ("last sync", False),
        ("in\nquorum", True),
    ):
        t.add_column(col, justify="right" if right else "left", no_wrap=True, overflow="ellipsis")
    for r, p in sorted(state.progress.items()):
        t.add_row(
            str(r),
            str(p.step),
            f"{p.loss:.4f}" if p.loss is not None else "-",
            str(p.manager_step),
            str(p.commits),
            str(p.failed_commits),
            p.last_sync,
            str(p.participants) if p.participants is not None else "-",
        )
    return t


class LiveView(LiveTable):
    """Refreshes from the event logs; disabled for --json or when stdout is not a terminal."""

    def __init__(self, state: Any, enabled: bool = True) -> None:
        super().__init__(enabled)
        self.state = state

    def refresh(self, state: Any) -> None:
        if self.enabled:
            self.show(progress_table(state))


def agreement_text(a: layout.AgreementSummary) -> Text | str:
    """What this run dir's agreement check saw, and only that: one group here compares nothing
    (the job-wide check is inspect-trace of every group's run dir)."""
    if not a.ok:
        return styled(f"replicas DISAGREED after {count(len(a.disagreements), 'commit')}", "red")
    # (None: a summary of an ftrun before the counts, when every group ran here)
    here = a.groups_here if a.groups_here is not None else 2
    job = a.groups_in_job if a.groups_in_job is not None else 2
    if here < 2:
        return (
            f"one replica group of {job} here: agreement across groups is checked by "
            f"`ftrun inspect-trace` of all {job} groups' run dirs"
        )
    if not a.commits_checked:
        return "no commit seen by two replicas: agreement not checked"
    n = a.commits_checked
    return styled(f"replicas agreed after {'all ' if n > 1 else ''}{count(n, 'commit')}", "green")


def print_summary(summary: layout.TrainSummary) -> None:
    console = make_console()
    link = summary.link
    t = Table(
        title=f"ftrun train · {schedule_label(summary.schedule)} · {summary.backend}"
        + (f" · emulated link {link.description}" if link else ""),
        title_justify="left",
    )
    for col in ("replica", "steps", "steps/s", "commits", "failed", "final loss", "manager step"):
        t.add_column(col, justify="right")
    for r in summary.replicas:
        t.add_row(
            str(r.replica),
            str(r.steps),
            f"{r.steps_per_s:.2f}" if r.steps_per_s else "-",
            str(r.commits),
            str(r.failed_commits),
            f"{r.final_loss:.4f}" if r.final_loss is not None else "-",
            "-" if r.final_manager_step is None else str(r.final_manager_step),
        )
    console.print(t)
    console.print(line(f"wall time {summary.wall_s:.1f} s · ", agreement_text(summary.agreement)))
    if ran := describe_versions(summary.versions):
        console.print(styled(f"ran on {ran}", "dim"))
    num = summary.numerics
    if num is not None:
        console.print(styled(numerics_line(num), "red") if num.problems else numerics_line(num))
        for p in num.problems[1:]:
            console.print(styled(f"numerics: {p.text}", "red"))
    rec, breakdown = summary.faults, summary.recovery
    if summary.chaos is not None:  # many faults: their figures, not a table each (--json has every breakdown)
        from ftrun.report.chaos_view import print_chaos

        print_chaos(console, summary.chaos)
        rec, breakdown = layout.FaultHistory(), []
    if rec.faults or rec.restarts:
        _print_faults(console, rec, summary.schedule.steps)
    if breakdown:  # every fired fault, a hang too (it lists no fault above: nothing was relaunched)
        from ftrun.report.recovery_view import print_recovery

        print_recovery(console, breakdown)
    for r in summary.replicas:
        if r.lost:
            lost = f"replica group {r.replica} lost for good ({r.lost}, no restarts left); the others carried on"
            console.print(styled(lost, "yellow"))
    for f in summary.failures:
        console.print(line(("failure:", "red"), f" {f}"))
    if summary.traces:
        console.print(
            f"traces: {count(len(summary.traces), 'file')} in {summary.run_dir}/traces  ·  manifest: {summary.manifest}"
        )
    else:
        console.print(f"no traces ({summary.traces_note or 'profiling off'}) · manifest: {summary.manifest}")


def _print_faults(console: Any, rec: layout.FaultHistory, steps: int | None) -> None:
    """A line per fault (whether and when its group came back, or why not), then the restarts,
    heals, quorum changes and commits lost."""
    for f in rec.faults:
        if f.recovered_s is not None:
            back = f"back in the quorum with a commit {f.recovered_s:.1f} s later"
            if rec.extra_steps:  # the others went on past --steps until it was back
                back += f" ({rec.extra_steps} step(s) past --steps {steps} to see it commit)"
        elif f.rejoined_after_end is not None:  # the cause: as inspect-trace and the breakdown say
            back = (
                f"relaunched, but back only after the run's last step {f.last_step} "
                f"({f.cause or 'the other groups had finished'}): never in the run's quorum again"
            )
        elif f.cause:  # relaunched, never back: the cause inspect-trace and the breakdown give
            back = f"relaunched, never back in the run's quorum: {f.cause}"
        else:
            back = "never back in the quorum"
        console.print(f"fault: {f.action} replica group {f.replica} at step {f.step} · {back}")
    heals = ", ".join(f"group {h.replica} from group {h.source_replica} at step {h.step}" for h in rec.heals) or "none"
    console.print(
        f"restarts {rec.restarts} · heals: {heals} · quorum changes {len(rec.quorum_changes)} · "
        f"commits lost {rec.commits_lost}"
    )
