"""Rich rendering of an ``ftrun.check.model.Report``: one table per worker, then one summary line.

"step" and "fragment" show the expected value, or ``expected→observed`` when they differ.
"""

from __future__ import annotations

from typing import Optional

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from ftrun.check.model import EventResult, Report
from ftrun.console import console as make_console, line, styled


def _ms(x: Optional[float]) -> str:
    return "" if x is None else f"{x:.2f}"


def _v(x: Optional[int]) -> str:
    return "-" if x is None else str(x)


def _pair(exp: Optional[int], obs: Optional[int]) -> str:
    if exp == obs:
        return _v(exp)
    return f"{_v(exp)}→{_v(obs)}"


def _row(e: EventResult) -> list:
    return [
        _pair(e.expected_step, e.observed_step),
        e.kind,
        _pair(e.expected_fragment, e.fragment),
        styled("ok", "green") if e.ok else styled("FAIL", "bold red"),
        _ms(e.exposed_comm_ms),
        _ms(e.hidden_comm_ms),
        _ms(e.send_to_done_ms),
        _ms(e.should_commit_ms),
    ]


def _remark(e: EventResult) -> Optional[Text]:
    """The line under the table for a row with a problem or notes (None: nothing to say)."""
    notes = list(e.notes)
    if e.serialized:
        notes.append(f"{e.serialized_collectives} collective(s) serialized")
    if e.ok and not notes:
        return None
    out = line(f"step {_pair(e.expected_step, e.observed_step)} {e.kind}: ")
    if not e.ok:
        out.append(str(e.problem), "red")
    if notes:
        out.append(("; " if not e.ok else "") + "; ".join(notes), "yellow")
    return out


_COLUMNS = ("step", "kind", "fragment", "verdict", "exposed ms", "hidden ms", "send→done ms", "commit ms")
_NARROW = ("step", "kind", "frag", "verdict", "exposed\nms", "hidden\nms", "send→\ndone ms", "commit\nms")
_WIDE_MIN = 100  # below this many columns, the narrow headers (the table then needs about 75)


def _table(title: str, rows: list[list], width: int) -> Table:
    """One worker's table: short cells only (problems and notes go under it); at a narrow
    terminal the headers take two lines, so the table fits 80 columns."""
    t = Table(title=title, title_justify="left")
    for col, head in zip(_COLUMNS, _COLUMNS if width >= _WIDE_MIN else _NARROW):
        t.add_column(head, justify="right" if col.endswith(" ms") else "left", no_wrap=True)
    for r in rows:
        t.add_row(*r)
    return t


def render(report: Report, console: Optional[Console] = None) -> None:
    con = console or make_console()
    s = report.schedule
    if len(report.run_dirs) > 1:
        con.print(f"job {report.job_id}: {len(report.run_dirs)} run dirs merged ({', '.join(report.run_dirs)})")
    con.print(
        f"schedule F={s['fragments']} H={s['sync_every']} tau={s['fragment_sync_delay']} (w={s['window']}), "
        f"{report.mode}, step numbering {report.step_numbering['used']}"
    )
    for w in report.workers:
        ranges = ", ".join(f"{a}-{b}" for a, b in w.step_ranges)
        mine = [e for e in report.events if e.replica == w.replica and e.rank == w.rank]
        t = _table(f"replica {w.replica} rank {w.rank}  (identity: {w.source}; steps {ranges}; {len(w.files)} file(s))", [_row(e) for e in mine], con.width)
        if w.failed_cycles:
            t.caption = f"commit failed in cycles {w.failed_cycles}"
        con.print(t)
        for e in mine:
            remark = _remark(e)
            if remark is not None:
                con.print(Padding(remark, (0, 0, 0, 2)))
    for c in report.cross_replica:
        if not c.ok:
            con.print(line(("cross-replica:", "red"), f" {c.problem}"))
    for f in report.faults:
        con.print(line(("fault:", "yellow"), f" {f['text']}"))
    if report.agreement is not None and report.agreement["ok"]:
        n = report.agreement["commits_checked"]
        con.print(f"fingerprints: replicas agreed after {n} commit(s)" if n else "fingerprints: no commit seen by two replicas")
    for p in report.run_problems:
        con.print(line(("run:", "red"), f" {p}"))
    for n in report.notes:
        con.print(styled(f"note: {n}", "dim"))
    bad = report.problems()
    n = len(report.events)
    if report.ok:
        con.print(line(("PASS", "bold green"), f" {n} events on {len(report.workers)} worker(s) landed as expected"))
    else:
        con.print(line(("FAIL", "bold red"), f" {len(bad)} problem(s) in {n} events; first: {bad[0] if bad else '?'}"))
