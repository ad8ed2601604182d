"""``chaos_timeline.png``: a ``--chaos`` run over its whole wall clock, one lane per replica group.

Each lane shows when the group trained, from its rank 0's event log (a step: its record's end
``t`` minus its ``step_time_s``), coloured by the step's fate (``ftrun.check.goodput.step_fates``:
useful = its next sync committed, lost = that commit failed or the group died first, tail = after
its last sync); each injected chaos fault (``faults/`` markers no flag planned) marked by kind at
the moment it fired, labelled with the run steps the group missed (``ftrun.check.fired_faults``);
and the recovery after it, shaded from the fault to the group's first commit again (the recovery
breakdown's ``total_s``), its phases (detect, relaunch, join, reconfigure, heal, catch-up: each
over its own interval, ``RecoveryRecord.spans``) as thin bars under the lane. Second 0 is the
earliest first step of any group; dashed lines mark the chaos clock's start (every group
training) and the moment faults stopped (``chaos_end``), where the run recorded them.

``timeline_of`` reads a run; ``build`` makes the lanes from records (pure); ``draw`` renders them
with matplotlib (imported only there).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from ftrun.check.goodput import step_fates
from ftrun.output import atomic_path
from ftrun.report.timeline import PHASE_COLOURS, RECOVERY_PHASES

if TYPE_CHECKING:
    from ftrun.layout import EventRecord, FaultMarker, Manifest, RecoveryRecord

FILE = "chaos_timeline.png"  # in the run dir
MERGE_GAP_S = 1.0  # consecutive steps of one fate closer than this draw as one bar
FATE_COLOURS = {"useful": "#4c9a5a", "lost": "#8c510a", "tail": "#c7c7c7"}  # lost: unlike any phase
FAULT_MARKERS = {"kill": ("X", "black"), "sigterm": ("v", "#8c2d04"), "hang": ("s", "#6a3d9a")}
RECOVERY_COLOUR = "#fdd0a2"


class LaneFault(msgspec.Struct, frozen=True):
    """One injected fault on its group's lane, seconds on the run clock: ``at_s`` when it fired,
    at the start of ``step``; ``lost_steps``: run steps the group missed (None: not counted, a
    hang); ``back_s``: the group's first commit after it (None: never back); ``phases``: (phase,
    start, end) of its recovery breakdown, in phase order; ``seconds``: a hang's length;
    ``absorbed``: a hang the group rode out without a quorum change (``chaos_run.absorbed_hangs``)."""

    at_s: float
    action: str
    step: int
    lost_steps: int | None
    back_s: float | None
    phases: list[tuple[str, float, float]] = []
    seconds: float = 0.0
    absorbed: bool = False


class GroupLane(msgspec.Struct, frozen=True):
    """One replica group: its training as (start, end) bars by fate, and its faults in firing order."""

    replica: int
    useful: list[tuple[float, float]]
    lost: list[tuple[float, float]]
    tail: list[tuple[float, float]]
    faults: list[LaneFault]


class ChaosTimeline(msgspec.Struct, frozen=True):
    """The lanes of one chaos run: ``t0`` (unix seconds) is second 0; ``end_s`` the last step's end;
    ``chaos_start_s``/``chaos_end_s``: the chaos clock's start and when faults stopped (None: not recorded)."""

    title: str
    t0: float
    end_s: float
    chaos_start_s: float | None
    chaos_end_s: float | None
    lanes: list[GroupLane]


def _bars(records: list[EventRecord], t0: float) -> dict[str, list[tuple[float, float]]]:
    """The group's steps as bars by fate; consecutive steps of one fate merge (gap ≤ ``MERGE_GAP_S``)."""
    out: dict[str, list[tuple[float, float]]] = {k: [] for k in FATE_COLOURS}
    last: str | None = None
    for rec, fate in zip(records, step_fates(records), strict=True):
        if fate is None:
            last = None
            continue
        a, b = rec.t - rec.step_time_s - t0, rec.t - t0
        bars = out[fate]
        if fate == last and bars and a - bars[-1][1] <= MERGE_GAP_S:
            bars[-1] = (bars[-1][0], b)
        else:
            bars.append((a, b))
        last = fate
    return out


