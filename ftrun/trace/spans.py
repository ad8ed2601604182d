"""Extract the spans the schedule check needs from a decoded trace. Torch-free.

Label meanings (spelled only in ``ftrun.labels``):

* step: ``ftrun::step#S manager_step=M`` (ftrun's worker; S is the absolute training step) when
  the trace has any, else ``ProfilerStep#k`` (k is turned into a step by the caller's numbering).
* send: ``torchft::local_sgd::prepare_sync``; its allreduces are the
  ``torchft::manager::allreduce`` spans on the same thread nested inside it, and each one's
  tensor sizes come from the ``c10d::allreduce_`` cpu_op nested in that (``Input Dims``, needs
  ``record_shapes=True``).
* sync: ``torchft::local_sgd::perform_sync`` with its nested ``torchft::local_sgd::wait``,
  ``torchft::local_sgd::restore_parameters`` (whose ``aten::copy_`` sizes are the fragment's
  parameter shapes) and ``torchft::manager::should_commit``.
* collective: backend spans (``gloo:all_reduce`` on Gloo threads, ``nccl:all_reduce``),
  NCCL all-reduce kernels (when a trace has them, they replace the CPU-side
  ``nccl:all_reduce`` launch spans), and ftrun's ``ftrun::link::hold`` (emulated slow link).
* quorum wait: ``torchft::manager::wait_quorum`` (the training thread waiting for the quorum
  that ``start_quorum`` runs before each send; ``manager.allreduce`` nests short ones too).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from pathlib import Path
from typing import Hashable, Optional

from ftrun.errors import BadInput
from ftrun.labels import FTRUN_STEP_PREFIX, FTRUN_STEP_RE, LABELS, LINK_HOLD, PROFILER_STEP_RE, LabelSet
import msgspec

from ftrun.trace.schema import ChromeTrace, TraceEvent, args_of, events, name_filter, raw_json

Shape = tuple[int, ...]
COPY = "aten::copy_"
DTYPE_BYTES = {"float": 4, "c10::Half": 2, "c10::BFloat16": 2, "double": 8, "half": 2, "bfloat16": 2, "int": 4, "long int": 8}


@dataclass(frozen=True, slots=True)
class Span:
    ts: float
    end: float
    thread: Hashable

    @property
    def dur(self) -> float:
        return self.end - self.ts


@dataclass(frozen=True, slots=True)
class StepSpan:
    """A training-step span. ``number``: ftrun step S, or the raw k of ProfilerStep#k."""

    number: int
    manager_step: Optional[int]
    span: Span


@dataclass(frozen=True, slots=True)
class Allreduce:
    """One ``manager.allreduce`` call: its span, tensor shapes and element size (when known).

    ``issue_ts``: start of its ``c10d::allreduce_`` (the collective really issued; the
    ``manager::allreduce`` span also holds ``wait_quorum``), else the span's start.
    """

    span: Span
    shapes: Optional[tuple[Shape, ...]]
    itemsize: Optional[int] = None
    issue_ts: float = 0.0


@dataclass(frozen=True, slots=True)
class Send:
    span: Span
    allreduces: tuple[Allreduce, ...]


@dataclass(frozen=True, slots=True)
class Sync:
    span: Span
    wait: Optional[Span]
    restore: Optional[Span]
    should_commit: Optional[Span]
    restore_shapes: Optional[tuple[Shape, ...]]


@dataclass(frozen=True, slots=True)
class Collective:
    """A span of the collective really running (backend thread, GPU kernel, or link hold)."""

    name: str
    span: Span
    shapes: Optional[tuple[Shape, ...]]
    itemsize: Optional[int]
    hold: bool = False


@dataclass
class TraceSpans:
    path: Path
    step_source: str  # "ftrun" or "profiler"
    steps: list[StepSpan]
    sends: list[Send]
    syncs: list[Sync]
    collectives: list[Collective]
    rank: Optional[int] = None  # distributedInfo.rank
    has_shapes: bool = False
    events: int = 0
    extra: dict = field(default_factory=dict)
    quorums: list[Span] = field(default_factory=list)  # wait_quorum spans, by start


def _thread(e: TraceEvent) -> Hashable:
    return (e.pid, e.tid)


def _span(e: TraceEvent) -> Span:
    return Span(e.ts, e.ts + e.dur, _thread(e))


def _shapes(value: object) -> Optional[tuple[Shape, ...]]:
    """Tensor shapes from an ``Input Dims`` value: a flat or nested list of int lists."""
    out: list[Shape] = []

    def walk(v: object, depth: int) -> bool:
        if depth > 4 or not isinstance(v, list):
            return False
        if all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            if v:
                out.append(tuple(v))
            return True
        return all(walk(x, depth + 1) for x in v)

    return tuple(out) if walk(value, 0) and out else None


def _first_shape(value: object) -> Optional[Shape]:
    """The first argument's shape (``self`` of ``aten::copy_``)."""
    if isinstance(value, list) and value and isinstance(value[0], list):
        if all(isinstance(x, int) and not isinstance(x, bool) for x in value[0]):
            return tuple(value[0])
    return None


def _itemsize(e: TraceEvent) -> Optional[int]:
    types = raw_json(args_of(e).input_type)
    if isinstance(types, list) and types and isinstance(types[0], str):
        return DTYPE_BYTES.get(types[0])
    return None


