"""Rich rendering of an ``ftrun.check.model.Report``: one table per worker, then one summary line.

"step" and "fragment" show the expected value, or ``expected→observed`` when they differ.
"""

from __future__ import annotations

from typing import Optional

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ftrun.check.model import EventResult, Report


def _ms(x: Optional[float]) -> str:
    return "" if x is None else f"{x:.2f}"


def _v(x: Optional[int]) -> str:
    return "-" if x is None else str(x)


def _pair(exp: Optional[int], obs: Optional[int]) -> str:
    if exp == obs:
        return _v(exp)
    return f"{_v(exp)}→{_v(obs)}"


def _row(e: EventResult) -> list[str]:
    verdict = "[green]ok[/]" if e.ok else f"[red]{e.problem}[/]"
    notes = list(e.notes)
    if e.serialized:
        notes.append(f"[yellow]{e.serialized_collectives} collective(s) serialized[/]")
    return [
        _pair(e.expected_step, e.observed_step),
        e.kind,
        _pair(e.expected_fragment, e.fragment),
        verdict,
        _ms(e.exposed_data_ms),
        _ms(e.exposed_control_ms),
        _ms(e.hidden_comm_ms),
        _ms(e.send_to_done_ms),
        "; ".join(notes),
    ]


def render(report: Report, console: Optional[Console] = None) -> None:
    con = console or Console(highlight=False, soft_wrap=False)
    if console is None and con.width < 120:
        con = Console(highlight=False, width=120)
    s = report.schedule
    if len(report.run_dirs) > 1:
        con.print(f"job {report.job_id}: {len(report.run_dirs)} run dirs merged ({', '.join(report.run_dirs)})")
    con.print(
        f"schedule F={s['fragments']} H={s['sync_every']} tau={s['fragment_sync_delay']} (w={s['window']}), "
        f"{report.mode}, step numbering {report.step_numbering['used']}"
    )
    for w in report.workers:
        ranges = ", ".join(f"{a}-{b}" for a, b in w.step_ranges)
        t = Table(
            title=f"replica {w.replica} rank {w.rank}  (identity: {w.source}; steps {ranges}; {len(w.files)} file(s))",
            title_justify="left",
        )
        for col in ("step", "kind", "fragment", "verdict", "exposed data ms", "exposed ctrl ms", "hidden ms", "send→done ms"):
            t.add_column(col, overflow="fold", no_wrap=col != "verdict")
        t.add_column("notes", overflow="fold", ratio=1)
        for e in report.events:
            if e.replica == w.replica and e.rank == w.rank:
                t.add_row(*_row(e))
        if w.failed_cycles:
            t.caption = f"commit failed in cycles {w.failed_cycles}"
        con.print(t)
    for c in report.cross_replica:
        if not c.ok:
            con.print(f"[red]cross-replica:[/] {c.problem}")
    for f in report.faults:
        con.print(f"[yellow]fault:[/] {escape(f['text'])}")
    if report.agreement is not None and report.agreement["ok"]:
        n = report.agreement["commits_checked"]
        con.print(f"fingerprints: replicas agreed after {n} commit(s)" if n else "fingerprints: no commit seen by two replicas")
    for p in report.run_problems:
        con.print(f"[red]run:[/] {escape(p)}")
    for n in report.notes:
        con.print(f"[dim]note: {n}[/]")
    bad = report.problems()
    n = len(report.events)
    if report.ok:
        con.print(f"[bold green]PASS[/] {n} events on {len(report.workers)} worker(s) landed as expected")
    else:
        con.print(f"[bold red]FAIL[/] {len(bad)} problem(s) in {n} events; first: {bad[0] if bad else '?'}")
