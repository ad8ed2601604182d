"""What ``ftrun train --chaos`` shows after the run: the faults, the recoveries, the goodput
(``ftrun.chaos_summary.ChaosSummary``). Renders only."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ftrun.chaos_summary import ChaosSummary
from ftrun.console import count


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def chaos_lines(c: ChaosSummary) -> list[str]:
    """The chaos run in a few lines: faults, recoveries, steps lost, goodput."""
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(c.by_kind.items())) or "none"
    rec = c.recoveries
    out = [
        f"chaos {','.join(c.kinds)} (seed {c.seed}, min alive {c.min_alive}): "
        f"{count(c.fired, 'fault')} injected ({kinds}) of {c.requested} requested in {_s(c.chaos_s)} s "
        f"· drawn MTBF {c.mtbf_s:g} s, realized {_s(c.realized_mtbf_s)} s",
        f"recoveries: {rec.count} back with a commit, median {_s(rec.median_s)} s, p90 {_s(rec.p90_s)} s"
        + (f", {rec.never_back} never back" if rec.never_back else "")
        + (f", {rec.absorbed} hang(s) absorbed (no quorum change)" if rec.absorbed else ""),
    ]
    if c.missed_steps_per_fault is not None:
        out.append(
            f"steps lost: {c.missed_steps_per_fault:g} run step(s) missed per kill or sigterm; "
            f"{c.goodput.lost_steps} group step(s) trained but not committed"
        )
    g = c.goodput
    gp = f"goodput: {g.useful_steps} useful committed group steps in {_s(g.train_s)} s = {_s(g.steps_per_s)} steps/s"
    if c.retained is not None and c.twin is not None:
        gp += f" · {c.retained:.1%} of the fault-free twin's {_s(c.twin.steps_per_s)} steps/s"
    else:
        gp += " (goodput retained needs a fault-free twin: ftrun compare)"
    out.append(gp)
    if c.ended:
        out.append(f"faults stopped: {c.ended}")
    if c.timeline:
        out.append(f"timeline: {c.timeline} (in the run dir: every group's steps, faults and recoveries)")
    return out


def print_chaos(console: Console, c: ChaosSummary) -> None:
    for text in chaos_lines(c):
        console.print(text)
    phases = {k: v for k, v in c.recoveries.phases_median_s.items() if v is not None}
    if phases:
        t = Table(title="recovery phases (median over the recoveries, s)", title_justify="left")
        for k in phases:
            t.add_column(k.replace("_", "-"), justify="right")
        t.add_row(*(f"{v:.2f}" for v in phases.values()))
        console.print(t)
