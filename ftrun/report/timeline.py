"""``timeline.png``: one lane per (run, replica) over the profiled window, drawn with matplotlib.

Each lane shows the training steps (alternating grey; hatched where a fragment's send was in
flight during the step: ``ftrun.check.overlap``), each fragment's send->done span
(a bar in the fragment's colour, from the first allreduce issued to the last collective or
link hold finished), the collectives themselves (darker ticks of the same colour), and the
blocking part of every sync (red): data-plane communication that was *exposed* to the training
thread, and the control plane's exposed waits (dark purple): each quorum the training thread waited
for (``torchft::manager::wait_quorum``) and each ``should_commit``.
Time is relative to the start of each lane's window, so runs line up.

Runs with a fault get a recovery panel below (``recovery_lanes``): one lane per fault, on its
own clock (seconds from the fault), a row per phase over its own interval (detect, relaunch,
join, reconfigure, heal, catch-up, in the breakdown's colours, each labelled with the seconds it
holds alone on the critical path), the seconds no phase covers hatched as "unaccounted", and the
group's first commit marked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftrun.check.fired_faults import VoteRow
from ftrun.output import atomic_path

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from ftrun.check.result import Report
    from ftrun.layout import RecoveryRecord
    from ftrun.trace.spans import StepSpan

MIN_CONTROL_US = 100.0  # quorum waits shorter than this are not drawn
FRAGMENT_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]


@dataclass
class Lane:
    label: str
    steps: list[tuple[float, float]] = field(default_factory=list)  # seconds from lane start
    overlapped: list[tuple[float, float]] = field(default_factory=list)  # steps with a send in flight
    sends: list[tuple[float, float, int]] = field(default_factory=list)  # (issue, done, fragment)
    collectives: list[tuple[float, float, int]] = field(default_factory=list)
    waits: list[tuple[float, float]] = field(default_factory=list)
    controls: list[tuple[float, float]] = field(default_factory=list)  # quorum waits, should_commit
    note: str = ""  # drawn across an empty lane, e.g. a replica killed before its window was written


RECOVERY_PHASES = ("detect", "relaunch", "join", "reconfigure", "heal", "catch_up")  # ftrun.check.recovery.PHASES
PHASE_COLOURS = {
    "detect": "#7f7f7f",
    "relaunch": "#d62728",
    "join": "#ff7f0e",
    "reconfigure": "#9467bd",
    "heal": "#1f77b4",
    "catch_up": "#2ca02c",
}
UNACCOUNTED_COLOUR = "#bbbbbb"


@dataclass
class RecoveryLane:
    """One fault's recovery (``layout.RecoveryRecord``): seconds from the fault."""

    label: str
    phases: list[tuple[str, float, float, float | None]]  # (phase, start, end, seconds held alone), phase order
    missing: list[tuple[str, str]]  # (phase, why it did not happen)
    total_s: float | None  # the group's first commit; None: never back
    unaccounted: list[tuple[float, float]]  # parts of [0, total] no phase covers
    unaccounted_s: float | None


def recovery_lanes(name: str, recs: list[RecoveryRecord]) -> list[RecoveryLane]:
    """A lane per fault from the breakdowns (``layout.RecoveryRecord``: ``spans`` in seconds after the fault)."""
    out = []
    for rec in recs:
        spans = rec.spans
        drawn = [(k, s[0], s[1], rec.phases.get(k)) for k in RECOVERY_PHASES if (s := spans.get(k)) is not None]
        total = rec.total_s
        gaps: list[tuple[float, float]] = []
        if total is not None:
            at = 0.0
            for _, a, b, _ in sorted(drawn, key=lambda x: x[1]):
                a, b = max(a, 0.0), min(b, total)
                if a > at:
                    gaps.append((at, a))
                at = max(at, b)
            if total > at:
                gaps.append((at, total))
        out.append(
            RecoveryLane(
                f"{name} · recovery · {rec.fault}",
                drawn,
                [(k, rec.reasons.get(k, "")) for k in RECOVERY_PHASES if not spans.get(k)],
                total,
                gaps,
                rec.unaccounted_s,
            )
        )
    return out


