"""The overlap slowdown per send, from the traces: how long the steps between a fragment's send
and its sync took (its collectives in flight) against the worker's other steps. Torch-free.

A step *overlaps* a send when it starts after the send began and ends before the sync's step
began: it computed while that fragment's collectives were issued and not yet waited for. The
steps that hold a send or a sync themselves are in neither class (they also compute
pseudo-gradients or the outer step, and the sync step holds the exposed wait); every other step
is an *unoverlapped* one. Durations are whole profiled step spans, so both classes carry the
profiler's own overhead alike.

On CUDA the host steps do not show the contention (kernels queue; the host runs ahead), so
``gpu_overlap`` reads the same rule from the device: compute kernels while an NCCL kernel ran on
their device vs not (``scripts/gpu_check.py`` reports it).
"""

from __future__ import annotations

import statistics
from bisect import bisect_left, bisect_right
from collections.abc import Hashable
from itertools import accumulate

import msgspec

from ftrun.check.noise import ratio_spread
from ftrun.check.result import EventResult, Overlap, Report, SendOverlap, WorkerOverlap
from ftrun.trace.cuda_link import ComputeLaunch
from ftrun.trace.spans import TraceSpans


class SendWindow(msgspec.Struct, frozen=True):
    """One send and the sync that waited for it, on one trace file."""

    replica: int
    rank: int
    fragment: int | None
    file: str
    send_step: int | None
    sync_step: int | None
    send_ts: float
    sync_ts: float


def send_windows(report: Report) -> list[SendWindow]:
    """Every observed send paired with the next observed sync of the same fragment on its file."""
    by_file: dict[tuple[int, int, str], list[tuple[float, EventResult]]] = {}  # each event with its timestamp
    for e in report.events:
        if e.observed_step is not None and e.ts_us is not None and e.file is not None:
            by_file.setdefault((e.replica, e.rank, e.file), []).append((e.ts_us, e))
    out = []
    for (replica, rank, file), events in by_file.items():
        events.sort(key=lambda te: te[0])
        for i, (send_ts, send) in enumerate(events):
            if send.kind != "send":
                continue
            sync = next(
                (
                    (ts, e)
                    for ts, e in events[i + 1 :]
                    if e.kind == "sync" and (send.fragment is None or e.fragment is None or e.fragment == send.fragment)
                ),
                None,
            )
            if sync is not None:
                sync_ts, sync_e = sync
                out.append(
                    SendWindow(
                        replica, rank, send.fragment, file, send.observed_step, sync_e.observed_step, send_ts, sync_ts
                    )
                )
    return out


def _step_classes(report: Report, windows: list[SendWindow]) -> dict[str, list[tuple[float, float, SendWindow | None]]]:
    """Per file, each step span as (start, end, the window it overlaps or None); steps holding a
    send or sync are left out."""
    marks: dict[str, list[float]] = {}
    for e in report.events:
        if e.observed_step is not None and e.ts_us is not None and e.file is not None:
            marks.setdefault(e.file, []).append(e.ts_us)
    out: dict[str, list[tuple[float, float, SendWindow | None]]] = {}
    for file, spans in report.spans.items():
        ts = sorted(marks.get(file, []))
        mine = [w for w in windows if w.file == file]  # by send (send_windows' order)
        sends = [w.send_ts for w in mine]
        # the first window (in order) with sync_ts > b is the first whose running max of sync_ts is > b
        reach = list(accumulate((w.sync_ts for w in mine), max))
        ordered = all(x <= y for x, y in zip(sends, sends[1:], strict=False))  # neighbours
        rows = []
        for s in spans.steps:
            a, b = s.span.ts, s.span.end
            j = bisect_left(ts, a)
            if j < len(ts) and ts[j] <= b:
                continue  # a mark inside the step
            if ordered:
                i = bisect_right(reach, b)  # first window reaching past b ...
                w = mine[i] if i < bisect_left(sends, a) else None  # ... whose send is before a
            else:
                w = next((w for w in mine if a > w.send_ts and b < w.sync_ts), None)
            rows.append((a, b, w))
        out[file] = rows
    return out


def _ms(xs: list[float]) -> float | None:
    return round(statistics.median(xs) / 1e3, 3) if xs else None


def _spread(over: list[float], other: list[float]) -> float | None:
    """The slowdown's spread from the steps' durations (``ftrun.check.noise``; None: too few)."""
    got = ratio_spread(over, other)
    return None if got is None else round(got, 3)


