"""The recovery breakdown (``ftrun.check.recovery``, as its ``to_json`` dicts) as text: one
table per fault, phases in time order, then the heal and the survivors' losses. Renders only."""

from __future__ import annotations

from typing import Any

from rich.console import JustifyMethod
from rich.table import Table

from ftrun.check.noise import Measured, says

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


def recovery_table(rec: dict[str, Any]) -> Table:
    """One fault's phases: seconds on the critical path, share of the total, own interval, or why not."""
    total = rec.get("total_s")
    t = Table(
        title=f"recovery · {rec['fault']}"
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
    spans = rec.get("spans") or {}
    reasons = rec.get("reasons") or {}
    for k, name in PHASE_NAMES.items():
        v = rec["phases"].get(k)
        span = spans.get(k)
        share = f"{v / total:.0%}" if v is not None and total else ""
        own = f"{span[0]:.2f} .. {span[1]:.2f}" if span else ""
        note = reasons.get(k, "")
        if k == "heal" and rec.get("heal_bytes") is not None:
            note = f"{rec['heal_bytes']:,} B from replica {rec.get('heal_source')}"
        t.add_row(name, _s(v) if v is not None else "-", share, own, (rec.get("sources") or {}).get(k, ""), note)
    t.add_row(
        "unaccounted",
        _s(rec.get("unaccounted_s")),
        f"{rec['unaccounted_s'] / total:.0%}" if total and rec.get("unaccounted_s") is not None else "",
        "",
        "",
        "no phase covers it",
    )
    return t


def recovery_lines(rec: dict[str, Any]) -> list[str]:
    out = []
    d = rec.get("relaunch_detail") or {}
    if d:
        out.append(
            f"relaunch: launcher -> rank's Python {d['launcher_to_rank_s']:.2f} s, imports + model -> Manager "
            f"{d['rank_to_manager_s']:.2f} s, Manager construction {d['manager_s']:.2f} s"
        )
    if rec.get("detect_bound"):
        out.append(f"detect: {rec['detect_bound']}")
    if rec.get("heal_bytes") is not None:
        rate = rec.get("heal_rate_bps")
        out.append(
            f"heal: {rec['heal_bytes']:,} bytes received from replica {rec.get('heal_source')}"
            + (f", {rate / 1e6:.1f} Mbit/s" if rate else "")
            + (
                f"; the source staged {rec['heal_bytes_sent']:,} bytes"
                if rec.get("heal_bytes_sent") is not None
                else ""
            )
            + (
                f" in {rec['heal_send_s']:.3f} s (send_checkpoint, {rec.get('heal_send_source')})"
                if rec.get("heal_send_s") is not None
                else ""
            )
            + (f"; emulated link held it {rec['heal_link_hold_s']:.3f} s" if rec.get("heal_link_hold_s") else "")
        )
    parts = rec.get("reconfigure_participants") or {}
    if parts:
        src = rec.get("participant_sources") or {}
        out.append(
            "reconfigure on every participant: "
            + ", ".join(f"replica {k} {v:.3f} s" + (f" ({src[k]})" if k in src else "") for k, v in parts.items())
        )
    s = rec.get("survivors") or {}
    if s:
        gp = s.get("goodput")
        out.append(
            f"survivors: {s['failed_commits']} failed commit(s), {s['steps_without_group']} step(s) without the group"
            + (
                f", {s['steps_per_s_during']:.2f} steps/s during recovery vs {s['steps_per_s_before']:.2f} before"
                f" (goodput: {says(Measured(gp), lambda v: f'{v:.0%}', at_most=1.0)})"
                if gp is not None
                else ""
            )
        )
    return out


def print_recovery(console: Any, recs: list[dict[str, Any]]) -> None:
    """Each breakdown's table, its notes and the legend, the notes wrapped at word boundaries to
    the console's width (``COLUMNS``; 80 piped) as the rest of train's and inspect's lines are
    (unwrapped, they were 224-415-character lines)."""
    for rec in recs:
        console.print(recovery_table(rec))
        for ln in recovery_lines(rec):
            console.print(ln, soft_wrap=False)
    if recs:
        console.print(LEGEND, soft_wrap=False)
