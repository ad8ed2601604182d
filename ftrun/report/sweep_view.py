"""Rendering of ``ftrun sweep``'s result (``ftrun.layout.SweepResult``, sweep.json): console lines and table,
``sweep.md`` and the picture. Torch-free; matplotlib (Agg) only inside ``draw``.

The picture: when an axis is numeric (ints/floats, more than one value) the ``metric`` against
the first such axis, one line per combination of the other axes' values (cells without the
metric, e.g. crashed or invalid ones, have no point); otherwise a verdict grid (rows: the
combinations of all axes but the last, columns: the last axis's values).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from ftrun.console import console, line
from ftrun.grid import fmt
from ftrun.layout import SweepResult, SweepRow
from ftrun.output import atomic_path
from ftrun.report.numerics_view import numerics_cell

VERDICTS = ("pass", "fail", "failed-commits", "crashed", "unavailable", "invalid")
STYLE = {
    "pass": "green",
    "fail": "bold red",
    "failed-commits": "bold red",
    "crashed": "bold red",
    "unavailable": "dim",
    "invalid": "yellow",
}
COLOUR = {
    "pass": "#4caf50",
    "fail": "#e53935",
    "failed-commits": "#fb8c00",
    "crashed": "#8e24aa",
    "unavailable": "#bdbdbd",
    "invalid": "#fff176",
}
METRICS = {
    "exposed_comm_per_sync_ms": "exposed communication per sync (ms)",
    "steps_per_s": "steps/s",
    "final_loss": "final loss",
    "hidden_share": "hidden share of communication",
    "commits": "commits",
    "failed_commits": "failed commits (unexplained)",
    "recovery_s": "recovery: fault -> the group's first commit (s)",
}
# (field of a cell, heading, a format string or a function of the value)
Column = tuple[str, str, "str | Callable[[Any], str] | None"]
_COLUMNS: list[Column] = [
    ("commits", "commits", "{:g}"),
    ("failed_commits", "failed", "{:d}"),
    ("steps_per_s", "steps/s", "{:.2f}"),
    ("exposed_comm_per_sync_ms", "exposed ms/sync", "{:.1f}"),
    ("hidden_share", "hidden", "{:.0%}"),
    ("final_loss", "final loss", "{:.3f}"),
    ("numerics", "numerics", numerics_cell),
]


def recovery_cell(cell: SweepRow) -> str:
    """``5.95 s (relaunch 3.71 s)``: the first fault's recovery and its largest phase; "-" without one."""
    total = cell.recovery_s
    if total is None:
        return "-"
    big, big_s = cell.recovery_largest_phase, cell.recovery_largest_phase_s
    if not big:
        return f"{total:.2f} s"
    return f"{total:.2f} s ({big.replace('_', '-')}" + (f" {big_s:.2f} s)" if big_s is not None else ")")


RECOVERY_COLUMN: Column = ("recovery_s", "recovery (largest phase)", None)  # from the whole cell: recovery_cell


def _columns(result: SweepResult) -> list[Column]:
    """The table's metric columns: the recovery one only when some cell had a fault to recover from."""
    return _COLUMNS + (
        [RECOVERY_COLUMN] if any(c.recovery_s is not None or c.recovery_largest_phase for c in result.cells) else []
    )


def figure_of(c: SweepRow, f: str) -> Any:
    """A cell's figure ``f`` (a field of ``SweepRow``: ``METRICS``, ``_COLUMNS``)."""
    return getattr(c, f)


def _value(c: SweepRow, f: str, spec: str | Callable[[Any], str] | None) -> str:
    return recovery_cell(c) if f == "recovery_s" or spec is None else _num(figure_of(c, f), spec)


def _num(v: Any, spec: str | Callable[[Any], str]) -> str:
    """``spec``: a format string, or a function of the value (which then renders None too)."""
    if callable(spec):
        return spec(v)
    return "-" if v is None else spec.format(v)


def cell_line(cell: SweepRow, done: int, total: int) -> Text:
    """One console line for a finished cell: ``[3/8] pass  backend-gloo_mode-streaming  (12.3 s)``."""
    extra = f"  {cell.problem}" if cell.problem and cell.verdict != "pass" else ""
    wall = f"  ({cell.wall_s:.1f} s)" if cell.wall_s is not None else ""
    return line(f"[{done}/{total}] ", (f"{cell.verdict:<14}", STYLE.get(cell.verdict, "")), " ", cell.name, wall, extra)