def draw_recovery(ax: Axes, lanes: list[RecoveryLane]) -> None:
    """The recovery panel on ``ax``: per lane a title row, then a row per phase (top to bottom in phase order)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    rows = len(RECOVERY_PHASES)
    labels, ticks = [], []
    for i, lane in enumerate(lanes):
        base = (len(lanes) - 1 - i) * (rows + 1)
        for j, k in enumerate(RECOVERY_PHASES):
            y = base + rows - 1 - j
            ticks.append(y)
            labels.append(k.replace("_", "-"))
            span = next((p for p in lane.phases if p[0] == k), None)
            if span is None:
                why = next((w for p, w in lane.missing if p == k), "")
                ax.text(
                    0.0,
                    y,
                    f"{k.replace('_', '-')}: not measured" + (f" ({why[:70]})" if why else ""),
                    va="center",
                    ha="left",
                    fontsize=7,
                    color="#555555",
                    style="italic",
                )
                continue
            _, a, b, held = span
            ax.broken_barh([(a, max(b - a, 1e-3))], (y - 0.4, 0.8), facecolors=PHASE_COLOURS[k])
            text = f"{k.replace('_', '-')} {b - a:.2f} s" + (
                f" ({held:.2f} s alone)" if held is not None and abs(held - (b - a)) > 0.005 else ""
            )
            ax.text(b, y, " " + text, va="center", ha="left", fontsize=7)
        for a, b in lane.unaccounted:
            ax.broken_barh(
                [(a, b - a)],
                (base - 0.6, rows + 0.2),
                facecolors="none",
                edgecolors=UNACCOUNTED_COLOUR,
                hatch="xx",
                linewidth=0,
            )
        # the lane's title row: the fault, then where the group's first commit came
        head = lane.label + (
            f" · first commit {lane.total_s:.2f} s after the fault" if lane.total_s is not None else " · never back"
        )
        if lane.unaccounted_s is not None:
            head += f", unaccounted {lane.unaccounted_s:.2f} s"
        ax.text(0.0, base + rows, head, va="center", ha="left", fontsize=8, weight="bold")
        if lane.total_s is not None:
            ax.plot(
                [lane.total_s, lane.total_s],
                [base - 0.6, base + rows - 0.4],
                color="black",
                linewidth=0.8,
                linestyle="--",
            )
    ends = [b for lane in lanes for _, _, b, _ in lane.phases] + [
        lane.total_s for lane in lanes if lane.total_s is not None
    ]
    ax.set_xlim(-0.02 * max(ends, default=1.0), 1.2 * max(ends, default=1.0))  # room for the labels right of the bars
    ax.set_yticks(ticks)
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_ylim(-1, len(lanes) * (rows + 1) - 0.3)
    ax.set_xlabel("seconds from the fault")
    handles: list[Any] = [Patch(color=PHASE_COLOURS[k], label=k.replace("_", "-")) for k in RECOVERY_PHASES]
    handles.append(Patch(facecolor="none", edgecolor=UNACCOUNTED_COLOUR, hatch="xx", label="unaccounted (no phase)"))
    handles.append(Line2D([], [], color="black", linewidth=0.8, linestyle="--", label="the group's first commit"))
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.05 - 0.3 / len(lanes)),
        ncol=len(handles),
        fontsize=7,
    )


def lanes_for_run(name: str, report: Report, max_replicas: int = 8) -> list[Lane]:
    """Build lanes (rank 0 of each replica) from an inspect ``Report``: its spans and per-send
    communication (``Report.spans``, ``Report.comms``), as the check measured them."""
    from ftrun.check.comm import blocked_from, blocked_until
    from ftrun.check.overlap import overlapped_spans

    frag_by_ts = {
        (e.replica, e.rank, e.ts_us): e.fragment for e in report.events if e.kind == "send" and e.ts_us is not None
    }
    lanes: list[Lane] = []
    for w in sorted(report.workers, key=lambda w: w.replica):
        if w.rank != 0 or len(lanes) >= max_replicas:
            continue
        lane = Lane(f"{name} · replica {w.replica}")
        for f in w.files:
            spans = report.spans.get(f)
            if spans is None or not spans.steps:
                continue
            t0 = spans.steps[0].span.ts

            def sec(us: float, t0: float = t0) -> float:
                return (us - t0) / 1e6

            lane.steps += [(sec(s.span.ts), sec(s.span.end)) for s in spans.steps]
            lane.overlapped += [(sec(a), sec(b)) for a, b in overlapped_spans(report, f)]
            comms = report.comms.get(f, {})
            for send in spans.sends:
                comm = comms.get(send.span.ts)
                if comm is None:
                    continue
                frag = frag_by_ts.get((w.replica, w.rank, send.span.ts))
                frag = frag if frag is not None else 0
                if comm.done_ts is not None:
                    lane.sends.append((sec(comm.issue_ts), sec(comm.done_ts), frag))
                for c in comm.spans:
                    lane.collectives.append((sec(c.ts), sec(c.end), frag))
            for sync in spans.syncs:
                lane.waits.append((sec(blocked_from(sync)), sec(blocked_until(sync))))
                if sync.should_commit is not None:
                    lane.controls.append((sec(sync.should_commit.ts), sec(sync.should_commit.end)))
            train_threads = {s.span.thread for s in spans.steps}
            # torchft also calls wait_quorum on an already formed quorum (in manager.allreduce,
            # and ftrun's bookkeeping between steps asks num_participants): those are not drawn
            lane.controls += [
                (sec(q.ts), sec(q.end))
                for q in spans.quorums
                if q.thread in train_threads and q.dur >= MIN_CONTROL_US and _in_step(q.ts, spans.steps)
            ]
            break  # one window per lane keeps the picture readable
        lanes.append(lane)
    traced = {lane.label for lane in lanes}
    for fault in report.faults:
        if isinstance(fault, VoteRow):  # loses no steps: its replica's lane shows the failed commit itself
            continue
        label = f"{name} · replica {fault.replica}"
        if label not in traced and len(lanes) < max_replicas:
            lost = fault.lost_steps
            lanes.append(
                Lane(
                    label,
                    note=f"no trace: {fault.action} at step {fault.step}"
                    + (f", lost steps {lost[0]}-{lost[1]}" if lost else "")
                    + (f", rejoined at step {fault.rejoined_step}" if fault.rejoined_step else ", never rejoined"),
                )
            )
            traced.add(label)
    lanes.sort(key=lambda lane: (lane.label.split(" · ")[0] != name, int(lane.label.rsplit(" ", 1)[-1])))
    return lanes


def _in_step(ts: float, steps: list[StepSpan]) -> bool:
    from bisect import bisect_right

    i = bisect_right([s.span.ts for s in steps], ts) - 1
    return i >= 0 and ts <= steps[i].span.end


def draw(
    lanes: list[Lane],
    path: Path,
    title: str,
    width_px: int = 1600,
    overwrite: bool = False,
    recovery: list[RecoveryLane] | None = None,
) -> Path:
    """Render the lanes to ``path`` (a PNG), written temp + rename (``ftrun.output.atomic_path``:
    a full disk leaves no 0-byte ``timeline.png`` and is one line); ``recovery``: a panel below
    with the faults' recovery lanes (``draw_recovery``)."""
    fig = figure(lanes, title, width_px, recovery)
    import matplotlib.pyplot as plt

    try:
        with atomic_path(path, "compare", overwrite) as tmp:
            fig.savefig(tmp, dpi=fig.dpi, format="png")
    finally:
        plt.close(fig)
    return path


