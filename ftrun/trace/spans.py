"""Extract the spans the schedule check needs from a decoded trace. Torch-free.

Label meanings (spelled only in ``ftrun.torchft_compat``):

* step: ``ftrun::step#S manager_step=M`` (ftrun's worker; S is the absolute training step) when
  the trace has any, else ``ProfilerStep#k`` (k is turned into a step by the caller's numbering).
* send: ``torchft::local_sgd::prepare_sync``; its allreduces are the
  ``torchft::manager::allreduce`` spans on the same thread nested inside it, and each one's
  tensor sizes come from the ``c10d::allreduce_`` cpu_op nested in that (``Input Dims``, needs
  ``record_shapes=True``), else from the ``In msg nelems`` of its ``record_param_comms`` (NCCL
  writes it without ``record_shapes``; a flat element count, enough for the signature).
* sync: ``torchft::local_sgd::perform_sync`` with its nested ``torchft::local_sgd::wait``,
  ``torchft::local_sgd::restore_parameters`` (whose ``aten::copy_`` sizes are the fragment's
  parameter shapes) and ``torchft::manager::should_commit``; and ftrun's ``ftrun::sketch::wait``
  right before it (``pre_wait``: the numeric check waiting for the same collectives, outside
  torchft's span): the latest on its thread that ends by its start, in its training step and
  after the thread's previous perform_sync.
* collective: backend spans (``gloo:all_reduce`` on Gloo threads, ``nccl:all_reduce``),
  NCCL kernels (when a trace has them, they replace the CPU-side ``nccl:*`` launch spans), and
  ftrun's ``ftrun::link::hold`` (emulated slow link).

By category (kineto's ``cat``, see ``ftrun.trace.schema``): steps, sends, syncs and backend spans
are read from host-side events only (``user_annotation``, ``cpu_op``, ``python_function``).
kineto copies to the GPU side (``gpu_user_annotation``) only the innermost user annotation open
at each launch, with no args but ``External id``: those copies are counted (``device_copies``)
and never read as a send, sync or step, nor used to place GPU work in a step.

NCCL kernels (``cat`` kernel, ``ncclDevKernel_*`` / ``ncclKernel_*``) are linked to their launch
(``cuda_runtime`` / ``cuda_driver``: ``cudaLaunchKernel*``, ``cuLaunchKernel*``, and
``cudaGraphLaunch`` whose replayed kernels all carry its correlation) by ``correlation``. The
``External id`` fallback is used only when it differs from the kernel's own correlation:
kineto writes the kernel's correlation there when its launch is outside the window, and that
number may equal an unrelated op's id. A kernel's kind and size come from what the trace
states (``ftrun.trace.nccl``: kernel args, the launch's ``record_param_comms``, ``nccl:<op>``,
``c10d::<op>_``; the kernel name last). A kernel launched inside a ``torchft::manager::allreduce``
call belongs to that call: one collective per call, spanning all of the call's kernels (a
quantized allreduce — recognised by its ``c10d::alltoall_base_`` /
``c10d::allgather_into_tensor_coalesced_`` ops — launches an alltoall and an allgather).
Kernels launched elsewhere (DDP's own allreduce, healing) are not a send's. Without launch
links, every kernel stated to be an allreduce is a collective. ``compute_launches`` (a second,
opt-in pass) reads the other kernels with their launches: the GPU's progress through the host's
steps. Said once in ``notes``: kernels that start before their
launch (the GPU and CPU clocks disagree), kernels replayed from a CUDA graph, kernels whose
launch is outside the window.

The quorum wait: ``torchft::manager::wait_quorum`` (the training thread waiting for the quorum
that ``start_quorum`` runs before each send; ``manager.allreduce`` nests short ones too).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable
from operator import attrgetter
from pathlib import Path
from typing import Literal

import msgspec

from ftrun.errors import BadInput
from ftrun.torchft_compat import (
    FTRUN_STEP_PREFIX,
    FTRUN_STEP_RE,
    LABELS,
    LINK_HOLD,
    OPTIMIZER_STEP_PREFIX,
    PROFILER_STEP_RE,
    SKETCH_WAIT,
    LabelSet,
)
from ftrun.trace import nccl
from ftrun.trace.cuda_link import (  # compute_launches: re-exported, callers read traces through this module
    Launches,
    compute_launches,  # noqa: F401
    group_rank_of,
    kernel_collectives,
    link_kernels,
)
from ftrun.trace.load import load_trace
from ftrun.trace.nccl import DTYPE_BYTES, kernel_op  # noqa: F401  (kernel_op: re-exported for callers)
from ftrun.trace.schema import (
    CPU_CATS,
    GPU_ANNOTATION,
    KERNEL,
    LAUNCH_CATS,
    ChromeTrace,
    TraceEvent,
    args_of,
    name_filter,
    raw_json,
    trace_events,
)
from ftrun.trace.shapes import dims_shapes, first_shape, itemsize
from ftrun.trace.span_types import (  # the span types: re-exported, this module's results are made of them
    Allreduce,
    Collective,
    Kernel,
    Send,
    Shape,
    Span,  # noqa: F401
    SpanIndex,
    StepSpan,
    Sync,
    TraceSpans,
    param_comms_of,
    span_of,
    thread_of,
)
from ftrun.trace.stream import Fallback, TraceFile

COPY = "aten::copy_"
_NAME = attrgetter("name")
_TS = attrgetter("ts")


_FILTERS: dict[tuple[LabelSet, frozenset], object] = {}


def _prefixes(labels: LabelSet) -> tuple[str, ...]:
    """Name prefixes of the events ``_sort_event`` may keep (with ``_wanted``'s exact names)."""
    return (
        "ProfilerStep#",
        FTRUN_STEP_PREFIX,
        OPTIMIZER_STEP_PREFIX,
        labels.should_commit_prefix,
        *labels.nccl_kernel_any,
        *labels.cuda_launch,
        *labels.cuda_graph_launch,
        labels.nccl_host_prefix,
        labels.c10d_prefix,
    )


def _filter(labels: LabelSet, names: set[str]):
    key = (labels, frozenset(names))
    if key not in _FILTERS:
        _FILTERS[key] = name_filter(names, _prefixes(labels))
    return _FILTERS[key]


def _committed(commits: list[TraceEvent], outer_steps: list[TraceEvent], saves: list[TraceEvent] | None) -> bool | None:
    """Did the sync commit? An outer optimizer step after ``should_commit`` says so; ``saves``
    (``save_parameters`` spans) decide only for a trace without optimizer spans (``None`` else)."""
    if not commits:
        return None
    end = commits[0].ts + commits[0].dur
    if any(s.ts >= end for s in outer_steps):
        return True
    return any(s.ts >= end for s in saves) if saves is not None else False


def _wanted(labels: LabelSet) -> set[str]:
    return {
        labels.prepare_sync,
        labels.perform_sync,
        labels.allreduce,
        labels.wait,
        labels.restore_parameters,
        labels.should_commit,
        labels.save_parameters,
        COPY,
        labels.wait_quorum,
        *labels.c10d_allreduce,
        *labels.c10d_quantized,
        *labels.backend_allreduce,
        *labels.cuda_stream_wait,
        labels.param_comms,
        SKETCH_WAIT,
    }


class _Classified(msgspec.Struct):
    """A trace's events sorted into what ``extract`` reads (one pass over the events)."""

    by_name: dict[str, list[TraceEvent]]  # host spans of the wanted names
    prof_steps: list[StepSpan] = msgspec.field(default_factory=list)
    ftrun_steps: list[StepSpan] = msgspec.field(default_factory=list)
    commit_children: list[TraceEvent] = msgspec.field(default_factory=list)  # should_commit's synchronize children
    opt_steps: list[TraceEvent] = msgspec.field(default_factory=list)  # torch.optim step spans
    kernels: list[TraceEvent] = msgspec.field(default_factory=list)  # NCCL kernels
    launches: list[TraceEvent] = msgspec.field(
        default_factory=list
    )  # CUDA launches (graph replays too) and stream waits
    comm_ops: list[TraceEvent] = msgspec.field(default_factory=list)  # host c10d::*, record_param_comms, nccl:* spans
    copies: int = 0  # device copies of host spans (gpu_user_annotation)


def _classify(path: Path, trace: ChromeTrace, labels: LabelSet) -> _Classified:
    wanted_names = _wanted(labels)
    out = _Classified({n: [] for n in wanted_names})
    kernel_prefixes = labels.nccl_kernel_any
    launch_names = (*labels.cuda_launch, *labels.cuda_graph_launch)
    comm_prefixes = (labels.c10d_prefix, labels.nccl_host_prefix)
    waits = set(labels.cuda_stream_wait)
    keep = _filter(labels, wanted_names)
    try:  # one pass, nothing kept but what is sorted below
        for e in trace_events(trace, keep):
            _sort_event(e, out, labels, kernel_prefixes, launch_names, comm_prefixes, waits)
    except msgspec.DecodeError as err:
        raise BadInput(f"{path}: JSON but not a chrome trace (bad event: {err})") from None
    return out


def _classify_stream(trace: TraceFile, labels: LabelSet) -> _Classified:
    """``_classify`` of a file read in chunks (``stream.Fallback`` when the fast path cannot read
    it). The same events reach ``_sort_event``: an event's name is looked up once per distinct
    name (exact names, then prefixes), not searched per event."""
    wanted_names = _wanted(labels)
    out = _Classified({n: [] for n in wanted_names})
    kernel_prefixes = labels.nccl_kernel_any
    launch_names = (*labels.cuda_launch, *labels.cuda_graph_launch)
    comm_prefixes = (labels.c10d_prefix, labels.nccl_host_prefix)
    waits = set(labels.cuda_stream_wait)
    prefixes = _prefixes(labels)
    # route: name -> None (never kept), a by_name bucket (an exact name no other rule of _sort_event
    # reads: kept when host-side, counted when a device copy), or True (_sort_event decides)
    route: dict[str, list[TraceEvent] | Literal[True] | None] = {}
    special = {labels.param_comms, *waits}

    def route_of(name: str) -> list[TraceEvent] | Literal[True] | None:
        if name not in route:
            route[name] = True if name.startswith(prefixes) or name in special else out.by_name.get(name)
        return route[name]

    # the reader keeps only the events of names routed somewhere (asked once per distinct name),
    # and of the copies only those within a restore: _syncs reads no other (most copies are not)
    for chunk in trace.chunks(lambda name: route_of(name) is not None, {COPY: labels.restore_parameters}):
        for e in chunk:
            if e.ph != "X":
                continue
            bucket = route[e.name] if e.name in route else route_of(e.name)  # (a name only the child saw)
            if bucket is not True:
                cat = e.cat.lower()
                if cat in CPU_CATS:
                    if e.args:
                        e.args = e.args.copy()  # its own bytes: the chunk's buffer is freed with the chunk
                    assert bucket is not None  # a relevant name's: a bucket
                    bucket.append(e)
                elif cat == GPU_ANNOTATION:
                    out.copies += 1
                continue
            if e.args:
                e.args = e.args.copy()
            _sort_event(e, out, labels, kernel_prefixes, launch_names, comm_prefixes, waits)
    return out


def _sort_event(
    e: TraceEvent,
    out: _Classified,
    labels: LabelSet,
    kernel_prefixes: tuple[str, ...],
    launch_names: tuple[str, ...],
    comm_prefixes: tuple[str, ...],
    waits: set[str],
) -> None:
    if e.ph != "X":
        return
    cat, name = e.cat.lower(), e.name
    if cat == KERNEL:
        if name.startswith(kernel_prefixes):
            out.kernels.append(e)
        return
    if cat in LAUNCH_CATS:
        if name.startswith(launch_names) or name in waits:
            out.launches.append(e)
        return
    if cat == GPU_ANNOTATION:
        out.copies += 1  # kineto's copy of the innermost annotation at a launch: never a host span
        return
    if cat not in CPU_CATS:
        return  # another device-side category (memcpy, ...): never a host span
    if name.startswith(comm_prefixes) or name == labels.param_comms:
        out.comm_ops.append(e)
    if name.startswith("ProfilerStep#"):
        m = PROFILER_STEP_RE.match(name)
        if m:
            out.prof_steps.append(StepSpan(int(m[1]), None, span_of(e)))
    elif name.startswith(FTRUN_STEP_PREFIX):
        m = FTRUN_STEP_RE.match(name)
        if m:
            out.ftrun_steps.append(StepSpan(int(m[1]), int(m[2]), span_of(e)))
    elif name.startswith(labels.should_commit_prefix):
        out.commit_children.append(e)
    elif name.startswith(OPTIMIZER_STEP_PREFIX):
        out.opt_steps.append(e)
    else:
        bucket = out.by_name.get(name)
        if bucket is not None:
            bucket.append(e)


def _sends(
    by_name: dict[str, list[TraceEvent]], labels: LabelSet
) -> tuple[list[Send], list[TraceEvent], list[tuple[Shape, ...] | None], bool]:
    """(sends, their manager.allreduce spans in send order, those calls' shapes, any shapes seen)."""
    ar_index = SpanIndex(by_name[labels.allreduce])
    c10d_index = SpanIndex([e for n in (*labels.c10d_allreduce, *labels.c10d_quantized) for e in by_name[n]])
    rpc_index = SpanIndex(by_name[labels.param_comms])
    has_shapes = False
    sends: list[Send] = []
    calls: list[TraceEvent] = []
    call_shapes: list[tuple[Shape, ...] | None] = []
    for ps in sorted(by_name[labels.prepare_sync], key=lambda e: e.ts):
        ars = []
        for ar in ar_index.inside(ps):
            shapes, issue, quantized = None, ar.ts, False
            for k, op in enumerate(c10d_index.inside(ar)):
                if k == 0:
                    issue = op.ts
                if op.name in labels.c10d_quantized:
                    quantized = True
                    continue  # quantized buffers: not the tensor's sizes
                got = dims_shapes(bytes(args_of(op).input_dims))
                if got:
                    shapes = (shapes or ()) + got
            if shapes is None and not quantized:  # no record_shapes: NCCL's record_param_comms states the count
                counts = [
                    i.in_nelems
                    for i in map(param_comms_of, rpc_index.inside(ar))
                    if i is not None and i.kind == "allreduce"
                ]
                known = [n for n in counts if n is not None]
                if counts and len(known) == len(counts):
                    shapes = tuple((n,) for n in known)
            ars.append(Allreduce(span_of(ar), shapes, issue, quantized))
            calls.append(ar)
            call_shapes.append(shapes)
            has_shapes = has_shapes or shapes is not None
        sends.append(Send(span_of(ps), tuple(ars)))
    return sends, calls, call_shapes, has_shapes


def _pre_waits(by_name: dict[str, list[TraceEvent]], steps: list[StepSpan], labels: LabelSet) -> dict[int, TraceEvent]:
    """``id(perform_sync)`` -> its ``SKETCH_WAIT`` (module docstring: the latest on its thread ending
    by its start, not before its step's start nor the thread's previous perform_sync's end)."""
    waits = SpanIndex(by_name[SKETCH_WAIT])
    step_starts = [s.span.ts for s in steps]  # sorted by the caller
    prev_end: dict[Hashable, float] = {}
    out: dict[int, TraceEvent] = {}
    for pf in sorted(by_name[labels.perform_sync], key=_TS):
        t = thread_of(pf)
        got = waits.by_thread.get(t)
        i = bisect_left(step_starts, pf.ts + 1e-3) - 1  # the step starting last at or before pf
        bound = max(prev_end.get(t, float("-inf")), step_starts[i] if i >= 0 else float("-inf"))
        prev_end[t] = pf.ts + pf.dur
        if not got:
            continue
        starts, evs = got
        for j in range(bisect_left(starts, pf.ts + 1e-3) - 1, -1, -1):
            w = evs[j]
            if w.ts < bound:
                break
            if w.ts + w.dur <= pf.ts + 1e-3:
                out[id(pf)] = w
                break
    return out


def _syncs(
    by_name: dict[str, list[TraceEvent]],
    commit_children: list[TraceEvent],
    opt_steps: list[TraceEvent],
    labels: LabelSet,
    steps: list[StepSpan],
) -> list[Sync]:
    """Every perform_sync with its wait, restore (and what it copied), should_commit and result,
    and ftrun's wait right before it (``_pre_waits``; ``steps``: the trace's step spans, sorted)."""
    pre = _pre_waits(by_name, steps, labels)
    opt_index = SpanIndex(opt_steps)
    wait_index = SpanIndex(by_name[labels.wait])
    restore_index = SpanIndex(by_name[labels.restore_parameters])
    commit_index = SpanIndex(by_name[labels.should_commit])
    child_index = SpanIndex(commit_children)
    copy_index = SpanIndex(by_name[COPY])
    save_index = SpanIndex(by_name[labels.save_parameters])
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
                s = first_shape(raw_json(args_of(c).input_dims))
                if s is not None:
                    shapes.append(s)
            restore_shapes = tuple(shapes) or None
        commit_syncs = tuple(span_of(c) for c in child_index.inside(commits[0])) if commits else ()
        syncs.append(
            Sync(
                span_of(pf),
                span_of(waits[0]) if waits else None,
                span_of(restores[0]) if restores else None,
                span_of(commits[0]) if commits else None,
                restore_shapes,
                commit_syncs,
                restore_copies,
                _committed(commits, opt_index.inside(pf), None if opt_steps else save_index.inside(pf)),
                span_of(pre[id(pf)]) if id(pf) in pre else None,
            )
        )
    return syncs


def _collectives(
    by_name: dict[str, list[TraceEvent]], kern: list[Kernel], calls: list[Allreduce], labels: LabelSet
) -> list[Collective]:
    """The collectives really running: backend host spans (or, with GPU activity, the kernels), by start."""
    colls: list[Collective] = []
    # (the quantized path's nccl:all_to_all / nccl:all_gather_* host spans are launches only, and
    # come two per call: never collectives; its kernels are, grouped per call)
    for n in labels.backend_allreduce:
        if kern and n.startswith(labels.nccl_host_prefix):
            continue  # with GPU activity, the CPU-side nccl:* spans are only the launch
        for e in by_name[n]:
            dims = dims_shapes(bytes(args_of(e).input_dims))
            colls.append(Collective(n, span_of(e), dims, itemsize(e), hold=(n == LINK_HOLD), kind=nccl.normalise(n)))
    colls.extend(kernel_collectives(kern, calls))
    colls.sort(key=lambda c: c.span.ts)
    return colls


def no_steps(path: Path) -> BadInput:
    return BadInput(
        f"{path}: no step spans (neither ftrun::step#S nor ProfilerStep#k); "
        "profile with a torch.profiler schedule or ftrun's worker"
    )


def extract(
    path: Path, trace: ChromeTrace | TraceFile, labels: LabelSet = LABELS, require_steps: bool = True
) -> TraceSpans:
    """The spans of ``trace`` (read from ``path``). ``BadInput`` when it has no step spans, unless
    not ``require_steps`` (the caller first says what else the trace is: ``ftrun.check.provenance``).

    A ``TraceFile`` is read in chunks (``ftrun.trace.stream``); when that path cannot read the
    file exactly, it is read whole by ``load_trace`` under the same limit (the same spans, or the
    same error), and ``trace.meta`` is that whole trace."""
    c = None
    whole = None if isinstance(trace, TraceFile) else trace  # the trace in memory, if it is
    if isinstance(trace, TraceFile):
        tf = trace
        try:
            c = _classify_stream(tf, labels)
            n_events, di = tf.events, tf.meta.distributedInfo
        except Fallback:
            whole = tf.meta = load_trace(path, tf.limit)
    if c is None:
        assert whole is not None  # given whole, or read whole on the fallback
        c = _classify(path, whole, labels)
        n_events, di = len(whole.traceEvents), whole.distributedInfo
    steps, source = (c.ftrun_steps, "ftrun") if c.ftrun_steps else (c.prof_steps, "profiler")
    if not steps and require_steps:
        raise no_steps(path)
    steps.sort(key=lambda s: s.span.ts)
    sends, calls, _, has_shapes = _sends(c.by_name, labels)
    syncs = _syncs(c.by_name, c.commit_children, c.opt_steps, labels, steps)
    notes: list[str] = []
    links = Launches(c.launches, labels)
    kern = link_kernels(c.kernels, links, c.comm_ops, labels, calls, path, notes)
    return TraceSpans(
        path=path,
        step_source=source,
        steps=steps,
        sends=sends,
        syncs=syncs,
        collectives=_collectives(c.by_name, kern, [a for s in sends for a in s.allreduces], labels),
        rank=di.rank if di is not None else None,
        world_size=di.world_size if di is not None else None,
        has_shapes=has_shapes,
        trace_events=n_events,
        kernels=kern,
        device_copies=c.copies,
        stream_waits=sorted((span_of(e) for e in c.launches if e.name in labels.cuda_stream_wait), key=lambda s: s.ts),
        notes=notes,
        quorums=sorted((span_of(e) for e in c.by_name[labels.wait_quorum]), key=lambda s: s.ts),
        group_rank=group_rank_of(kern, c.comm_ops, labels),
        optimizer_steps=sorted((span_of(e) for e in c.opt_steps), key=lambda s: s.ts),
    )