def overlap_of(report: Report) -> Overlap:
    """Per send, its overlapped steps' median duration against the worker's unoverlapped steps
    (``slowdown`` = their ratio); per worker, the same over all its sends. Empty lists when the
    traces hold no send/sync pair."""
    windows = send_windows(report)
    classes = _step_classes(report, windows)
    out = Overlap()
    for wr in report.workers:
        rows = [r for f in wr.files for r in classes.get(f, [])]
        other = [(b - a) for a, b, w in rows if w is None]
        over = [(b - a) for a, b, w in rows if w is not None]
        base = _ms(other)
        by_window: dict[int, list[float]] = {}  # one pass over the rows, not one per send
        for a, b, x in rows:
            if x is not None:
                by_window.setdefault(id(x), []).append(b - a)
        for w in windows:
            if (w.replica, w.rank) != (wr.replica, wr.rank):
                continue
            mine = by_window.get(id(w), [])
            med = _ms(mine)
            out.per_send.append(
                SendOverlap(
                    replica=w.replica,
                    rank=w.rank,
                    fragment=w.fragment,
                    send_step=w.send_step,
                    sync_step=w.sync_step,
                    overlapped_steps=len(mine),
                    median_overlapped_ms=med,
                    median_other_ms=base,
                    slowdown=round(med / base, 3) if med and base else None,
                    slowdown_spread=_spread(mine, other),
                )
            )
        if over or other:
            med = _ms(over)
            out.workers.append(
                WorkerOverlap(
                    replica=wr.replica,
                    rank=wr.rank,
                    overlapped_steps=len(over),
                    other_steps=len(other),
                    median_overlapped_ms=med,
                    median_other_ms=base,
                    slowdown=round(med / base, 3) if med and base else None,
                    slowdown_spread=_spread(over, other),
                )
            )
    return out


def overlapped_spans(report: Report, file: str) -> list[tuple[float, float]]:
    """The step spans of ``file`` that overlapped a send (for the timeline), in trace microseconds."""
    windows = send_windows(report)
    return [(a, b) for a, b, w in _step_classes(report, windows).get(file, []) if w is not None]


def _merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _overlaps(merged: list[tuple[float, float]], starts: list[float], a: float, b: float) -> bool:
    i = bisect_right(starts, b) - 1  # the last interval starting at or before b
    return i >= 0 and merged[i][1] > a


class GpuOverlap(msgspec.Struct):
    """The overlap on CUDA (``gpu_overlap``): compute kernels and host steps, overlapped or alone."""

    compute_kernels: int
    overlapped_kernels: int
    slowdown: float | None
    kernel_names_compared: int
    steps_overlapped: int
    steps_alone: int
    median_step_kernel_ms_overlapped: float | None
    median_step_kernel_ms_alone: float | None


def gpu_overlap(trace: TraceSpans, compute: list[ComputeLaunch]) -> GpuOverlap | None:
    """The same rule on CUDA, read from kernels (device time, not host steps): each compute
    kernel (``ftrun.trace.spans.compute_launches``: device, start, launch, duration, name) ran
    while an NCCL kernel ran on its device, or not. ``slowdown``: per kernel name seen in both
    classes, its mean duration overlapped over its mean alone, weighted by the overlapped
    kernels' count — the same work, measured both ways. Per host step (each kernel counted in its
    launch's step): compute kernel time, median over the steps with an overlapped kernel vs the
    steps without. None when the trace has no compute kernel or no NCCL kernel."""
    if not compute or not trace.kernels:
        return None
    nccl: dict[Hashable, list[tuple[float, float]]] = {}
    for k in trace.kernels:
        dev = k.stream[0] if isinstance(k.stream, tuple) else k.stream
        nccl.setdefault(dev, []).append((k.span.ts, k.span.end))
    merged = {dev: _merged(v) for dev, v in nccl.items()}
    starts = {dev: [a for a, _ in v] for dev, v in merged.items()}
    step_starts = [s.span.ts for s in trace.steps]
    by_name: dict[str, tuple[list[float], list[float]]] = {}
    per_step: dict[int, tuple[float, bool]] = {}  # step -> (its compute kernels' time, any overlapped)
    for dev, ts, launch, dur, name in compute:
        over = dev in merged and _overlaps(merged[dev], starts[dev], ts, ts + dur)
        by_name.setdefault(name, ([], []))[0 if over else 1].append(dur)
        i = bisect_right(step_starts, launch) - 1
        if i >= 0 and launch <= trace.steps[i].span.end:
            t, o = per_step.get(trace.steps[i].number, (0.0, False))
            per_step[trace.steps[i].number] = (t + dur, o or over)
    weight = ratio = 0.0
    for overlapped, alone in by_name.values():
        if overlapped and alone:
            weight += len(overlapped)
            ratio += len(overlapped) * (sum(overlapped) / len(overlapped)) / (sum(alone) / len(alone))
    with_ = [t for t, o in per_step.values() if o]
    without = [t for t, o in per_step.values() if not o]
    return GpuOverlap(
        compute_kernels=len(compute),
        overlapped_kernels=sum(len(o) for o, _ in by_name.values()),
        slowdown=round(ratio / weight, 3) if weight else None,
        kernel_names_compared=sum(1 for o, a in by_name.values() if o and a),
        steps_overlapped=len(with_),
        steps_alone=len(without),
        median_step_kernel_ms_overlapped=_ms(with_),
        median_step_kernel_ms_alone=_ms(without),
    )
