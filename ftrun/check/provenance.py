"""A verdict needs evidence: are these torchft DiLoCo traces, and are they traces of ONE run?

Both rules run before any schedule is asked for (flags or manifest), and both raise
``NotChecked`` (a ``BadInput``: one line, exit 2; ``ftrun launch`` turns it into exit 1):

* ``require_torchft``: every trace file must hold at least one torchft DiLoCo/LocalSGD span (a
  ``torchft::local_sgd`` send or sync). One that holds none is "not a torchft (DiLoCo/LocalSGD)
  trace", said with what it holds instead (``holdings``: its steps, NCCL kernels, collectives);
  in a set where only some files are, the line names which are not. An ftrun trace (``ftrun::step``
  spans) whose window holds no send or sync says that instead: nothing was checked.
* ``check_one_run``: traces of one run share a run identity. kineto writes a new ``trace_id``
  for every file (two replicas of one run differ), so it cannot tell runs apart; what can:
  ``distributedInfo.world_size``, the GPUs (``deviceProperties``), and the wall clock
  (``baseTimeNanoseconds`` + ``ts``), judged against the run's own pace, never a fixed slack
  wider than a short run: the tolerance is ``TOLERANCE_STEPS`` step times (the longer median
  step of the two records compared), at least ``TOLERANCE_FLOOR_S`` (clock skew between hosts,
  timer granularity).

  - Files of different workers that cover the same step numbers: one run's replicas run those
    steps together (they wait for each other at every sync), so the wall-clock interval of the
    common steps (first start to last end) of one must overlap the other's, within the
    tolerance. Two runs trained one after the other are as far apart as a whole run.
  - Windows of other steps follow each other: not more than ``SEQUENCE_FACTOR`` times the steps
    in between (at the median step time) plus ``SEQUENCE_SLACK_S`` apart (a run may pause,
    heal or restart between them), and one worker's later window starts after its earlier one
    ended.
  - With an event log (an ftrun run dir), every step of a trace that its worker's log records
    must end when the log says that step ended, within the tolerance (the two are written by one
    process on one clock: measured, they agree to a millisecond): a trace swapped in from another
    run is caught even with one replica, and the line names the step and how far apart.

  A mismatch names the two groups of files (or the file and the log); ``merge_jobs``
  (``--merge-jobs``) checks them together anyway.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from ftrun.errors import NotChecked
from ftrun.trace.schema import ChromeTrace, raw_json
from ftrun.trace.spans import TraceSpans

if TYPE_CHECKING:
    from ftrun.check.workers import Worker
    from ftrun.layout import EventRecord

TOLERANCE_STEPS = 3.0  # step times: how far apart two records of one moment of one run may be
TOLERANCE_FLOOR_S = 2.0  # ... at the least (clock skew between hosts, timer granularity)
SEQUENCE_FACTOR = 20.0
SEQUENCE_SLACK_S = 600.0
NOT_TORCHFT = "not a torchft (DiLoCo/LocalSGD) trace"


class Header(msgspec.Struct, frozen=True):
    """What a trace file says about the run that wrote it (``header``)."""

    base_us: float | None  # unix time of the ts origin, microseconds; None: ts are relative
    trace_id: str | None
    world_size: int | None
    devices: tuple[str, ...]


def header(trace: ChromeTrace) -> Header:
    base = trace.baseTimeNanoseconds
    try:
        base_us = float(base) / 1e3 if base is not None else None
    except ValueError:
        base_us = None
    if base_us is not None and base_us <= 0:
        base_us = None
    devs = raw_json(trace.deviceProperties)
    names = (
        tuple(sorted(str(d.get("name", "?")) for d in devs if isinstance(d, dict))) if isinstance(devs, list) else ()
    )
    di = trace.distributedInfo
    return Header(
        base_us,
        None if trace.trace_id is None else str(trace.trace_id),
        di.world_size if di is not None else None,
        names,
    )


# --- is it a torchft trace? ------------------------------------------------------------------


def holdings(t: TraceSpans) -> str:
    """What a trace holds, for the "not a torchft trace" line."""
    n = len(t.steps)
    parts = [
        f"{n:,} {'ftrun' if t.step_source == 'ftrun' else 'ProfilerStep#'} step{'s' if n != 1 else ''}"
        if n
        else "no step spans"
    ]
    if t.kernels:
        parts.append(f"{len(t.kernels):,} NCCL collectives")
    backend = [c for c in t.collectives if not c.hold and not c.kernels]
    if backend:
        names = sorted({c.name for c in backend})
        parts.append(f"{len(backend):,} {'/'.join(names)} collectives")
    if not t.kernels and not backend:
        parts.append("no collectives")
    parts.append(f"{len(t.sends) + len(t.syncs)} torchft::local_sgd spans")
    return ", ".join(parts)


def is_torchft(t: TraceSpans) -> bool:
    return bool(t.sends or t.syncs)


def _names(paths: Sequence[Path], n: int = 3) -> str:
    shown = ", ".join(str(p) for p in paths[:n])
    return shown + (f" and {len(paths) - n} more" if len(paths) > n else "")


def require_torchft(spans: Sequence[TraceSpans]) -> None:
    """``NotChecked`` unless every file holds a torchft send or sync (module docstring)."""
    bad = [t for t in spans if not is_torchft(t)]
    if not bad:
        return
    first = bad[0]
    steps = [s.number for s in first.steps]
    if first.step_source == "ftrun" and steps:
        what = (
            f"its captured steps {min(steps)}-{max(steps)} hold no torchft send or sync "
            f"({holdings(first)}): nothing to check (was the profiled window shorter than a sync?)"
        )
    else:
        what = f"{NOT_TORCHFT}: {holdings(first)}"
    if len(spans) == 1:
        raise NotChecked(f"{first.path}: {what}")
    if len(bad) == len(spans):
        raise NotChecked(
            f"none of the {len(spans)} trace files is a torchft (DiLoCo/LocalSGD) trace: "
            f"{_names([t.path for t in bad])}; {first.path.name}: {what}"
        )
    good = [t.path for t in spans if is_torchft(t)]
    raise NotChecked(
        f"{len(bad)} of {len(spans)} trace files are not torchft (DiLoCo/LocalSGD) traces: "
        f"{_names([t.path for t in bad])} ({first.path.name}: {what}); the others are "
        f"({_names(good, 2)}); give only the torchft traces"
    )


# --- are they one run? -----------------------------------------------------------------------


class _File(msgspec.Struct, frozen=True):
    t: TraceSpans
    h: Header
    worker: tuple[int, int]

    @property
    def absolute(self) -> bool:
        return self.h.base_us is not None

    @property
    def wall(self) -> tuple[float, float]:
        b = self.h.base_us or 0.0
        return b + self.t.steps[0].span.ts, b + max(s.span.end for s in self.t.steps)

    @property
    def steps(self) -> tuple[int, int]:
        n = [s.number for s in self.t.steps]
        return min(n), max(n)

    def step_us(self) -> float:
        return statistics.median(s.span.dur for s in self.t.steps) if self.t.steps else 0.0

    def window(self, numbers: set[int]) -> tuple[float, float]:
        """Wall-clock (or ts) interval of this file's steps of these ``numbers`` (some): first
        start, last end."""
        b = self.h.base_us or 0.0
        mine = [s.span for s in self.t.steps if s.number in numbers]
        return b + min(s.ts for s in mine), b + max(s.end for s in mine)

    @property
    def who(self) -> str:
        return f"replica {self.worker[0]} rank {self.worker[1]}"


def tolerance_us(step_us: float) -> float:
    """How far apart (us) two records of the same moment of one run may be: ``TOLERANCE_STEPS``
    step times, at least ``TOLERANCE_FLOOR_S`` (module docstring)."""
    return max(TOLERANCE_STEPS * step_us, TOLERANCE_FLOOR_S * 1e6)


def _secs(us: float) -> str:
    s = us / 1e6
    return f"{s:,.0f} s" if s >= 10 else f"{s:.1f} s"


def _why_tolerance(step_us: float) -> str:
    tol = tolerance_us(step_us)
    if tol > TOLERANCE_FLOOR_S * 1e6:
        return f"more than {_secs(tol)}: {TOLERANCE_STEPS:g} step times of ~{step_us / 1e6:.2f} s"
    return f"more than {_secs(tol)}"


def _when(f: Sequence[_File]) -> str:
    lo = min(x.wall[0] for x in f)
    hi = max(x.wall[1] for x in f)
    if all(x.absolute for x in f):
        a = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(lo / 1e6))
        b = time.strftime("%H:%M:%S", time.gmtime(hi / 1e6))
        return f"recorded {a}-{b} UTC"
    return f"ts {lo / 1e6:.1f}-{hi / 1e6:.1f} s"


def _refuse(a: Sequence[_File], b: Sequence[_File], why: str) -> None:
    ga = f"{_names([x.t.path for x in a])} ({_when(a)})"
    gb = f"{_names([x.t.path for x in b])} ({_when(b)})"
    raise NotChecked(
        f"traces of different runs: {ga} and {gb}: {why}; give one run's traces (or --merge-jobs to check them as one)"
    )


def _split(files: list[_File], a: _File, b: _File) -> tuple[list[_File], list[_File]]:
    """The two groups to name: the files that ``a`` (transitively) could be one run with, never
    ``b``, vs the rest (single linkage on ``_pair_problem``)."""
    group = {id(a)}
    grown = True
    while grown:
        grown = False
        for x in files:
            if id(x) in group or x is b or x.absolute != a.absolute:
                continue
            if any(_pair_problem(x, y) is None for y in files if id(y) in group):
                group.add(id(x))
                grown = True
    ga = [x for x in files if id(x) in group]
    gb = [x for x in files if id(x) not in group]
    return ga, gb or [b]


def _gap(x: tuple[float, float], y: tuple[float, float]) -> float:
    """Distance between two intervals (0 when they overlap)."""
    return max(0.0, max(x[0], y[0]) - min(x[1], y[1]))


def _pair_problem(x: _File, y: _File) -> str | None:
    """Why two files cannot be one run's, or None."""
    if x.absolute != y.absolute:
        return None  # one clock is relative: not comparable
    (xa, xb), (ya, yb) = x.steps, y.steps
    if xa <= yb and ya <= xb:  # the same steps: run together by one run's replicas
        common = {s.number for s in x.t.steps} & {s.number for s in y.t.steps}
        if x.worker == y.worker or not common:
            return None  # one worker's steps again (a restart), or none in common: nothing says when
        lo, hi = min(common), max(common)
        step = max(x.step_us(), y.step_us())
        gap = _gap(x.window(common), y.window(common))
        if gap > tolerance_us(step):
            return (
                f"{x.who}'s and {y.who}'s steps {lo}-{hi} do not overlap in time: {_secs(gap)} apart "
                f"({_why_tolerance(step)}; one run's replicas run the same steps together)"
            )
        return None
    gap = _gap(x.wall, y.wall)
    first, later = (x, y) if xa <= ya else (y, x)
    who = f"{x.who}'s windows" if x.worker == y.worker else "windows"
    if x.worker == y.worker and later.wall[0] < first.wall[1] - 1e6:
        return f"{who} of steps {first.steps[0]}-{first.steps[1]} and {later.steps[0]}-{later.steps[1]} overlap in time"
    between = max(later.steps[0] - first.steps[1], 1)
    step = max(first.step_us(), later.step_us(), 1.0)
    if gap > SEQUENCE_FACTOR * between * step + SEQUENCE_SLACK_S * 1e6:
        return (
            f"{who} of steps {first.steps[0]}-{first.steps[1]} and {later.steps[0]}-{later.steps[1]} are "
            f"{gap / 1e6:,.0f} s apart for {between} step(s) of ~{step / 1e3:.0f} ms"
        )
    return None


