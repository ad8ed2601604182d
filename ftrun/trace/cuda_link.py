"""NCCL kernels linked to their host launches and to torchft's allreduce calls, and the GPU's
compute kernels with their launches (``compute_launches``): the CUDA half of
``ftrun.trace.spans`` (its module docstring states the linking rules). Torch-free."""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Hashable
from pathlib import Path

import msgspec

from ftrun.torchft_compat import LABELS, LabelSet
from ftrun.trace import nccl
from ftrun.trace.nccl import kernel_op
from ftrun.trace.schema import (
    KERNEL,
    LAUNCH_CATS,
    ChromeTrace,
    TraceEvent,
    args_dict,
    args_of,
    name_filter,
    trace_events,
)
from ftrun.trace.span_types import (
    Allreduce,
    Collective,
    Kernel,
    Shape,
    Span,
    SpanIndex,
    param_comms_of,
    span_of,
    thread_of,
)


class Launches:
    """Host launch calls by ``correlation`` and by ``External id`` (kernel launches and graph replays)."""

    def __init__(self, runtime: list[TraceEvent], labels: LabelSet) -> None:
        self.graph_names = labels.cuda_graph_launch
        self.by_corr: dict[int, TraceEvent] = {}
        self.by_ext: dict[int, list[TraceEvent]] = {}
        for e in runtime:
            if not e.name.startswith((*labels.cuda_launch, *labels.cuda_graph_launch)):
                continue
            a = args_of(e)
            if a.correlation is not None:
                self.by_corr[a.correlation] = e
            if a.external_id is not None:
                self.by_ext.setdefault(a.external_id, []).append(e)

    def of(self, k: TraceEvent) -> tuple[TraceEvent | None, bool]:
        """(the kernel's launch or None, whether an External id that is its own correlation was set aside)."""
        a = args_of(k)
        launch = self.by_corr.get(a.correlation) if a.correlation is not None else None
        if launch is not None or a.external_id is None:
            return launch, False
        if a.external_id == a.correlation:
            return None, True  # kineto's "launch outside the window": the number is no op's id
        cands = self.by_ext.get(a.external_id, [])
        before = [e for e in cands if e.ts <= k.ts] or cands
        return (max(before, key=lambda e: e.ts) if before else None), False

    def is_graph(self, launch: TraceEvent) -> bool:
        return launch.name.startswith(self.graph_names)


_COMPUTE: dict[LabelSet, re.Pattern[bytes]] = {}


# a compute kernel with a linked launch: (device, kernel start, launch start, kernel duration, kernel name)
ComputeLaunch = tuple[Hashable, float, float, float, str]


def compute_launches(trace: ChromeTrace, labels: LabelSet = LABELS) -> list[ComputeLaunch]:
    """Every non-NCCL kernel with a linked launch: (device, kernel start, launch start, kernel
    duration, kernel name), by kernel start — the GPU's progress through the host's steps, read
    from launches, and what the compute kernels took (``ftrun.check.overlap.gpu_overlap``). A second pass over
    the trace, only for the callers that want it (``scripts/gpu_check.py``): ``extract`` does not
    decode compute kernels."""
    if labels not in _COMPUTE:
        _COMPUTE[labels] = name_filter((), (*labels.cuda_launch, *labels.cuda_graph_launch), cats=(KERNEL,))
    kernels: list[tuple[Hashable, float, int, float, str]] = []
    runtime: list[TraceEvent] = []
    try:
        for e in trace_events(trace, _COMPUTE[labels]):
            if e.ph != "X":
                continue
            cat = e.cat.lower()
            if cat == KERNEL and not e.name.startswith(labels.nccl_kernel_any):
                corr = args_of(e).correlation
                if corr is not None:
                    kernels.append((e.pid, e.ts, corr, e.dur, e.name))
            elif cat in LAUNCH_CATS:
                runtime.append(e)
    except msgspec.DecodeError:
        return []  # extract has already refused a malformed trace
    links = Launches(runtime, labels)
    out = [
        (dev, ts, links.by_corr[corr].ts, dur, name) for dev, ts, corr, dur, name in kernels if corr in links.by_corr
    ]
    out.sort(key=lambda x: x[1])
    return out