def build(
    title: str,
    logs: dict[tuple[int, int], list[EventRecord]],
    faults: list[FaultMarker],
    recoveries: list[RecoveryRecord],
    lost: dict[tuple[int, int, str], int],
    chaos_start: float | None = None,
    chaos_end: float | None = None,
    absorbed: frozenset[float] = frozenset(),
) -> ChaosTimeline:
    """The lanes from a run's records: ``logs`` (replica, rank) -> records (rank 0 is read);
    ``faults``: the chaos faults fired; ``recoveries``: the breakdowns (matched to a fault by
    replica and ``fault_at``); ``lost``: (replica, step, action) -> run steps missed; ``chaos_start``
    / ``chaos_end``: unix times of the chaos clock's start and of faults stopping; ``absorbed``:
    the ``fired_at`` of hangs the group rode out (``chaos_run.absorbed_hangs``). Pure."""
    rank0 = {r: recs for (r, g), recs in logs.items() if g == 0}
    starts = [x.t - x.step_time_s for recs in rank0.values() for x in recs if x.step is not None]
    ends = [x.t for recs in rank0.values() for x in recs]
    t0 = min(starts) if starts else min([f.fired_at for f in faults] + [chaos_start or 0.0])
    lanes = []
    for replica in sorted(set(rank0) | {f.replica for f in faults}):
        bars = _bars(rank0.get(replica, []), t0)
        mine = [f for f in sorted(faults, key=lambda f: f.fired_at) if f.replica == replica]
        lanes.append(
            GroupLane(
                replica,
                bars["useful"],
                bars["lost"],
                bars["tail"],
                [_fault(f, recoveries, lost, t0, f.fired_at in absorbed) for f in mine],
            )
        )
    return ChaosTimeline(
        title=title,
        t0=t0,
        end_s=max(ends, default=t0) - t0,
        chaos_start_s=None if chaos_start is None else chaos_start - t0,
        chaos_end_s=None if chaos_end is None else chaos_end - t0,
        lanes=lanes,
    )


def _fault(
    f: FaultMarker, recoveries: list[RecoveryRecord], lost: dict[tuple[int, int, str], int], t0: float, absorbed: bool
) -> LaneFault:
    step = f.fired_step or f.step
    rec = next((r for r in recoveries if r.replica == f.replica and abs(r.fault_at - f.fired_at) < 1e-3), None)
    at = f.fired_at - t0
    phases = []
    if rec is not None:
        phases = [(k, at + s[0], at + s[1]) for k in RECOVERY_PHASES if (s := rec.spans.get(k)) is not None]
    back = None if rec is None or rec.total_s is None else at + rec.total_s
    return LaneFault(at, f.action, step, lost.get((f.replica, step, f.action)), back, phases, f.seconds, absorbed)


def timeline_of(
    run_dir: Path, manifest: Manifest, logs: dict[tuple[int, int], list[EventRecord]], recoveries: list[RecoveryRecord]
) -> ChaosTimeline:
    """A ``--chaos`` run's lanes from what it wrote: its manifest (faults fired, ``events/run.jsonl``'s
    chaos records), its event logs and its recovery breakdowns (``TrainSummary.recovery``)."""
    from ftrun.check.chaos_run import absorbed_hangs, chaos_faults
    from ftrun.check.fired_faults import fault_marks

    faults = chaos_faults(manifest)
    marks = fault_marks([run_dir], [manifest], logs).marks
    lost = {
        (m.replica, m.step, m.action): (m.lost_steps[1] - m.lost_steps[0] + 1 if m.lost_steps else 0) for m in marks
    }
    events = manifest.run_events
    start = next((e.t for e in events if e.event == "chaos_start"), None)
    end = next((e.t for e in events if e.event == "chaos_end"), None)
    cfg = manifest.config.faults
    groups = len({r for r, _ in logs})
    title = (
        f"{run_dir.name} · chaos {','.join(cfg.chaos or [])} (seed {cfg.chaos_seed or 0}) · {groups} groups · "
        f"{len(faults)} fault(s) fired"
    )
    return build(title, logs, faults, recoveries, lost, start, end, frozenset(absorbed_hangs(faults, logs)))


