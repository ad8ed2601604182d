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
  (``baseTimeNanoseconds`` + ``ts``). Files of different workers that cover the same step numbers
  ran at the same time in one run (replicas wait for each other at every sync): their wall
  clocks must overlap, give or take ``CONCURRENT_SLACK_S`` plus the longer window. Windows of
  other steps follow each other: not more than ``SEQUENCE_FACTOR`` times the steps in between
  (at the median step time) plus ``SEQUENCE_SLACK_S`` apart, and one worker's later window
  starts after its earlier one ended. With an event log (an ftrun run dir), each trace's last step must
  end when the log says that step ended (``EVENT_LOG_SLACK_S``): a trace swapped in from another
  run is caught even with one replica. A mismatch names the two groups of files;
  ``merge_jobs`` (``--merge-jobs``) checks them together anyway.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import msgspec

from ftrun.errors import NotChecked
from ftrun.trace.schema import ChromeTrace, raw_json
from ftrun.trace.spans import TraceSpans

CONCURRENT_SLACK_S = 120.0
SEQUENCE_FACTOR = 20.0
SEQUENCE_SLACK_S = 600.0
EVENT_LOG_SLACK_S = 60.0
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
    """The two groups to name: files near ``a`` in wall-clock time vs the rest (single linkage)."""
    slack = CONCURRENT_SLACK_S * 1e6 + max(x.wall[1] - x.wall[0] for x in files)
    same_clock = [x for x in files if x.absolute == a.absolute]
    group = {id(a)}
    grown = True
    while grown:
        grown = False
        for x in same_clock:
            if id(x) in group or x is b:
                continue
            if any(abs(x.wall[0] - y.wall[0]) <= slack or _gap(x, y) <= slack for y in same_clock if id(y) in group):
                group.add(id(x))
                grown = True
    ga = [x for x in files if id(x) in group]
    gb = [x for x in files if id(x) not in group]
    return ga, gb or [b]


def _gap(x: _File, y: _File) -> float:
    """Wall-clock distance between two files' intervals (0 when they overlap)."""
    return max(0.0, max(x.wall[0], y.wall[0]) - min(x.wall[1], y.wall[1]))


def _pair_problem(x: _File, y: _File) -> str | None:
    """Why two files cannot be one run's, or None."""
    if x.absolute != y.absolute:
        return None  # one clock is relative: not comparable
    (xa, xb), (ya, yb) = x.steps, y.steps
    gap = _gap(x, y)
    if xa <= yb and ya <= xb:  # the same steps: recorded at the same time in one run
        longest = max(x.wall[1] - x.wall[0], y.wall[1] - y.wall[0])
        if x.worker != y.worker and gap > CONCURRENT_SLACK_S * 1e6 + longest:
            return f"they cover the same steps ({max(xa, ya)}-{min(xb, yb)}) {gap / 1e6:,.0f} s apart"
        return None
    first, later = (x, y) if xa <= ya else (y, x)
    who = f"replica {x.worker[0]} rank {x.worker[1]}'s windows" if x.worker == y.worker else "windows"
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


def check_one_run(workers, headers: dict[Path, Header], logs: dict | None = None, merge_jobs: bool = False) -> None:
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


def _against_log(f: _File, records) -> None:
    """An ftrun trace's last step must end when its event log says that step ended."""
    base_us = f.h.base_us  # None: the trace's times are not absolute (``f.absolute``)
    if not records or base_us is None or f.t.step_source != "ftrun":
        return
    last = max(f.t.steps, key=lambda s: s.span.end)
    times = [r.t for r in records if r.step == last.number]
    if not times:
        return
    ended = (base_us + last.span.end) / 1e6
    off = min(abs(t - ended) for t in times)
    if off > EVENT_LOG_SLACK_S:
        raise NotChecked(
            f"{f.t.path}: not this run's trace: its step {last.number} ended at "
            f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(ended))} UTC, the event log of replica {f.worker[0]} "
            f"rank {f.worker[1]} says {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(times[0]))} UTC "
            f"({off:,.0f} s apart); give one run's traces (or --merge-jobs to check them as one)"
        )