class _CommOps:
    """The host spans around an NCCL launch on its thread: record_param_comms, nccl:<op>, c10d::<op>_."""

    def __init__(self, ops: list[TraceEvent], labels: LabelSet) -> None:
        self.rpc = SpanIndex([e for e in ops if e.name == labels.param_comms])
        self.nccl = SpanIndex([e for e in ops if e.name.startswith(labels.nccl_host_prefix)])
        self.c10d = SpanIndex([e for e in ops if e.name.startswith(labels.c10d_prefix)])

        self.indexes = (self.rpc, self.nccl, self.c10d)

    def info(self, launch: TraceEvent, thread: Hashable | None) -> nccl.CommInfo:
        """What the host spans around ``launch`` on ``thread`` (``_launching_thread``) state."""
        got = nccl.UNKNOWN
        rpc = _enclosing(self.rpc, launch, thread)
        if rpc is not None:
            got = param_comms_of(rpc) or got
        for index in (self.nccl, self.c10d):
            op = _enclosing(index, launch, thread)
            if op is not None:
                got = nccl.merge(got, nccl.CommInfo(nccl.normalise(op.name), op.name))
        return got


def link_kernels(
    kernels: list[TraceEvent],
    links: Launches,
    comm_ops: list[TraceEvent],
    labels: LabelSet,
    calls: list[TraceEvent],
    path: Path,
    notes: list[str],
) -> list[Kernel]:
    """NCCL kernels with their launch, what the trace states about them, and the call they ran in."""
    ops = _CommOps(comm_ops, labels)
    call_index = SpanIndex(calls)
    call_no = {id(c): i for i, c in enumerate(calls)}
    host = {thread_of(e) for e in (*comm_ops, *calls)}  # threads with the host spans of collectives
    out: list[Kernel] = []
    early, worst, graph, outside, unnamed = 0, 0.0, 0, 0, 0
    for k in sorted(kernels, key=lambda e: e.ts):
        a = args_of(k)
        launch, own = links.of(k)
        outside += own
        info = nccl.from_args(args_dict(k), "kernel args") or nccl.UNKNOWN
        call, is_graph = None, False
        if launch is not None:
            if k.ts < launch.ts:
                early += 1
                worst = max(worst, launch.ts - k.ts)
            is_graph = links.is_graph(launch)
            graph += is_graph
            # NCCL's nonblocking communicators (torchft's) launch from NCCL's own thread, which kineto
            # never registered: its CUDA calls carry a pthread id, no host span's tid. Such a launch
            # belongs to what its process was running then (``_enclosing_in``).
            foreign = thread_of(launch) not in host
            unnamed += foreign
            thread = _launching_thread(launch, foreign, (call_index, *ops.indexes))
            enclosing = _enclosing(call_index, launch, thread)
            call = call_no[id(enclosing)] if enclosing is not None else None
            info = nccl.merge(info, ops.info(launch, thread))
        if info.kind is None:
            info = nccl.merge(
                info, nccl.CommInfo(nccl.kind_from_kernel_name(k.name, labels.nccl_kernel_any), "kernel name")
            )
        stream = (k.pid, a.stream if a.stream is not None else k.tid)
        out.append(
            Kernel(
                k.name,
                kernel_op(k.name, labels.nccl_kernel_any) or "?",
                span_of(k),
                stream,
                span_of(launch) if launch is not None else None,
                call,
                info,
                is_graph,
            )
        )
    if early:
        notes.append(
            f"{path.name}: {early} NCCL kernel(s) start before their launch (by up to {worst:.1f} us): "
            "the trace's GPU and CPU clocks disagree; queue delays from it are not reliable"
        )
    if graph:
        notes.append(
            f"{path.name}: {graph} NCCL kernel(s) replayed from a CUDA graph (cudaGraphLaunch): linked to the replay, "
            "their queue delay counts from the graph's launch"
        )
    if unnamed:
        notes.append(
            f"{path.name}: {unnamed} NCCL kernel(s) launched from a thread with no host spans (NCCL's launch "
            "thread of a nonblocking communicator): each placed in the one call its process was running at the launch"
        )
    if outside:
        notes.append(
            f"{path.name}: {outside} NCCL kernel(s) launched before the trace's window (External id = their own "
            "correlation): not linked to any launch"
        )
    return out