def check_one_run(
    workers: Sequence[Worker],
    headers: dict[Path, Header],
    logs: Mapping[tuple[int, int], Sequence[EventRecord]] | None = None,
    merge_jobs: bool = False,
) -> None:
    """``NotChecked`` when the workers' traces are not one run's (module docstring).

    ``workers``: ``ftrun.check.workers.Worker`` list; ``logs``: (replica, rank) -> event records."""
    if merge_jobs:
        return
    files = [_File(t, headers[t.path], (w.replica, w.rank)) for w in workers for t in w.traces if t.steps]
    sizes = {f.h.world_size for f in files if f.h.world_size is not None}
    if len(sizes) > 1:
        a = [f for f in files if f.h.world_size == min(sizes)]
        b = [f for f in files if f.h.world_size is not None and f.h.world_size != min(sizes)]
        _refuse(a, b, f"distributedInfo.world_size {min(sizes)} vs {', '.join(str(s) for s in sorted(sizes)[1:])}")
    gpus = {f.h.devices for f in files if f.h.devices}
    if len(gpus) > 1:
        ref = files[[f.h.devices for f in files].index(next(iter(sorted(gpus))))].h.devices
        a = [f for f in files if f.h.devices == ref]
        b = [f for f in files if f.h.devices and f.h.devices != ref]
        _refuse(a, b, f"different GPUs ({', '.join(ref)} vs {', '.join(b[0].h.devices)})")
    for i, x in enumerate(files):
        for y in files[i + 1 :]:
            why = _pair_problem(x, y)
            if why is not None:
                ga, gb = _split(files, x, y)
                _refuse(ga, gb, why)
    for f in files:
        _against_log(f, (logs or {}).get(f.worker))


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + f".{int(t * 10) % 10}"


