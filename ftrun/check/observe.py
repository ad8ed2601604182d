"""Stage 1 of the check, observe: every send and sync in one worker's traces -> ``WorkerObs``.

Each send and sync found in a worker's trace files is placed at the training step whose span
contains its start (``StepIndex``); a send's communication is attributed (``ftrun.check.comm``)
and its collectives' queueing measured (``ftrun.check.gpu_comm``); each event's signature is
read (``ftrun.check.evidence``). A sync pairs with the most recent unsynced send of the same
worker (less than one window w earlier). Captured steps = the contiguous runs of step numbers
present in each file (``runs``). Nothing here is compared with the schedule.

Step numbering for ``ProfilerStep#k`` (ftrun's ``ftrun::step#S`` spans are absolute):
``top`` = k (prof.step() at the loop top, torchft's example), ``end`` = k + 1: ``offset``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable

import msgspec

from ftrun.check import comm as communication, gpu_comm
from ftrun.check.evidence import Signature, restore_signature, send_signature
from ftrun.check.workers import Worker
from ftrun.trace.spans import Send, Span, Sync, TraceSpans

NUMBERINGS = {"top": 0, "end": 1}  # ProfilerStep#k -> step k + offset


class Obs(msgspec.Struct, eq=False):  # eq=False: hashed by identity, later stages key their findings by observation
    """One observed send (``send`` set) or sync (``sync`` set) on a worker."""

    kind: str
    ts: float
    step: int | None
    manager_step: int | None
    trace: TraceSpans
    send: Send | None = None
    sync: Sync | None = None
    sig: Signature | None = None  # what the trace shows it moved (``ftrun.check.evidence``)
    comm: communication.SendComm | None = None  # sends: their communication
    queue: gpu_comm.SendQueue | None = None  # sends: queueing of their collectives
    quorum: Span | None = None  # sends: the quorum wait before it (control plane)
    paired: Obs | None = None  # syncs: the send they wait for


class WorkerObs(msgspec.Struct):
    """What one worker's traces show: its captured step runs and its observations in time order."""

    worker: Worker
    ranges: list[tuple[int, int]]
    obs: list[Obs]


def runs(numbers: Iterable[int]) -> list[tuple[int, int]]:
    """Contiguous runs of step numbers: the captured steps (a file may skip some)."""
    out: list[list[int]] = []
    for n in sorted(set(numbers)):
        if out and n == out[-1][1] + 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return [(a, b) for a, b in out]


class StepIndex:
    """Training step (and manager step) of a timestamp in one trace file (``None`` outside every step span)."""

    def __init__(self, trace: TraceSpans, offset: int) -> None:
        off = offset if trace.step_source == "profiler" else 0
        self.steps = trace.steps
        self.starts = [s.span.ts for s in trace.steps]
        self.off = off
        self.ranges = runs(s.number + off for s in trace.steps)

    def at(self, ts: float) -> tuple[int | None, int | None]:
        i = bisect_right(self.starts, ts) - 1
        if i >= 0 and ts <= self.steps[i].span.end:
            s = self.steps[i]
            return s.number + self.off, s.manager_step
        return None, None

    def step_of(self, ts: float) -> int | None:
        return self.at(ts)[0]


def observe(w: Worker, window: int, offset: int) -> WorkerObs:
    """Every send and sync of ``w``'s traces, placed at its step (``offset``: the numbering), paired."""
    obs: list[Obs] = []
    ranges = []
    for t in w.traces:
        steps = StepIndex(t, offset)
        ranges.extend(steps.ranges)
        comms = communication.attribute(t.sends, t.collectives)
        queues = gpu_comm.send_queues(gpu_comm.queueing(t, comms), len(comms))  # serialized: behind another send's
        for send, sc, queue in zip(t.sends, comms, queues, strict=True):  # one of each per send
            step, manager_step = steps.at(send.span.ts)
            itemsizes = (c.itemsize for _, c in sc.calls if c is not None)
            sig = send_signature([a.shapes for a in send.allreduces], itemsizes)
            obs.append(
                Obs(
                    "send",
                    send.span.ts,
                    step,
                    manager_step,
                    t,
                    send=send,
                    sig=sig,
                    comm=sc,
                    queue=queue,
                    quorum=communication.quorum_before(send, t.quorums, steps.step_of),
                )
            )
        for sync in t.syncs:
            step, manager_step = steps.at(sync.span.ts)
            restored = restore_signature(sync.restore_copies, sync.restore_shapes)
            obs.append(Obs("sync", sync.span.ts, step, manager_step, t, sync=sync, sig=restored))
    obs.sort(key=lambda o: o.ts)
    pending: Obs | None = None
    for o in obs:
        if o.kind == "send":
            pending = o
            continue
        p = pending
        if p is not None and o.step is not None and p.step is not None and not (0 <= o.step - p.step < window):
            p = None
        o.paired, pending = p, None
    return WorkerObs(w, ranges, obs)


def comms_by_file(wobs: list[WorkerObs]) -> dict[str, dict[float, communication.SendComm]]:
    """Each trace file's sends' communication, by send start (for renderers)."""
    out: dict[str, dict[float, communication.SendComm]] = {}
    for wo in wobs:
        for o in wo.obs:
            if o.send is not None and o.comm is not None:
                out.setdefault(str(o.trace.path), {})[o.send.span.ts] = o.comm
    return out
