"""Queueing of collectives, and what a sync's blocking is made of. Pure functions over spans.

Meaningful on Gloo and CUDA traces alike (``ftrun.check.comm`` attributes collectives to sends;
this module only reads those attributions):

* **queue delay** of a collective: its start minus its issue — the ``cuda_runtime`` launch of
  its first kernel on CUDA, the ``c10d`` call otherwise. Its **cause**:
  ``previous collective`` when the collective before it on the same stream (CUDA) or the same
  rank (Gloo) was still running at the issue and its end pins the start: the start lies within
  ``EARLY_US`` before to ``pin`` after that end. On CUDA the window is −15 µs … +300 µs, fitted
  to real clocks: on real traces queued kernels started up to 13 µs *before* the previous
  kernel on their stream ended (clock rounding, programmatic dependent launch: B200 0.1–3.7 µs,
  V100 13 µs), and back-to-back NCCL kernels started a median 10 µs, p99 84 µs, max 264 µs
  after it. On Gloo (host threads waking up) −15 µs … +1 ms;
  otherwise ``stream wait`` when the launching thread called ``cudaStreamWaitEvent`` inside
  the same ``manager.allreduce`` call before the launch (ProcessGroupNCCL makes the NCCL
  stream wait for the compute stream: the kernel waited for queued compute work);
  otherwise ``None`` (launch latency, or not observable).
* **serialized** collective: one whose start was held until a collective of *another* send
  (another fragment's, or the same fragment's earlier round) ended — issued before that end,
  started within ``pin_us`` after it, and more than ``pin_us`` after its own issue. A fragment's
  own collectives running one after another is not serialization; queueing behind another
  send's is the cost torchft's authors saw (a wait on one allreduce holding up the next one
  issued on the same NCCL stream). On CUDA the blocker must be on the same stream. Kernels that
  overlap their predecessor by a few µs are held the same way (the window above).
* ``commit_sync_ms``: the ``torchft::manager::should_commit::*synchronize`` spans nested in
  ``should_commit``. On CUDA, ``work.wait()`` only makes the compute stream wait, so the CPU
  blocks here, inside should_commit, not in ``perform_sync``'s wait: shown apart from exposed.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Hashable, Sequence

import msgspec

from ftrun.check.comm import SendComm
from ftrun.trace.cuda_link import ComputeLaunch
from ftrun.trace.spans import Collective, Span, StepSpan, Sync, TraceSpans

PIN_KERNEL_US = 300.0  # a stream's next queued kernel starts within 264 us of the last one's end (real traces' max)
PIN_HOST_US = 1000.0  # a Gloo worker thread wakes up within a millisecond on a loaded host
EARLY_US = 15.0  # ... and may start up to 13 us before it ends (real V100 traces): clock rounding, PDL


class Queued(msgspec.Struct, frozen=True):
    """One attributed collective's queueing. ``send``: index of its send in the trace."""

    send: int
    issue_ts: float
    start_ts: float
    cause: str | None
    blocker_send: int | None  # the send whose collective pinned the start (None: none)
    serialized: bool

    @property
    def delay_us(self) -> float:
        return self.start_ts - self.issue_ts


def _pin(c: Collective) -> float:
    return PIN_KERNEL_US if c.kernels else PIN_HOST_US


def queueing(trace: TraceSpans, comms: list[SendComm]) -> list[Queued]:
    """Queueing of every attributed collective of ``trace`` (``comms``: one per send, same order)."""
    owner: dict[int, int] = {}
    issue_of: dict[int, float] = {}
    for i, sc in enumerate(comms):
        for issue, c in sc.calls:
            if c is not None:
                owner[id(c)] = i
                issue_of[id(c)] = c.launch_ts if c.launch_ts is not None else issue
    pool = sorted((c for c in trace.collectives if not c.hold), key=lambda c: c.span.ts)
    longest = max((c.span.end - c.span.ts for c in pool), default=0.0)
    calls = [a.span for s in trace.sends for a in s.allreduces]
    out: list[Queued] = []
    for k, c in enumerate(pool):
        if id(c) not in owner:
            continue
        issue, start, pin = issue_of[id(c)], c.span.ts, _pin(c)
        blocker = _blocker(pool, k, issue, pin, longest)
        cause, bsend, serial = None, None, False
        if blocker is not None:
            cause = "previous collective"
            bsend = owner.get(id(blocker))
            serial = bsend is not None and bsend != owner[id(c)] and start - issue > pin
        elif c.launch_ts is not None and _stream_wait_before(trace.stream_waits, calls, c.launch_ts):
            cause = "stream wait"
        out.append(Queued(owner[id(c)], issue, start, cause, bsend, serial))
    return out