def _against_log(f: _File, records: Sequence[EventRecord] | None) -> None:
    """Every step of an ftrun trace that its worker's event log records must end when the log
    says that step ended, within ``tolerance_us`` of the longer median step time of the two."""
    base_us = f.h.base_us  # None: the trace's times are not absolute (``f.absolute``)
    if not records or base_us is None or f.t.step_source != "ftrun":
        return
    ended_at: dict[int, list[float]] = {}
    for r in records:
        if r.step is not None:
            ended_at.setdefault(r.step, []).append(r.t)
    worst: tuple[float, int, float, float] | None = None  # (how far apart, step, trace's end, log's)
    for s in f.t.steps:
        times = ended_at.get(s.number)
        if not times:
            continue
        ended = (base_us + s.span.end) / 1e6
        logged = min(times, key=lambda t: abs(t - ended))  # a restart may log a step twice
        if worst is None or abs(logged - ended) > worst[0]:
            worst = (abs(logged - ended), s.number, ended, logged)
    if worst is None:
        return
    logged_step_us = statistics.median(r.step_time_s for r in records) * 1e6
    step = max(f.step_us(), logged_step_us)
    off, number, ended, logged = worst
    if off * 1e6 > tolerance_us(step):
        raise NotChecked(
            f"{f.t.path}: not this run's trace: its step {number} ended at {_utc(ended)} UTC, the event log of "
            f"{f.who} says {_utc(logged)} UTC ({_secs(off * 1e6)} apart, {_why_tolerance(step)}); "
            "give one run's traces (or --merge-jobs to check them as one)"
        )
