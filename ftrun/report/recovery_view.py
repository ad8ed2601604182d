"""The recovery breakdown (``ftrun.check.recovery``, as ``layout.RecoveryRecord``) as text: one
table per fault, phases in time order, then the heal and the survivors' losses. Renders only."""

from __future__ import annotations

from typing import Any

from rich.console import JustifyMethod
from rich.table import Table

from ftrun.check.noise import Measured, says
from ftrun.check.recovery_hold import hold_text
from ftrun.layout import RecoveryRecord

PHASE_NAMES = {
    "detect": "detect",
    "relaunch": "relaunch",
    "join": "join",
    "reconfigure": "reconfigure",
    "heal": "heal",
    "catch_up": "catch-up",
}
LEGEND = (
    "detect = fault -> the survivors' first quorum without the group; relaunch = its launcher restarts -> "
    "torchft Manager up; join -> its first quorum with the others; reconfigure = torchft's process-group "
    "configure; heal = its checkpoint fetch; catch-up -> its first commit. s = seconds of the total each "
    "phase holds alone (overlapping seconds go to the group's own chain); own interval = the phase's own "
    "clock readings"
)


def _s(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}"


def recovery_table(rec: RecoveryRecord) -> Table:
    """One fault's phases: seconds on the critical path, share of the total, own interval, or why not."""
    total = rec.total_s
    t = Table(
        title=f"recovery · {rec.fault}"
        + (f" · {total:.2f} s to the group's first commit" if total is not None else " · never back"),
        title_justify="left",
    )
    columns: list[tuple[str, JustifyMethod]] = [
        ("phase", "left"),
        ("s", "right"),
        ("share", "right"),
        ("own interval", "right"),
        ("from", "left"),
        ("note", "left"),
    ]
    for col, just in columns:
        t.add_column(col, justify=just)
    for k, name in PHASE_NAMES.items():
        v = rec.phases.get(k)
        span = rec.spans.get(k)
        share = f"{v / total:.0%}" if v is not None and total else ""
        own = f"{span[0]:.2f} .. {span[1]:.2f}" if span else ""
        note = rec.reasons.get(k, "")
        if k == "heal" and rec.heal_bytes is not None:
            note = f"{rec.heal_bytes:,} B from replica {rec.heal_source}"
        t.add_row(name, _s(v) if v is not None else "-", share, own, rec.sources.get(k, ""), note)
    un = rec.unaccounted_s
    t.add_row(
        "unaccounted", _s(un), f"{un / total:.0%}" if total and un is not None else "", "", "", "no phase covers it"
    )
    return t


def recovery_lines(rec: RecoveryRecord) -> list[str]:
    """The notes under a fault's table: the relaunch's parts, what bounded detection, survivors
    held until torchft's process-group timeout, the heal,
    each participant's reconfigure and the survivors' losses (each only when known)."""
    out = []
    d = rec.relaunch_detail
    if d:
        out.append(
            f"relaunch: launcher -> rank's Python {d['launcher_to_rank_s']:.2f} s, imports + model -> Manager "
            f"{d['rank_to_manager_s']:.2f} s, Manager construction {d['manager_s']:.2f} s"
        )
    if rec.detect_bound:
        out.append(f"detect: {rec.detect_bound}")
    if rec.collective_hold is not None:
        out.append(f"held: {hold_text(rec.collective_hold)}")
    if rec.heal_bytes is not None:
        out.append(_heal_line(rec, rec.heal_bytes))
    parts, src = rec.reconfigure_participants, rec.participant_sources
    if parts:
        out.append(
            "reconfigure on every participant: "
            + ", ".join(f"replica {k} {v:.3f} s" + (f" ({src[k]})" if k in src else "") for k, v in parts.items())
        )
    s = rec.survivors
    if s is not None:
        gp = s.goodput
        out.append(
            f"survivors: {s.failed_commits} failed commit(s), {s.steps_without_group} step(s) without the group"
            + (
                f", {s.steps_per_s_during:.2f} steps/s during recovery vs {s.steps_per_s_before:.2f} before"
                f" (goodput: {says(Measured(gp), lambda v: f'{v:.0%}', at_most=1.0)})"
                if gp is not None and s.steps_per_s_during is not None and s.steps_per_s_before is not None
                else ""
            )
        )
    return out


def _heal_line(rec: RecoveryRecord, received: int) -> str:
    rate = rec.heal_rate_bps
    return (
        f"heal: {received:,} bytes received from replica {rec.heal_source}"
        + (f", {rate / 1e6:.1f} Mbit/s" if rate else "")
        + (f"; the source staged {rec.heal_bytes_sent:,} bytes" if rec.heal_bytes_sent is not None else "")
        + (
            f" in {rec.heal_send_s:.3f} s (send_checkpoint, {rec.heal_send_source})"
            if rec.heal_send_s is not None
            else ""
        )
        + (f"; emulated link held it {rec.heal_link_hold_s:.3f} s" if rec.heal_link_hold_s else "")
    )


def print_recovery(console: Any, recs: list[RecoveryRecord]) -> None:
    """Each breakdown's table, its notes and the legend, the notes wrapped at word boundaries to
    the console's width (``COLUMNS``; 80 piped) as the rest of train's and inspect's lines are
    (unwrapped, they were 224-415-character lines)."""
    for rec in recs:
        console.print(recovery_table(rec))
        for ln in recovery_lines(rec):
            console.print(ln, soft_wrap=False)
    if recs:
        console.print(LEGEND, soft_wrap=False)