def figure(lanes: list[Lane], title: str, width_px: int = 1600, recovery: list[RecoveryLane] | None = None) -> Figure:
    """The matplotlib figure ``draw`` writes (the caller closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    height_in = 1.2 + 0.75 * len(lanes)
    dpi = 100
    if recovery:
        rec_in = 1.3 + 0.18 * len(recovery) * (len(RECOVERY_PHASES) + 1)
        fig, (ax, rax) = plt.subplots(
            2,
            1,
            figsize=(width_px / dpi, height_in + rec_in),
            dpi=dpi,
            gridspec_kw={"height_ratios": [height_in, rec_in]},
        )
    else:
        fig, ax = plt.subplots(figsize=(width_px / dpi, height_in), dpi=dpi)
    frags = set()
    for i, lane in enumerate(lanes):
        y = len(lanes) - 1 - i
        for j, (a, b) in enumerate(lane.steps):
            ax.broken_barh([(a, b - a)], (y - 0.4, 0.8), facecolors="#e8e8e8" if j % 2 else "#d0d0d0", linewidth=0)
        for a, b in lane.overlapped:
            ax.broken_barh(
                [(a, b - a)], (y - 0.4, 0.8), facecolors="none", edgecolors="#999999", hatch="//", linewidth=0
            )
        for a, b, f in lane.sends:
            frags.add(f)
            ax.broken_barh(
                [(a, b - a)], (y + 0.05, 0.25), facecolors=FRAGMENT_COLOURS[f % len(FRAGMENT_COLOURS)], alpha=0.45
            )
        for a, b, f in lane.collectives:
            ax.broken_barh(
                [(a, max(b - a, 1e-4))], (y + 0.05, 0.25), facecolors=FRAGMENT_COLOURS[f % len(FRAGMENT_COLOURS)]
            )
        for a, b in lane.waits:
            ax.broken_barh([(a, max(b - a, 1e-4))], (y - 0.35, 0.3), facecolors="#d62728")
        for a, b in lane.controls:
            ax.broken_barh([(a, max(b - a, 1e-4))], (y - 0.35, 0.3), facecolors="#6a3d9a")
        if lane.note:
            ax.text(0.0, y, lane.note, va="center", ha="left", fontsize=9, color="#555555", style="italic")
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([lane.label for lane in reversed(lanes)])
    ax.set_xlabel("seconds from the start of the profiled window")
    ax.set_title(title)
    handles = [
        Patch(color=FRAGMENT_COLOURS[f % len(FRAGMENT_COLOURS)], label=f"fragment {f}: send→done, collectives")
        for f in sorted(frags)
    ]
    handles += [
        Patch(color="#d62728", label="sync blocked on data (exposed)"),
        Patch(color="#6a3d9a", label="quorum / should_commit (exposed control)"),
        Patch(color="#d0d0d0", label="training steps"),
    ]
    if any(lane.overlapped for lane in lanes):
        handles.append(Patch(facecolor="#d0d0d0", edgecolor="#999999", hatch="//", label="step with a send in flight"))
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.35 if len(lanes) < 4 else -0.15),
        ncol=min(len(handles), 4),
        fontsize=8,
    )
    ax.set_ylim(-0.6, len(lanes) - 0.4)
    if recovery:
        draw_recovery(rax, recovery)
        rax.set_title("recovery: each phase over its own interval (seconds from the fault)", fontsize=9)
    fig.tight_layout()
    return fig