def group_rank_of(kern: list[Kernel], comm_ops: list[TraceEvent], labels: LabelSet) -> int | None:
    """The rank inside the replica group that torchft's process-group names state (one value), else None."""
    names = {k.comm.pg_name for k in kern if k.comm.pg_name}
    for e in comm_ops:
        if e.name == labels.param_comms:
            info = param_comms_of(e)
            if info is not None and info.pg_name:
                names.add(info.pg_name)
    ranks = {r for r in (nccl.group_rank(n, labels.torchft_pg_name) for n in names) if r is not None}
    return ranks.pop() if len(ranks) == 1 else None


def _launching_thread(launch: TraceEvent, foreign: bool, indexes: tuple[SpanIndex, ...]) -> Hashable | None:
    """The host thread whose spans ``launch`` belongs to: its own; for a ``foreign`` launch (from a
    thread with no host spans), the one thread of its process with a collective's span (any of
    ``indexes``) open at the launch — None when none or several are (which one launched it is not
    stated, so none is guessed)."""
    if not foreign:
        return thread_of(launch)
    open_on = {
        t
        for index in indexes
        for t in index.by_thread
        if isinstance(t, tuple) and t[0] == launch.pid and _enclosing(index, launch, t) is not None
    }
    return open_on.pop() if len(open_on) == 1 else None


def _enclosing(index: SpanIndex, e: TraceEvent, thread: Hashable | None) -> TraceEvent | None:
    """The indexed span on ``thread`` that contains ``e``'s start (latest-starting one); None without a thread."""
    got = index.by_thread.get(thread) if thread is not None else None
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


def kernel_collectives(kern: list[Kernel], calls: list[Allreduce]) -> list[Collective]:
    """One collective per manager.allreduce call (all its kernels); unlinked allreduce kernels alone."""
    linked = any(k.launch is not None for k in kern)
    out: list[Collective] = []
    per_call: dict[int, list[Kernel]] = {}
    for k in kern:
        if k.call is not None:
            per_call.setdefault(k.call, []).append(k)
        elif not linked and k.kind == "allreduce":
            out.append(
                Collective(k.name, k.span, _nelems_shapes(k), k.comm.itemsize, stream=k.stream, kernels=1, kind=k.kind)
            )
    for call, ks in per_call.items():
        ar = calls[call]
        first, last = ks[0], max(ks, key=lambda k: k.span.end)
        kinds = "+".join(dict.fromkeys(k.kind or "?" for k in ks))
        name = f"quantized allreduce ({kinds})" if ar.quantized else kinds
        # the quantized path moves int8/fp8 buffers: their element size is not the tensor's
        items = {k.comm.itemsize for k in ks}
        item = items.pop() if len(items) == 1 and not ar.quantized else None
        span = Span(first.span.ts, last.span.end, first.span.thread)
        out.append(
            Collective(
                name,
                span,
                ar.shapes,
                item,
                launch_ts=first.launch.ts if first.launch else None,
                stream=first.stream,
                kernels=len(ks),
                kind=kinds,
            )
        )
    return out


def _nelems_shapes(k: Kernel) -> tuple[Shape, ...] | None:
    return ((k.comm.in_nelems,),) if k.comm.in_nelems is not None else None
