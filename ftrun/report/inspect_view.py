"""Rich rendering of an ``ftrun.check.result.Report``: one table per worker, then one summary line.

"step" and "fragment" show the expected value, or ``expected→observed`` when they differ; a
fragment not identified from evidence shows as ``?``. Cells are short (a failing row says FAIL);
each row's problem and notes are printed under its table, so a table fits 80 columns.
Trace-wide notes come once, under the schedule line; failed commits are counted per worker
(table caption) and per replica (summary). Printed through ``ftrun.console``: never markup.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from ftrun.check.commits import torchft_errors
from ftrun.check.figures import exposed_past_done
from ftrun.check.noise import Measured, says
from ftrun.check.result import EventResult, Report, SendOverlap, WorkerOverlap
from ftrun.console import console as make_console, line, styled
from ftrun.report.numerics_view import numerics_line
from ftrun.schedule import label as schedule_label
from ftrun.torchft_compat import describe_versions


def _ms(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}"


def _v(x: int | str | None) -> str:
    return "-" if x is None else str(x)


def _pair(exp: int | None, obs: int | str | None) -> str:
    if exp == obs:
        return _v(exp)
    return f"{_v(exp)}→{_v(obs)}"


# (header, header on a narrow terminal, cell). Cells are short and never wrap: a row's problem
# and notes are printed under the table.
_COLUMNS: list[tuple[str, str, Callable[[EventResult], Any]]] = [
    ("step", "step", lambda e: _pair(e.expected_step, e.observed_step)),
    ("kind", "kind", lambda e: e.kind),
    (
        "fragment",
        "frag",
        lambda e: _pair(e.expected_fragment, e.fragment if e.fragment_checked or e.observed_step is None else "?"),
    ),
    ("verdict", "verdict", lambda e: styled("ok", "green") if e.ok else styled("FAIL", "bold red")),
    ("exposed data ms", "exposed\ndata ms", lambda e: _exposed_cell(e)),
    ("exposed ctrl ms", "exposed\nctrl ms", lambda e: _ms(e.sync.exposed_control_ms if e.sync else None)),
    ("hidden ms", "hidden\nms", lambda e: _ms(e.sync.hidden_comm_ms if e.sync else None)),
    ("send→done ms", "send→\ndone ms", lambda e: _ms(e.sync.send_to_done_ms if e.sync else None)),
]
_WIDE_MIN = 100  # below this many columns, the narrow headers (the table then needs about 75)


def _exposed_cell(e: EventResult) -> str:
    """The exposed data wait; "?" where it exceeds its send→done (``figures.exposed_past_done``:
    not a measurement of the wait, said under the table)."""
    if e.sync is None:
        return ""
    return "?" if exposed_past_done(e.sync) else _ms(e.sync.exposed_data_ms)


def _remark(e: EventResult) -> Text | None:
    """The line under the table for a row with a problem or notes (None: nothing to say)."""
    notes = list(e.notes)
    if e.sync is not None and exposed_past_done(e.sync):
        notes.append(
            f"exposed data {_ms(e.sync.exposed_data_ms)} ms exceeds its whole send→done "
            f"{_ms(e.sync.send_to_done_ms)} ms: not one wait, not shown as measured"
        )
    if e.sync is not None and e.sync.serialized:
        notes.append(f"{e.sync.serialized_collectives} collective(s) serialized")
    if e.ok and not notes:
        return None
    out = line(f"step {_pair(e.expected_step, e.observed_step)} {e.kind}: ")
    if not e.ok:
        out.append(str(e.problem), "red")
    if notes:
        out.append(("; " if not e.ok else "") + "; ".join(notes), "yellow")
    return out


def _table(title: str, events: list[EventResult], width: int) -> Table:
    """One worker's table; at a narrow terminal the headers take two lines, so it fits 80 columns."""
    t = Table(title=title, title_justify="left")
    for head, narrow, _ in _COLUMNS:
        t.add_column(
            head if width >= _WIDE_MIN else narrow, justify="right" if head.endswith(" ms") else "left", no_wrap=True
        )
    for e in events:
        t.add_row(*(cell(e) for _, _, cell in _COLUMNS))
    return t


def overlap_line(report: Report, replica: int, rank: int) -> str | None:
    """The worker's overlap slowdown (``Report.overlap``): steps with a send in flight against
    the others, overall and per send."""
    ov = report.overlap
    w = next((x for x in ov.workers if (x.replica, x.rank) == (replica, rank)), None)
    if w is None or not w.overlapped_steps:
        return None

    def x(d: SendOverlap | WorkerOverlap) -> str:  # a slowdown said only beyond its spread (ftrun.check.noise)
        v = d.slowdown
        return says(None if v is None else Measured(v, d.slowdown_spread), lambda r: f"{r:.2f}x", null=1.0, cost=True)

    sends = [s for s in ov.per_send if (s.replica, s.rank) == (replica, rank)]
    per = ", ".join(
        f"f{s.fragment if s.fragment is not None else '?'} {s.send_step}->{s.sync_step} {x(s)}" for s in sends
    )
    return (
        f"overlap: {w.overlapped_steps} step(s) with a send in flight took {_ms(w.median_overlapped_ms)} ms "
        f"(median) vs {_ms(w.median_other_ms)} ms for {w.other_steps} other(s): {x(w)}"
        + (f"; per send: {per}" if per else "")
    )