class _Index:
    """Spans of one name, per thread, sorted by start: ``inside(outer)`` finds nested ones."""

    def __init__(self, events: list[TraceEvent]) -> None:
        self.by_thread: dict[Hashable, tuple[list[float], list[TraceEvent]]] = {}
        groups: dict[Hashable, list[TraceEvent]] = {}
        for e in events:
            groups.setdefault(_thread(e), []).append(e)
        for t, evs in groups.items():
            evs.sort(key=lambda e: e.ts)
            self.by_thread[t] = ([e.ts for e in evs], evs)

    def inside(self, outer: TraceEvent) -> list[TraceEvent]:
        got = self.by_thread.get(_thread(outer))
        if not got:
            return []
        starts, evs = got
        i = bisect_left(starts, outer.ts)
        end = outer.ts + outer.dur
        out = []
        while i < len(evs) and evs[i].ts <= end:
            if evs[i] is not outer:
                out.append(evs[i])
            i += 1
        return out


_FILTERS: dict[tuple[LabelSet, frozenset], object] = {}


def _filter(labels: LabelSet, names: set[str]):
    key = (labels, frozenset(names))
    if key not in _FILTERS:
        prefixes = ("ProfilerStep#", FTRUN_STEP_PREFIX, *labels.nccl_kernel_prefixes)
        _FILTERS[key] = name_filter(names, prefixes)
    return _FILTERS[key]


def extract(path: Path, trace: ChromeTrace, labels: LabelSet = LABELS) -> TraceSpans:
    """The spans of ``trace`` (read from ``path``). ``BadInput`` when it has no step spans."""
    wanted_names = {
        labels.prepare_sync, labels.perform_sync, labels.allreduce, labels.wait,
        labels.restore_parameters, labels.should_commit, COPY, labels.wait_quorum,
        *labels.c10d_allreduce, *labels.backend_allreduce,
    }
    by_name: dict[str, list[TraceEvent]] = {n: [] for n in wanted_names}
    prof_steps: list[StepSpan] = []
    ftrun_steps: list[StepSpan] = []
    kernels: list[TraceEvent] = []
    kernel_prefixes = labels.nccl_kernel_prefixes
    keep = _filter(labels, wanted_names)
    try:
        kept = list(events(trace, keep))
    except msgspec.DecodeError as err:
        raise BadInput(f"{path}: JSON but not a chrome trace (bad event: {err})") from None
    for e in kept:
        if e.ph != "X":
            continue
        name = e.name
        bucket = by_name.get(name)
        if bucket is not None:
            bucket.append(e)
        elif name.startswith("ProfilerStep#"):
            m = PROFILER_STEP_RE.match(name)
            if m:
                prof_steps.append(StepSpan(int(m[1]), None, _span(e)))
        elif name.startswith(FTRUN_STEP_PREFIX):
            m = FTRUN_STEP_RE.match(name)
            if m:
                ftrun_steps.append(StepSpan(int(m[1]), int(m[2]), _span(e)))
        elif name.startswith(kernel_prefixes):
            kernels.append(e)

    steps, source = (ftrun_steps, "ftrun") if ftrun_steps else (prof_steps, "profiler")
    if not steps:
        raise BadInput(
            f"{path}: no step spans (neither ftrun::step#S nor ProfilerStep#k); "
            "profile with a torch.profiler schedule or ftrun's worker"
        )
    steps.sort(key=lambda s: s.span.ts)

    ar_index = _Index(by_name[labels.allreduce])
    c10d_index = _Index([e for n in labels.c10d_allreduce for e in by_name[n]])
    has_shapes = False

    sends: list[Send] = []
    for ps in sorted(by_name[labels.prepare_sync], key=lambda e: e.ts):
        ars = []
        for ar in ar_index.inside(ps):
            shapes, itemsize, issue = None, None, ar.ts
            for k, op in enumerate(c10d_index.inside(ar)):
                if k == 0:
                    issue = op.ts
                got = _shapes(raw_json(args_of(op).input_dims))
                if got:
                    shapes = (shapes or ()) + got
            ars.append(Allreduce(_span(ar), shapes, itemsize, issue))
            has_shapes = has_shapes or shapes is not None
        sends.append(Send(_span(ps), tuple(ars)))

    wait_index = _Index(by_name[labels.wait])
    restore_index = _Index(by_name[labels.restore_parameters])
    commit_index = _Index(by_name[labels.should_commit])
    copy_index = _Index(by_name[COPY])
    syncs: list[Sync] = []
    for pf in sorted(by_name[labels.perform_sync], key=lambda e: e.ts):
        waits = wait_index.inside(pf)
        restores = restore_index.inside(pf)
        commits = commit_index.inside(pf)
        restore_shapes = None
        if restores:
            shapes = []
            for c in copy_index.inside(restores[0]):
                s = _first_shape(raw_json(args_of(c).input_dims))
                if s is not None:
                    shapes.append(s)
            restore_shapes = tuple(shapes) or None
        syncs.append(
            Sync(
                _span(pf),
                _span(waits[0]) if waits else None,
                _span(restores[0]) if restores else None,
                _span(commits[0]) if commits else None,
                restore_shapes,
            )
        )

    colls: list[Collective] = []
    for n in labels.backend_allreduce:
        if kernels and n.startswith("nccl:"):
            continue  # with GPU activity, the CPU-side nccl:all_reduce is only the launch
        for e in by_name[n]:
            dims = _shapes(raw_json(args_of(e).input_dims))
            colls.append(Collective(n, _span(e), dims, _itemsize(e), hold=(n == LINK_HOLD)))
    for e in kernels:
        colls.append(Collective(e.name, _span(e), None, None))
    colls.sort(key=lambda c: c.span.ts)

    di = trace.distributedInfo
    return TraceSpans(
        path=path,
        step_source=source,
        steps=steps,
        sends=sends,
        syncs=syncs,
        collectives=colls,
        rank=di.rank if di is not None else None,
        has_shapes=has_shapes,
        events=len(trace.traceEvents),
        quorums=sorted((_span(e) for e in by_name[labels.wait_quorum]), key=lambda s: s.ts),
    )