def _axis_keys(result: SweepResult) -> list[str]:
    return [a.key for a in result.axes]


def unavailable_lines(cells: list[SweepRow]) -> list[tuple[str, int]]:
    """(reason, how many cells) for the cells this host cannot run, one per reason, in grid order."""
    out: dict[str, int] = {}
    for c in cells:
        if c.verdict == "unavailable":
            out[c.problem or "?"] = out.get(c.problem or "?", 0) + 1
    return list(out.items())


def print_sweep(result: SweepResult, out: Console | None = None) -> None:
    """The table of cells, one line per reason for the unavailable ones, the counts and the
    notes, on the console, at its width (80 when piped). Under 120 columns a compact table (the
    cell's parameters in one column, two metrics)."""
    from rich.table import Table

    if out is None:
        out = console(soft_wrap=False)
    keys = _axis_keys(result)
    t = Table(title=f"sweep {result.name}", title_justify="left")
    wide = out.width >= 120
    cols = (
        _columns(result)
        if wide
        else [c for c in _columns(result) if c[0] in ("steps_per_s", "exposed_comm_per_sync_ms", "recovery_s")]
    )
    if wide:
        for k in keys:
            t.add_column(k)
    else:
        t.add_column("cell", no_wrap=True)
    t.add_column("verdict", no_wrap=True)
    for _, head, _ in cols:
        t.add_column(head if wide else head.replace(" ", "\n"), justify="right")
    t.add_column("problem / reason", overflow="fold", ratio=1)
    shown = [c for c in result.cells if c.verdict != "unavailable"]  # those: one line per reason below
    for c in shown:
        params = [fmt(c.params[k]) for k in keys] if wide else ["\n".join(f"{k}={fmt(c.params[k])}" for k in keys)]
        t.add_row(
            *params,
            line((c.verdict, STYLE.get(c.verdict, ""))),
            *[_value(c, f, spec) for f, _, spec in cols],
            c.problem or "",
        )
    if shown:
        out.print(t)
    for reason, n in unavailable_lines(result.cells):
        out.print(line(("unavailable", STYLE["unavailable"]), f" ({n}): {reason}"))
    for note in result.notes:
        out.print(line(("note: ", "bold"), note))
    out.print(line("counts: ", ", ".join(f"{v} {n}" for v, n in result.counts.items())))
    picture = _picture(result)
    out.print(
        line("wrote ", result.sweep_dir, "/sweep.json, sweep.md, ", Path(picture).name if picture else "no picture")
    )


def _picture(result: SweepResult) -> str | None:
    """The picture's path (None: none drawn, or not yet)."""
    return result.picture if isinstance(result.picture, str) else None


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(result: SweepResult) -> str:
    """``sweep.md``: what was swept, on what, the table, and what the verdicts mean."""
    keys = _axis_keys(result)
    m, v = result.machine, result.versions
    lines = [
        f"# ftrun sweep {result.name}",
        "",
        f"- grid: {' x '.join(a.key + ' (' + str(len(a.values)) + ')' for a in result.axes)} "
        f"= {len(result.cells)} cells" + (f" (preset {result.preset})" if result.preset else ""),
        f"- shared train options: {', '.join(f'{k}={fmt(x)}' for k, x in result.shared.items()) or 'defaults'}",
        f"- machine: {m.cpus} CPUs, {m.gpus or 'no'} GPU(s), {m.platform}; "
        f"versions: {', '.join(f'{k} {x}' for k, x in v.items())}",
        f"- counts: {', '.join(f'{k} {n}' for k, n in result.counts.items())}",
    ]
    lines += [f"- note: {n}" for n in result.notes]
    cols = _columns(result)
    lines += [
        "",
        "| " + " | ".join(keys + ["verdict"] + [h for _, h, _ in cols] + ["problem / reason"]) + " |",
        "|" + "---|" * (len(keys) + 2 + len(cols)),
    ]
    for c in result.cells:
        row = [fmt(c.params[k]) for k in keys] + [f"**{c.verdict}**"] + [_value(c, f, s) for f, _, s in cols]
        lines.append("| " + " | ".join(_md(x) for x in row + [c.problem or ""]) + " |")
    said = [(c.name, n) for c in result.cells for n in c.notes]
    if said:
        lines += ["", "What the analysis could not tell (per cell):", ""] + [f"- {n}: {_md(x)}" for n, x in said]
    lines += [
        "",
        "Verdicts: **pass** = the trace matched torchft's schedule on every replica, the replicas agreed on every "
        "synced fragment, and every commit succeeded or failed because of an injected fault; **fail** = the schedule "
        "check or the agreement check found a problem; **failed-commits** = the schedule held but commits failed that "
        "no injected fault explains; **crashed** = the training exited non-zero (its first error line); "
        "**unavailable** = this host cannot run it; **invalid** = torchft's or ftrun's rule forbids it (not run).",
        "Metrics come from the event logs of rank 0 of each replica, averaged over replicas (`ftrun compare`'s "
        "definitions); hidden share from the traces' profiled syncs.",
    ]
    if RECOVERY_COLUMN in cols:
        lines.append(
            "Recovery: the cell's first fault -> the faulted group's first commit back in the quorum, and the "
            "phase that held most of it (`ftrun.check.recovery`: detect, relaunch, join, reconfigure, heal, "
            "catch-up)."
        )
    if picture := _picture(result):
        lines += ["", f"![sweep]({Path(picture).name})"]
    return "\n".join(lines) + "\n"


