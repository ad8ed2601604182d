"""What ``ftrun launch`` shows: a live line per replica group, then the summary. Through ``ftrun.console``."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table

from ftrun import layout
from ftrun.console import LiveTable, console as make_console, line, styled


def _codes(codes: list[int]) -> str:
    return ",".join(str(c) for c in codes) or "-"


FIXED = ("group", "state", "exit", "restarts", "quorums")
LOG_MAX = 48  # the last log line's most columns (its tail is in the group's log file)
LOG_MIN = 10


def _cells(g: layout.LaunchGroupRow) -> tuple[str, ...]:
    quorums = "?" if g.quorums is None else str(g.quorums)  # (None: a summary of an earlier ftrun)
    return (str(g.replica), g.state, _codes(g.exit_codes), str(g.restarts), quorums)


def _table(title: str, rows: list[layout.LaunchGroupRow], width: int = 80) -> Table:
    """The groups' table within ``width`` columns: the fixed columns at their contents' width
    (never cut: "runni…" said nothing), the last log line in what is left, cut with an ellipsis."""
    t = Table(
        title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True
    )
    cells = [_cells(g) for g in rows]
    widths = [max([len(col), *(len(c[i]) for c in cells)]) for i, col in enumerate(FIXED)]
    for col, w in zip(FIXED, widths, strict=True):
        t.add_column(col, justify="left" if col in ("state", "exit") else "right", no_wrap=True, min_width=w)
    left = width - sum(widths) - 2 * len(FIXED)  # two spaces between columns
    t.add_column("last log line", no_wrap=True, overflow="ellipsis", max_width=max(LOG_MIN, min(LOG_MAX, left)))
    for g, c in zip(rows, cells, strict=True):
        t.add_row(*c, g.last_line)
    return t


class LaunchLiveView(LiveTable):
    """Refreshes from the groups' logs; disabled for --json or when stdout is not a terminal."""

    def refresh(self, state: Any) -> None:  # ftrun.launch.watch.LaunchState (report does not import launch)
        if self.enabled:
            q = state.quorums.last_id if state.quorums is not None else "?"
            self.show(_table(f"ftrun launch · {state.run_dir} · quorum id {q}", state.rows(), self.console.width))


def print_summary(summary: layout.LaunchSummary) -> None:
    """The launch summary (``--json`` prints ``summary`` itself instead)."""
    c = make_console(soft_wrap=True)
    q = summary.quorums_seen
    c.print(
        _table(
            f"ftrun launch · {summary.run_dir} · {summary.seconds:.1f} s · last quorum id {'?' if q is None else q}",
            summary.groups,
            c.width,
        )
    )
    for k in summary.faults_fired:
        c.print(line("fault: ", f"{k.signal} replica group {k.replica} at {k.at_s:g} s ({k.trigger})"))
    traces = summary.traces
    c.print(line(f"traces: {len(traces)} found", *(f" ({summary.trace_note})",) if summary.trace_note else ()))
    for t in traces:
        c.print(
            line(
                f"  replica {t.replica} rank {'?' if t.rank is None else t.rank}: ",
                t.path,
                "" if t.checked else " (not checked)",
            )
        )
    for f in summary.failures:
        c.print(line(styled("failed: ", "bold red"), f))
