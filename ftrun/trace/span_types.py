"""The spans ``ftrun.trace.spans`` extracts from a trace (steps, sends, syncs, collectives, NCCL
kernels) and the per-thread index both it and ``ftrun.trace.cuda_link`` look them up in. Torch-free."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable
from operator import attrgetter
from pathlib import Path

import msgspec

from ftrun.trace import nccl
from ftrun.trace.schema import TraceEvent, args_dict

Shape = tuple[int, ...]
_TS = attrgetter("ts")


class Span(msgspec.Struct, frozen=True, gc=False):
    ts: float
    end: float
    thread: Hashable

    @property
    def dur(self) -> float:
        return self.end - self.ts


class StepSpan(msgspec.Struct, frozen=True, gc=False):
    """A training-step span. ``number``: ftrun step S, or the raw k of ProfilerStep#k."""

    number: int
    manager_step: int | None
    span: Span


class Allreduce(msgspec.Struct, frozen=True, gc=False):
    """One ``manager.allreduce`` call: its span, tensor shapes and element size (when known).

    ``issue_ts``: start of its ``c10d::allreduce_`` (the collective really issued; the
    ``manager::allreduce`` span also holds ``wait_quorum``), else the span's start.
    ``quantized``: torchft's quantized allreduce (its c10d ops are an alltoall and an allgather).
    """

    span: Span
    shapes: tuple[Shape, ...] | None
    issue_ts: float = 0.0
    quantized: bool = False


class Send(msgspec.Struct, frozen=True):
    span: Span
    allreduces: tuple[Allreduce, ...]


class Sync(msgspec.Struct, frozen=True):
    span: Span
    wait: Span | None
    restore: Span | None
    should_commit: Span | None
    restore_shapes: tuple[Shape, ...] | None
    commit_syncs: tuple[Span, ...] = ()  # should_commit's stream synchronizes (nested, by prefix)
    restore_copies: int = 0  # aten::copy_ calls in restore_parameters (one per parameter), shapes or not
    # torchft runs the outer optimizer's step (then save_parameters) only when should_commit returned
    # True: True = an outer step after should_commit, False = should_commit without one, None = no
    # should_commit span. The outer step is the evidence: save_parameters is what a stale-originals
    # bug skips on a commit that succeeded (``save_parameters`` counts only where the trace shows no
    # optimizer steps at all)
    committed: bool | None = None
    # ftrun's wait for the same collectives right before perform_sync (``SKETCH_WAIT``), or None
    pre_wait: Span | None = None


class Collective(msgspec.Struct, frozen=True):
    """A span of the collective really running (backend thread, GPU kernel(s), or link hold).

    For kernels: ``launch_ts`` = start of the first kernel's launch (None when unlinked),
    ``stream`` = (device, stream), ``kernels`` = how many kernels it spans, ``kind`` = what the
    trace states it was (``ftrun.trace.nccl.KINDS``, "+"-joined for a call of several kinds).
    """

    name: str
    span: Span
    shapes: tuple[Shape, ...] | None
    itemsize: int | None
    hold: bool = False
    launch_ts: float | None = None
    stream: Hashable | None = None
    kernels: int = 0
    kind: str | None = None


class Kernel(msgspec.Struct, frozen=True):
    """One NCCL kernel. ``op``: the op word of its name (AllReduce, SendRecv, Generic, ...: says
    nothing for generic kernels); ``comm``: what the trace states about it (kind, size, group).

    ``launch``: its launch on a host thread; ``call``: index of the ``torchft::manager::allreduce``
    span (in ``TraceSpans.calls``) its launch ran in; ``graph``: replayed from a CUDA graph.
    """

    name: str
    op: str
    span: Span
    stream: Hashable
    launch: Span | None = None
    call: int | None = None
    comm: nccl.CommInfo = nccl.UNKNOWN
    graph: bool = False

    @property
    def kind(self) -> str | None:
        return self.comm.kind


class TraceSpans(msgspec.Struct):
    path: Path
    step_source: str  # "ftrun" or "profiler"
    steps: list[StepSpan]
    sends: list[Send]
    syncs: list[Sync]
    collectives: list[Collective]
    rank: int | None = None  # distributedInfo.rank: the default group's (global) rank, never a replica
    has_shapes: bool = False
    trace_events: int = 0  # the file's trace events, all kinds
    quorums: list[Span] = msgspec.field(default_factory=list)  # wait_quorum spans, by start
    kernels: list[Kernel] = msgspec.field(default_factory=list)  # every NCCL kernel, by start
    device_copies: int = (
        0  # gpu_user_annotation copies of the spans read here (kineto: innermost annotation only), set aside
    )
    stream_waits: list[Span] = msgspec.field(default_factory=list)  # cudaStreamWaitEvent calls (host)
    notes: list[str] = msgspec.field(default_factory=list)  # what this trace cannot tell, said once
    world_size: int | None = None  # distributedInfo.world_size
    group_rank: int | None = None  # rank inside the replica group, from torchft's process-group name
    # torch.optim's step spans (host), by start: inner steps and, inside perform_sync, the outer one
    optimizer_steps: list[Span] = msgspec.field(default_factory=list)


def thread_of(e: TraceEvent) -> Hashable:
    return (e.pid, e.tid)


def span_of(e: TraceEvent) -> Span:
    return Span(e.ts, e.ts + e.dur, thread_of(e))


def param_comms_of(e: TraceEvent) -> nccl.CommInfo | None:
    return nccl.from_args(args_dict(e), "record_param_comms")


class SpanIndex:
    """Spans of one name, per thread, sorted by start: ``inside(outer)`` finds nested ones."""

    def __init__(self, events: list[TraceEvent]) -> None:
        self.by_thread: dict[Hashable, tuple[list[float], list[TraceEvent]]] = {}
        groups: dict[Hashable, list[TraceEvent]] = {}
        for e in events:  # (_thread inlined: thousands of aten::copy_ per trace)
            g = groups.get((e.pid, e.tid))
            if g is None:
                g = groups[(e.pid, e.tid)] = []
            g.append(e)
        for t, evs in groups.items():
            evs.sort(key=_TS)
            self.by_thread[t] = (list(map(_TS, evs)), evs)

    def inside(self, outer: TraceEvent) -> list[TraceEvent]:
        got = self.by_thread.get(thread_of(outer))
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
