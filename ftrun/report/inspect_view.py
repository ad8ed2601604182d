"""Rich rendering of an ``ftrun.check.model.Report``: one table per worker, then one summary line.

"step" and "fragment" show the expected value, or ``expected→observed`` when they differ; a
fragment not identified from evidence shows as ``?``. Trace-wide notes come once, under the
schedule line; failed commits are counted per worker (table caption) and per replica (summary).
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


def _pair(exp: Optional[int], obs) -> str:
    if exp == obs:
        return _v(exp)
    return f"{_v(exp)}→{_v(obs)}"


def _row(e: EventResult) -> list[str]:
    verdict = "[green]ok[/]" if e.ok else f"[red]{escape(e.problem or '')}[/]"
    notes = [escape(n) for n in e.notes]
    if e.serialized:
        notes.append(f"[yellow]{e.serialized_collectives} collective(s) serialized[/]")
    return [
        _pair(e.expected_step, e.observed_step),
        e.kind,
        _pair(e.expected_fragment, e.fragment if e.fragment_checked or e.observed_step is None else "?"),
        verdict,
        _ms(e.exposed_comm_ms),
        _ms(e.hidden_comm_ms),
        _ms(e.send_to_done_ms),
        _ms(e.should_commit_ms),
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
    for n in report.notes:
        con.print(f"[dim]note: {escape(n)}[/]")
    for w in report.workers:
        ranges = ", ".join(f"{a}-{b}" for a, b in w.step_ranges)
        t = Table(
            title=f"replica {w.replica} rank {w.rank}  (identity: {w.source}; steps {ranges}; {len(w.files)} file(s))",
            title_justify="left",
        )
        for col in ("step", "kind", "fragment", "verdict", "exposed ms", "hidden ms", "send→done ms", "commit ms"):
            t.add_column(col, overflow="fold", no_wrap=col != "verdict")
        t.add_column("notes", overflow="fold", ratio=1)
        for e in report.events:
            if e.replica == w.replica and e.rank == w.rank:
                t.add_row(*_row(e))
        mine = [c for c in report.failed_commits if c["replica"] == w.replica and c["rank"] == w.rank]
        if mine:
            src = sorted({c["source"] for c in mine})
            t.caption = f"{len(mine)} commit(s) failed, at sync steps {[c['sync_step'] for c in mine]} ({', '.join(src)})"
            t.caption_justify = "left"
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
    bad = report.problems()
    n = len(report.events)
    tail = ""
    unchecked = sum(1 for e in report.events if e.observed_step is not None and not e.fragment_checked)
    if unchecked:
        tail += f"; fragment not checked for {unchecked} (see note)"
    per: dict[int, set] = {}
    for c in report.failed_commits:  # a replica's ranks fail the same commit together: count it once
        per.setdefault(c["replica"], set()).add(c["sync_step"])
    per = {r: len(s) for r, s in per.items()}
    if per:
        tail += "; failed commits: " + ", ".join(f"replica {r}: {k}" for r, k in sorted(per.items()))
    if report.ok:
        con.print(f"[bold green]PASS[/] {n} events on {len(report.workers)} worker(s) landed as expected{tail}")
    else:
        con.print(f"[bold red]FAIL[/] {len(bad)} problem(s) in {n} events{tail}; first: {escape(bad[0]) if bad else '?'}")