def render(report: Report, console: Console | None = None) -> None:
    con = console or make_console()
    s = report.schedule
    ran = describe_versions(report.versions)
    if ran:
        con.print(f"ran on {ran}")
    if len(report.run_dirs) > 1:
        con.print(f"job {report.job_id}: {len(report.run_dirs)} run dirs merged ({', '.join(report.run_dirs)})")
    con.print(
        f"schedule {schedule_label(s)} (w={s.window}), {report.mode}, step numbering {report.step_numbering.used}"
    )
    for note in report.notes:
        con.print(styled(f"note: {note}", "dim"))
    for w in report.workers:
        ranges = ", ".join(f"{a}-{b}" for a, b in w.step_ranges)
        mine = [e for e in report.events if e.replica == w.replica and e.rank == w.rank]
        gr = w.global_rank_text()
        who = f"identity: {w.source}" + (f"; {gr}" if gr else "")  # distributedInfo: never the replica
        t = _table(
            f"replica {w.replica} rank {w.rank}  ({who}; steps {ranges}; {len(w.files)} file(s))", mine, con.width
        )
        failed = [c for c in report.failed_commits if c.replica == w.replica and c.rank == w.rank]
        if failed:
            src = sorted({c.source for c in failed})
            errors = torchft_errors(failed)
            t.caption = (
                f"{len(failed)} commit(s) failed, at sync steps {[c.sync_step for c in failed]} ({', '.join(src)})"
                + (f"; {errors}" if errors else "")
            )
            t.caption_justify = "left"
        con.print(t)
        for e in mine:
            remark = _remark(e)
            if remark is not None:
                con.print(Padding(remark, (0, 0, 0, 2)))
        text = overlap_line(report, w.replica, w.rank)
        if text:
            con.print(Padding(text, (0, 0, 0, 2)))
    for c in report.cross_replica:
        if not c.ok:
            con.print(line(("cross-replica:", "red"), f" {c.problem}"))
    for f in report.faults:
        con.print(line(("fault:", "yellow"), f" {f.text}"))
    if report.agreement is not None and report.agreement.ok:
        agreed = report.agreement.commits_checked
        con.print(
            f"fingerprints: replicas agreed after {agreed} commit(s)"
            if agreed
            else "fingerprints: no commit seen by two replicas"
        )
    for p in report.run_problems:
        con.print(line(("run:", "red"), f" {p}"))
    num = report.numerics
    if num is not None and num.problems:
        for prob in num.problems:
            con.print(line(("numerics:", "red"), f" {prob.text}"))
    elif num is not None:
        con.print(numerics_line(num))
    con.print(verdict_line(report))


def verdict_line(report: Report) -> Text:
    """The one line ``inspect-trace`` ends with: PASS (events, workers, what was and was not
    checked) or FAIL (problems, the first). ``train`` and ``launch`` print it for their run."""
    num = report.numerics
    bad = report.problems()
    n = len(report.events)
    tail = ""
    unchecked = sum(1 for e in report.events if e.observed_step is not None and not e.fragment_checked)
    if unchecked:
        tail += f"; fragment not checked for {unchecked} (see note)"
    failed_steps: dict[int, set[int]] = {}
    for fc in report.failed_commits:  # a replica's ranks fail the same commit together: count it once
        failed_steps.setdefault(fc.replica, set()).add(fc.sync_step)
    per = {r: len(s) for r, s in failed_steps.items()}
    if num is not None and num.status == "checked" and not num.problems:
        tail += f"; numerics ok ({num.checked} sync(s))"
    elif num is None or num.status != "checked":
        tail += "; numerics not checked"
    if per:
        tail += "; failed commits: " + ", ".join(f"replica {r}: {k}" for r, k in sorted(per.items()))
    if report.ok:
        return line(("PASS", "bold green"), f" {n} events on {len(report.workers)} worker(s) landed as expected{tail}")
    return line(("FAIL", "bold red"), f" {len(bad)} problem(s) in {n} events{tail}; first: {bad[0] if bad else '?'}")


def render_text(report: Report, width: int = 100) -> str:
    """``render``'s output as plain text (no colour, no terminal): what ``inspect-trace`` prints."""
    import io

    buf = io.StringIO()
    render(report, make_console(file=buf, width=width, color_system=None, force_terminal=False))
    return "".join(x.rstrip() + "\n" for x in buf.getvalue().splitlines())


def failing_table(report: Report) -> str:
    """The failing rows as a plain-text table — replica, rank, kind, step and fragment
    (expected→observed), problem — then the cross-replica and run problems, one per line.
    Empty when nothing failed. What a failed ``assert_schedule`` says."""
    bad = [e for e in report.events if not e.ok]
    rows = [("replica", "rank", "kind", "step", "fragment", "problem")]
    rows += [
        (
            str(e.replica),
            str(e.rank),
            e.kind,
            _pair(e.expected_step, e.observed_step),
            _pair(e.expected_fragment, e.fragment if e.fragment_checked or e.observed_step is None else "?"),
            e.problem or "",
        )
        for e in bad
    ]
    out = []
    if bad:
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        for r in rows:
            out.append("  ".join(c.ljust(w) for c, w in zip(r[:5], widths, strict=True)) + "  " + r[5])
    out += [f"cross-replica: {c.problem}" for c in report.cross_replica if not c.ok and c.problem]
    out += [f"run: {p}" for p in report.run_problems]
    out += [f"numerics: {p.text}" for p in report.numerics.problems] if report.numerics is not None else []
    return "\n".join(x.rstrip() for x in out)