def _blocker(pool: list[Collective], k: int, issue: float, pin: float, longest: float) -> Collective | None:
    """The collective before ``pool[k]`` (same stream on CUDA) running at ``issue`` whose end pins the start.
    ``longest``: the pool's longest span: one that starts before ``start - pin - longest`` ends too
    early to pin it, and so do all before it (the pool is sorted by start), so the scan stops there."""
    c = pool[k]
    start = c.span.ts
    too_early = start - pin - longest
    for j in range(k - 1, max(-1, k - 64), -1):
        p = pool[j]
        if p.span.ts < too_early:
            return None
        if c.stream is not None and p.stream is not None and p.stream != c.stream:
            continue
        if p.span.end > issue and -EARLY_US <= start - p.span.end <= pin:
            return p
    return None


def _stream_wait_before(waits: list[Span], calls: list[Span], launch_ts: float) -> bool:
    for call in calls:
        if call.ts <= launch_ts <= call.end:
            return any(w.thread == call.thread and call.ts <= w.ts <= launch_ts for w in waits)
    return False


class SendQueue(msgspec.Struct, frozen=True):
    max_delay_ms: float | None
    cause: str | None  # cause of the largest delay
    serialized: int


def send_queues(queued: list[Queued], sends: int) -> list[SendQueue]:
    """``send_queue`` of every send ``0 .. sends - 1``, in one pass over ``queued``."""
    mine: list[list[Queued]] = [[] for _ in range(sends)]
    for q in queued:
        mine[q.send].append(q)
    return [_summary(m) for m in mine]


def send_queue(queued: list[Queued], send: int) -> SendQueue:
    """The queueing of send ``send``'s collectives: its largest delay, that delay's cause, how many were serialized."""
    return _summary([q for q in queued if q.send == send])


def _summary(mine: list[Queued]) -> SendQueue:
    if not mine:
        return SendQueue(None, None, 0)
    worst = max(mine, key=lambda q: q.delay_us)
    return SendQueue(worst.delay_us / 1000.0, worst.cause, sum(q.serialized for q in mine))


def commit_sync_ms(sync: Sync) -> float | None:
    """Total of should_commit's stream synchronizes (None without a should_commit span)."""
    if sync.should_commit is None:
        return None
    return sum(s.dur for s in sync.commit_syncs) / 1000.0


def _step_at(steps: Sequence[StepSpan], ts: float) -> int | None:
    for s in steps:
        if s.span.ts <= ts <= s.span.end:
            return s.number
    return None


def kernel_steps(trace: TraceSpans, compute: list[ComputeLaunch]) -> list[tuple[int | None, int | None]]:
    """Per linked NCCL kernel: (host step of its launch; host step of the launch of the last other
    kernel on its device that started at or before it). ``compute``: ``spans.compute_launches``
    of the same trace. Both from launches: kineto copies no step span to the GPU side to place
    GPU work with. A second step later than the first = when the NCCL kernel started, the device
    was already running work launched in a later step: it ran behind the compute backlog of the
    steps after its launch. (None, ...): launched outside every step; (..., None): no other
    kernel ran before it on its device."""
    marks: dict[Hashable, tuple[list[float], list[float]]] = {}
    for dev, start, launch, *_ in compute:
        got = marks.setdefault(dev, ([], []))
        got[0].append(start)
        got[1].append(launch)
    out = []
    for k in trace.kernels:
        if k.launch is None:
            continue
        dev_step = None
        on_device = marks.get(k.stream[0] if isinstance(k.stream, tuple) else None)
        if on_device:
            i = bisect_right(got[0], k.span.ts) - 1
            if i >= 0:
                dev_step = _step_at(trace.steps, got[1][i])
        out.append((_step_at(trace.steps, k.launch.ts), dev_step))
    return out
