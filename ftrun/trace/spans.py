"""Extract the spans the schedule check needs from a decoded trace. Torch-free.

Label meanings (spelled only in ``ftrun.torchft_compat``):

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

By category (kineto's ``cat``, see ``ftrun.trace.schema``): steps, sends, syncs and backend spans
are read from host-side events only (``user_annotation``, ``cpu_op``, ``python_function``).
A CUDA trace repeats every ``record_function`` span as ``gpu_user_annotation`` on each stream
it touched (pid = device, tid = stream): those copies are counted and their step copies kept in
``device_steps`` (to place a step's GPU work), never read as a second send, sync or step.
NCCL kernels (``cat`` kernel, ``ncclDevKernel_*`` or ``ncclKernel_*``) are linked to their
``cuda_runtime`` (or ``cuda_driver``) launch by ``correlation`` (else by ``External id``). A kernel launched inside
a ``torchft::manager::allreduce`` call belongs to that call: one collective per call, spanning
all of the call's kernels (a quantized allreduce launches an alltoall = SendRecv and an
AllGather). Kernels launched elsewhere (DDP's own allreduce, healing) are not a send's.
Without launch links, every AllReduce kernel is a collective (the old rule). A kernel that
starts before its launch means the trace's GPU and CPU clocks disagree: said once in ``notes``.

The quorum wait: ``torchft::manager::wait_quorum`` (the training thread waiting for the quorum
that ``start_quorum`` runs before each send; ``manager.allreduce`` nests short ones too).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from pathlib import Path
from typing import Hashable, Optional

from ftrun.errors import BadInput
from ftrun.torchft_compat import FTRUN_STEP_PREFIX, FTRUN_STEP_RE, LABELS, LINK_HOLD, PROFILER_STEP_RE, LabelSet
import msgspec

from ftrun.trace.schema import (
    CPU_CATS, GPU_ANNOTATION, KERNEL, LAUNCH_CATS, ChromeTrace, TraceEvent, args_of, name_filter, raw_json, trace_events,
)

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
    commit_syncs: tuple[Span, ...] = ()  # should_commit's stream synchronizes (nested, by prefix)
    restore_copies: int = 0  # aten::copy_ calls in restore_parameters (one per parameter), shapes or not
    # torchft runs the outer step and save_parameters only when should_commit returned True:
    # True = save_parameters after should_commit, False = should_commit without it, None = no should_commit span
    committed: Optional[bool] = None


@dataclass(frozen=True, slots=True)
class Collective:
    """A span of the collective really running (backend thread, GPU kernel(s), or link hold).

    For kernels: ``launch_ts`` = start of the first kernel's ``cuda_runtime`` launch (None when
    unlinked), ``stream`` = (device, stream), ``kernels`` = how many kernels it spans.
    """

    name: str
    span: Span
    shapes: Optional[tuple[Shape, ...]]
    itemsize: Optional[int]
    hold: bool = False
    launch_ts: Optional[float] = None
    stream: Optional[Hashable] = None
    kernels: int = 0


@dataclass(frozen=True, slots=True)
class Kernel:
    """One NCCL kernel. ``op``: AllReduce, AllGather, SendRecv, ... (from either naming).

    ``launch``: its ``cuda_runtime`` launch on a host thread; ``call``: index of the
    ``torchft::manager::allreduce`` span (in ``TraceSpans.calls``) its launch ran in.
    """

    name: str
    op: str
    span: Span
    stream: Hashable
    launch: Optional[Span] = None
    call: Optional[int] = None


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
    trace_events: int = 0  # the file's trace events, all kinds
    quorums: list[Span] = field(default_factory=list)  # wait_quorum spans, by start
    kernels: list[Kernel] = field(default_factory=list)  # every NCCL kernel, by start
    device_steps: list[StepSpan] = field(default_factory=list)  # gpu_user_annotation step copies
    device_copies: int = 0  # gpu_user_annotation copies of sends/syncs/steps, recognised and set aside
    stream_waits: list[Span] = field(default_factory=list)  # cudaStreamWaitEvent calls (host)
    notes: list[str] = field(default_factory=list)  # what this trace cannot tell, said once


def kernel_op(name: str, prefixes: tuple[str, ...]) -> Optional[str]:
    """``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` / ``ncclKernel_AllReduce_RING_LL_Sum_float`` -> ``AllReduce``."""
    for p in prefixes:
        if name.startswith(p):
            rest = name[len(p):]
            return rest.split("_", 1)[0].split("(", 1)[0] or None
    return None


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
        prefixes = ("ProfilerStep#", FTRUN_STEP_PREFIX, labels.should_commit_prefix, *labels.nccl_kernel_any, *labels.cuda_launch)
        _FILTERS[key] = name_filter(names, prefixes)
    return _FILTERS[key]


def _committed(commits: list[TraceEvent], saves: list[TraceEvent]) -> Optional[bool]:
    if not commits:
        return None
    end = commits[0].ts + commits[0].dur
    return any(s.ts >= end for s in saves)


def _wanted(labels: LabelSet) -> set[str]:
    return {
        labels.prepare_sync, labels.perform_sync, labels.allreduce, labels.wait,
        labels.restore_parameters, labels.should_commit, labels.save_parameters, COPY, labels.wait_quorum,
        *labels.c10d_allreduce, *labels.c10d_quantized, *labels.backend_allreduce,
        *labels.cuda_stream_wait,
    }


@dataclass
class _Classified:
    """A trace's events sorted into what ``extract`` reads (one pass over the events)."""

    by_name: dict[str, list[TraceEvent]]  # host spans of the wanted names
    prof_steps: list[StepSpan] = field(default_factory=list)
    ftrun_steps: list[StepSpan] = field(default_factory=list)
    dev_prof: list[StepSpan] = field(default_factory=list)  # device copies of the step spans
    dev_ftrun: list[StepSpan] = field(default_factory=list)
    commit_children: list[TraceEvent] = field(default_factory=list)  # should_commit's synchronize children
    kernels: list[TraceEvent] = field(default_factory=list)  # NCCL kernels
    launches: list[TraceEvent] = field(default_factory=list)  # CUDA launches and stream waits
    copies: int = 0  # device copies of host spans (gpu_user_annotation)


def _classify(path: Path, trace: ChromeTrace, labels: LabelSet) -> _Classified:
    wanted_names = _wanted(labels)
    out = _Classified({n: [] for n in wanted_names})
    kernel_prefixes = labels.nccl_kernel_any
    waits = set(labels.cuda_stream_wait)
    keep = _filter(labels, wanted_names)
    try:
        kept = list(trace_events(trace, keep))
    except msgspec.DecodeError as err:
        raise BadInput(f"{path}: JSON but not a chrome trace (bad event: {err})") from None
    for e in kept:
        if e.ph != "X":
            continue
        cat, name = e.cat.lower(), e.name
        if cat == KERNEL:
            if name.startswith(kernel_prefixes):
                out.kernels.append(e)
            continue
        if cat in LAUNCH_CATS:
            if name.startswith(labels.cuda_launch) or name in waits:
                out.launches.append(e)
            continue
        device = cat == GPU_ANNOTATION
        if not device and cat not in CPU_CATS:
            continue  # another device-side category (memcpy, ...): never a host span
        if device:
            out.copies += 1
            dst_prof, dst_ftrun = out.dev_prof, out.dev_ftrun
        else:
            dst_prof, dst_ftrun = out.prof_steps, out.ftrun_steps
        if name.startswith("ProfilerStep#"):
            m = PROFILER_STEP_RE.match(name)
            if m:
                dst_prof.append(StepSpan(int(m[1]), None, _span(e)))
        elif name.startswith(FTRUN_STEP_PREFIX):
            m = FTRUN_STEP_RE.match(name)
            if m:
                dst_ftrun.append(StepSpan(int(m[1]), int(m[2]), _span(e)))
        elif device:
            pass  # the device copy of a send/sync/collective span: recognised, not a second event
        elif name.startswith(labels.should_commit_prefix):
            out.commit_children.append(e)
        else:
            bucket = out.by_name.get(name)
            if bucket is not None:
                bucket.append(e)
    return out


def _sends(by_name: dict[str, list[TraceEvent]], labels: LabelSet) -> tuple[list[Send], list[TraceEvent], list[Optional[tuple[Shape, ...]]], bool]:
    """(sends, their manager.allreduce spans in send order, those calls' shapes, any shapes seen)."""
    ar_index = _Index(by_name[labels.allreduce])
    c10d_index = _Index([e for n in (*labels.c10d_allreduce, *labels.c10d_quantized) for e in by_name[n]])
    has_shapes = False
    sends: list[Send] = []
    calls: list[TraceEvent] = []
    call_shapes: list[Optional[tuple[Shape, ...]]] = []
    for ps in sorted(by_name[labels.prepare_sync], key=lambda e: e.ts):
        ars = []
        for ar in ar_index.inside(ps):
            shapes, issue = None, ar.ts
            for k, op in enumerate(c10d_index.inside(ar)):
                if k == 0:
                    issue = op.ts
                if op.name in labels.c10d_quantized:
                    continue  # quantized buffers: not the tensor's sizes
                got = _shapes(raw_json(args_of(op).input_dims))
                if got:
                    shapes = (shapes or ()) + got
            ars.append(Allreduce(_span(ar), shapes, issue))
            calls.append(ar)
            call_shapes.append(shapes)
            has_shapes = has_shapes or shapes is not None
        sends.append(Send(_span(ps), tuple(ars)))
    return sends, calls, call_shapes, has_shapes


def _syncs(by_name: dict[str, list[TraceEvent]], commit_children: list[TraceEvent], labels: LabelSet) -> list[Sync]:
    """Every perform_sync with its wait, restore (and what it copied), should_commit and result."""
    wait_index = _Index(by_name[labels.wait])
    restore_index = _Index(by_name[labels.restore_parameters])
    commit_index = _Index(by_name[labels.should_commit])
    child_index = _Index(commit_children)
    copy_index = _Index(by_name[COPY])
    save_index = _Index(by_name[labels.save_parameters])
    syncs: list[Sync] = []
    for pf in sorted(by_name[labels.perform_sync], key=lambda e: e.ts):
        waits = wait_index.inside(pf)
        restores = restore_index.inside(pf)
        commits = commit_index.inside(pf)
        restore_shapes = None
        restore_copies = 0
        if restores:
            shapes = []
            for c in copy_index.inside(restores[0]):
                restore_copies += 1
                s = _first_shape(raw_json(args_of(c).input_dims))
                if s is not None:
                    shapes.append(s)
            restore_shapes = tuple(shapes) or None
        commit_syncs = tuple(_span(c) for c in child_index.inside(commits[0])) if commits else ()
        syncs.append(
            Sync(
                _span(pf),
                _span(waits[0]) if waits else None,
                _span(restores[0]) if restores else None,
                _span(commits[0]) if commits else None,
                restore_shapes,
                commit_syncs,
                restore_copies,
                _committed(commits, save_index.inside(pf)),
            )
        )
    return syncs


def _collectives(by_name: dict[str, list[TraceEvent]], kern: list[Kernel], call_shapes: list, labels: LabelSet) -> list[Collective]:
    """The collectives really running: backend host spans (or, with GPU activity, the kernels), by start."""
    colls: list[Collective] = []
    # (the quantized path's nccl:all_to_all / nccl:all_gather_* host spans are launches only, and
    # come two per call: never collectives; its kernels are, grouped per call)
    for n in labels.backend_allreduce:
        if kern and n.startswith("nccl:"):
            continue  # with GPU activity, the CPU-side nccl:* spans are only the launch
        for e in by_name[n]:
            dims = _shapes(raw_json(args_of(e).input_dims))
            colls.append(Collective(n, _span(e), dims, _itemsize(e), hold=(n == LINK_HOLD)))
    colls.extend(_kernel_collectives(kern, call_shapes))
    colls.sort(key=lambda c: c.span.ts)
    return colls


def extract(path: Path, trace: ChromeTrace, labels: LabelSet = LABELS) -> TraceSpans:
    """The spans of ``trace`` (read from ``path``). ``BadInput`` when it has no step spans."""
    c = _classify(path, trace, labels)
    steps, source = (c.ftrun_steps, "ftrun") if c.ftrun_steps else (c.prof_steps, "profiler")
    if not steps:
        raise BadInput(
            f"{path}: no step spans (neither ftrun::step#S nor ProfilerStep#k); "
            "profile with a torch.profiler schedule or ftrun's worker"
        )
    steps.sort(key=lambda s: s.span.ts)
    device_steps = sorted(c.dev_ftrun if source == "ftrun" else c.dev_prof, key=lambda s: s.span.ts)
    sends, calls, call_shapes, has_shapes = _sends(c.by_name, labels)
    syncs = _syncs(c.by_name, c.commit_children, labels)
    notes: list[str] = []
    kern = _link_kernels(c.kernels, c.launches, labels, calls, path, notes)
    di = trace.distributedInfo
    return TraceSpans(
        path=path,
        step_source=source,
        steps=steps,
        sends=sends,
        syncs=syncs,
        collectives=_collectives(c.by_name, kern, call_shapes, labels),
        rank=di.rank if di is not None else None,
        has_shapes=has_shapes,
        trace_events=len(trace.traceEvents),
        kernels=kern,
        device_steps=device_steps,
        device_copies=c.copies,
        stream_waits=sorted((_span(e) for e in c.launches if e.name in labels.cuda_stream_wait), key=lambda s: s.ts),
        notes=notes,
        quorums=sorted((_span(e) for e in c.by_name[labels.wait_quorum]), key=lambda s: s.ts),
    )


def _link_kernels(kernels: list[TraceEvent], runtime: list[TraceEvent], labels: LabelSet, calls: list[TraceEvent],
                  path: Path, notes: list[str]) -> list[Kernel]:
    """NCCL kernels with their launch (by correlation, else External id) and the call it ran in."""
    launches = [e for e in runtime if e.name.startswith(labels.cuda_launch)]
    by_corr: dict[int, TraceEvent] = {}
    by_ext: dict[int, list[TraceEvent]] = {}
    for e in launches:
        a = args_of(e)
        if a.correlation is not None:
            by_corr[a.correlation] = e
        if a.external_id is not None:
            by_ext.setdefault(a.external_id, []).append(e)
    call_index = _Index(calls)
    call_no = {id(c): i for i, c in enumerate(calls)}
    out: list[Kernel] = []
    early, worst = 0, 0.0
    for k in sorted(kernels, key=lambda e: e.ts):
        a = args_of(k)
        op = kernel_op(k.name, labels.nccl_kernel_any) or "?"
        launch = by_corr.get(a.correlation) if a.correlation is not None else None
        if launch is None and a.external_id is not None:
            cands = [e for e in by_ext.get(a.external_id, ()) if e.ts <= k.ts] or by_ext.get(a.external_id, [])
            launch = max(cands, key=lambda e: e.ts) if cands else None
        call = None
        if launch is not None:
            if k.ts < launch.ts:
                early += 1
                worst = max(worst, launch.ts - k.ts)
            enclosing = _enclosing(call_index, launch)
            call = call_no[id(enclosing)] if enclosing is not None else None
        stream = (k.pid, a.stream if a.stream is not None else k.tid)
        out.append(Kernel(k.name, op, _span(k), stream, _span(launch) if launch is not None else None, call))
    if early:
        notes.append(
            f"{path.name}: {early} NCCL kernel(s) start before their launch (by up to {worst:.1f} us): "
            "the trace's GPU and CPU clocks disagree; queue delays from it are not reliable"
        )
    return out


def _enclosing(index: _Index, e: TraceEvent) -> Optional[TraceEvent]:
    """The indexed span on ``e``'s thread that contains ``e``'s start (latest-starting one)."""
    got = index.by_thread.get(_thread(e))
    if not got:
        return None
    starts, evs = got
    i = bisect_left(starts, e.ts + 1e-9) - 1
    while i >= 0:
        c = evs[i]
        if c.ts <= e.ts <= c.ts + c.dur:
            return c
        i -= 1
        if i >= 0 and e.ts - evs[i].ts > 60e6:  # calls are far shorter than a minute
            break
    return None


def _kernel_collectives(kern: list[Kernel], call_shapes: list) -> list[Collective]:
    """One collective per manager.allreduce call (all its kernels); unlinked AllReduce kernels alone."""
    linked = any(k.launch is not None for k in kern)
    out: list[Collective] = []
    per_call: dict[int, list[Kernel]] = {}
    for k in kern:
        if k.call is not None:
            per_call.setdefault(k.call, []).append(k)
        elif not linked and k.op == "AllReduce":
            out.append(Collective(k.name, k.span, None, None, stream=k.stream, kernels=1))
    for call, ks in per_call.items():
        first, last = ks[0], max(ks, key=lambda k: k.span.end)
        name = "+".join(dict.fromkeys(k.op for k in ks)) if len(ks) > 1 else first.name
        span = Span(first.span.ts, last.span.end, first.span.thread)
        out.append(Collective(name, span, call_shapes[call], None, launch_ts=first.launch.ts if first.launch else None,
                              stream=first.stream, kernels=len(ks)))
    return out