def draw(timeline: ChaosTimeline, path: Path, overwrite: bool = False, width_px: int = 1600) -> Path:
    """Render ``timeline`` to ``path`` (a PNG), written temp + rename (``ftrun.output.atomic_path``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(len(timeline.lanes), 1)
    fig, ax = plt.subplots(figsize=(width_px / 100, 1.9 + 0.8 * n), dpi=100)
    try:
        for i, lane in enumerate(timeline.lanes):
            _draw_lane(ax, n - 1 - i, lane, timeline.end_s)
        for x, text in ((timeline.chaos_start_s, "chaos clock starts"), (timeline.chaos_end_s, "faults stop")):
            if x is not None:
                ax.axvline(x, color="#1f77b4", linestyle="--", linewidth=0.8)
                ax.text(x, n - 0.45, " " + text, fontsize=7, color="#1f77b4", va="bottom")
        ax.set_yticks(range(n))
        ax.set_yticklabels([f"group {lane.replica}" for lane in reversed(timeline.lanes)] or [""])
        ax.set_ylim(-0.7, n - 0.1)
        ax.set_xlim(0, max(timeline.end_s, 1.0) * 1.01)
        ax.set_xlabel("seconds from the first step (the run's wall clock)")
        ax.set_title(timeline.title, fontsize=10)
        ax.legend(handles=_legend(), loc="upper center", bbox_to_anchor=(0.5, -0.5 / n - 0.12), ncol=7, fontsize=7)
        fig.tight_layout()
        with atomic_path(path, "train", overwrite) as tmp:
            fig.savefig(tmp, dpi=100, format="png")
    finally:
        plt.close(fig)
    return path


def _draw_lane(ax: Any, y: float, lane: GroupLane, end_s: float) -> None:
    for fate, bars in (("useful", lane.useful), ("lost", lane.lost), ("tail", lane.tail)):
        if bars:
            spans = [(a, max(b - a, 1e-3)) for a, b in bars]
            ax.broken_barh(spans, (y - 0.04, 0.36), facecolors=FATE_COLOURS[fate], linewidth=0)
    for f in lane.faults:
        # phases overlap (survivors detect while the group relaunches): a thin row each, under the lane
        until = f.back_s if f.back_s is not None else f.at_s + f.seconds if f.absorbed else end_s
        ax.broken_barh(
            [(f.at_s, max(until - f.at_s, 1e-3))], (y - 0.45, 0.9), facecolors=RECOVERY_COLOUR, linewidth=0, zorder=0
        )
        for k, a, b in f.phases:
            row = RECOVERY_PHASES.index(k)
            ax.broken_barh([(a, max(b - a, 1e-3))], (y - 0.44 + 0.066 * row, 0.058), facecolors=PHASE_COLOURS[k])
        marker, colour = FAULT_MARKERS.get(f.action, ("o", "black"))
        ax.plot([f.at_s], [y + 0.37], marker=marker, color=colour, markersize=6, linestyle="none")
        text = f"{f.action}@{f.step}" + (f", lost {f.lost_steps}" if f.lost_steps else "")
        if f.back_s is not None:
            text += f", back {f.back_s - f.at_s:.1f} s"
        else:
            text += ", absorbed" if f.absorbed else ", never back"
        ax.text(f.at_s, y + 0.37, " " + text, fontsize=6.5, va="center", ha="left")


def _legend() -> list[Any]:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = [Patch(color=FATE_COLOURS[k], label=f"{k} steps") for k in FATE_COLOURS]
    handles.append(Patch(color=RECOVERY_COLOUR, label="fault → first commit"))
    handles += [Patch(color=PHASE_COLOURS[k], label=k.replace("_", "-")) for k in RECOVERY_PHASES]
    handles += [Line2D([], [], marker=m, color=c, linestyle="none", label=k) for k, (m, c) in FAULT_MARKERS.items()]
    return handles