def _numeric_axis(result: SweepResult) -> str | None:
    for a in result.axes:
        vals = a.values
        if len(vals) > 1 and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vals):
            return a.key
    return None


def draw(result: SweepResult, path: Path, metric: str) -> Path:
    """Write the picture (module docstring) to ``path``; returns it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x_key = _numeric_axis(result)
    keys = _axis_keys(result)
    if x_key is not None:
        others = [a for a in result.axes if a.key != x_key]
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for combo in itertools.product(*(a.values for a in others)) if others else [()]:
            want = dict(zip((a.key for a in others), combo, strict=True))
            pts = sorted(
                (c.params[x_key], figure_of(c, metric), c.verdict)
                for c in result.cells
                if all(c.params[k] == v for k, v in want.items()) and figure_of(c, metric) is not None
            )
            if not pts:
                continue
            label = ", ".join(f"{k}={fmt(v)}" for k, v in want.items()) or metric
            (ln,) = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
            for px, py, verdict in pts:
                if verdict != "pass":
                    ax.annotate(
                        verdict,
                        (px, py),
                        textcoords="offset points",
                        xytext=(0, 6),
                        fontsize=7,
                        ha="center",
                        color="#c62828",
                    )
        if all(isinstance(v, int) for a in result.axes if a.key == x_key for v in a.values):
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if ax.get_ylim()[0] > 0:  # from 0: a small difference drawn from its own minimum looks large
            ax.set_ylim(bottom=0)
        ax.set_xlabel(x_key)
        ax.set_ylabel(METRICS.get(metric, metric))
        ax.set_title(f"{METRICS.get(metric, metric)} vs {x_key} (sweep {result.name})", fontsize=10)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    else:
        last = result.axes[-1]
        rows_axes = result.axes[:-1]
        rows = list(itertools.product(*(a.values for a in rows_axes))) if rows_axes else [()]
        fig, ax = plt.subplots(figsize=(2 + 1.6 * len(last.values), 1 + 0.45 * len(rows)))
        by = {tuple(fmt(c.params[k]) for k in keys): c for c in result.cells}
        for i, combo in enumerate(rows):
            for j, v in enumerate(last.values):
                c = by.get(tuple(fmt(x) for x in (*combo, v)))
                shown: str = c.verdict if c else "-"
                ax.add_patch(plt.Rectangle((j, i), 1, 1, facecolor=COLOUR.get(shown, "white"), edgecolor="white"))
                ax.text(j + 0.5, i + 0.5, shown, ha="center", va="center", fontsize=8)
        ax.set_xlim(0, len(last.values))
        ax.set_ylim(len(rows), 0)
        ax.set_xticks(
            [j + 0.5 for j in range(len(last.values))],
            [f"{last.key}={fmt(v)}" for v in last.values],
            fontsize=8,
        )
        ax.set_yticks(
            [i + 0.5 for i in range(len(rows))],
            [", ".join(f"{a.key}={fmt(x)}" for a, x in zip(rows_axes, combo, strict=True)) for combo in rows],
            fontsize=8,
        )
        ax.set_title(f"verdicts (sweep {result.name})", fontsize=10)
        for s in ax.spines.values():
            s.set_visible(False)
    fig.tight_layout()
    try:
        with atomic_path(path, "sweep", overwrite=False) as tmp:
            fig.savefig(tmp, dpi=110, format="png")
    finally:
        plt.close(fig)
    return path
