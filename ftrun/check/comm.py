"""Communication of each send, and how much of it a sync exposed. Pure functions over spans.

Attribution: a send's ``manager.allreduce`` calls, in issue order, each take the earliest
not-yet-taken collective span (backend span or NCCL kernel) that starts at or after the call,
preferring one with the same element count (Gloo spans carry ``Input Dims``; a rank runs its
collectives through several Gloo threads, so plain start order can interleave). An
``ftrun::link::hold`` span (emulated slow link) belongs to the latest send issued before it.

Definitions (all in milliseconds, per sync and the send it waits for):

* ``send_to_done``: first allreduce issued (its ``c10d::allreduce_`` start; the
  ``torchft::manager::allreduce`` start without one) to the end
  of the last attributed collective or hold: how long the fragment was in flight. Where the
  training thread began waiting while it was still in flight, to the end of that wait instead
  when later: the collectives' completion callbacks (torchft's divide) run inside the wait, and
  the fragment is done for training when its average is.
* ``comm_union``: total length of the union of those collective/hold spans.
* ``exposed`` (``blocked``): every moment the training thread waits for the fragment's
  collectives at the sync, one interval: from its first wait — ftrun's ``ftrun::sketch::wait``
  right before perform_sync when the numeric check waited there (``Sync.pre_wait``), else
  ``torchft::local_sgd::perform_sync``'s start, where torchft's ``work.wait()``s come first — to
  the end of ``torchft::local_sgd::wait`` (without one: ``restore_parameters``' start, else
  ``should_commit``'s, else perform_sync's end). What runs inside it (the allreduce callbacks'
  divide, the numeric check's sketch of the SUMs) is the sync's work on the data, counted too.
  The event log's ``exposed_s`` (``ftrun.worker.recorder``) times the same interval.
* ``hidden``: the part of send→done that the training thread spent outside the sync's machinery:
  from the end of the send's own span (``prepare_sync``: computing the pseudo-gradients and issuing
  the allreduces, host work of the training thread) to the blocked interval's start, cut at done:
  ``min(done, blocked start) - max(issue, send end)`` (0 when negative): in-flight time that
  overlapped compute. A τ = 0 sync waits right after its send, so it hides nothing, however long
  the issuing took (torchft's nonblocking NCCL issues each allreduce in milliseconds of host time).
* ``issuing``: the part of send→done before the send's span ended (and before the wait began):
  in flight while the training thread was still issuing the send — neither hidden behind compute
  nor a wait. ``issuing + hidden + exposed`` is send→done for a fragment waited on in flight.
* exposed is never clamped: a sync that blocked longer than its fragment was in flight did not
  wait on the communication all that time (the sync's own work after the data was in, clock
  noise, or a misattributed collective): ``ftrun.check.figures.exposed_past_done`` says so, and
  the views show it as such, not as a figure of exposed communication.
* ``should_commit``: the ``torchft::manager::should_commit`` span.
* exposed, split by plane: ``exposed_data`` = ``exposed`` (the fragment's collectives);
  ``exposed_control`` = the quorum wait before its send (the last
  ``torchft::manager::wait_quorum`` on the send's thread that ended before the send started,
  in the same training step: ``start_quorum`` with ``use_async_quorum=False``) + the sync's
  ``should_commit``. Without a captured send, only ``should_commit`` counts.
* serialized collectives (``serialized_collectives``): counted by ``ftrun.check.gpu_comm``
  (queued behind another send's collective); passed through here.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from typing import Any

import msgspec

from ftrun.check.evidence import numels_of
from ftrun.trace.spans import Collective, Send, Span, Sync


class SendComm(msgspec.Struct):
    issue_ts: float
    send_end_ts: float | None = None  # the end of the send's span (prepare_sync): the training thread free again
    calls: list[tuple[float, Collective | None]] = msgspec.field(default_factory=list)  # (issue ts, collective)
    holds: list[Collective] = msgspec.field(default_factory=list)
    numel: int | None = None
    bytes: int | None = None

    @property
    def spans(self) -> list[Span]:
        return [c.span for _, c in self.calls if c is not None] + [h.span for h in self.holds]

    @property
    def complete(self) -> bool:
        return bool(self.calls) and all(c is not None for _, c in self.calls)

    @property
    def done_ts(self) -> float | None:
        s = self.spans
        return max(x.end for x in s) if s and self.complete else None

    def union_us(self) -> float:
        total, cur_s = 0.0, 0.0
        cur_e: float | None = None  # the merged span being summed: cur_s..cur_e
        for s in sorted(self.spans, key=lambda s: s.ts):
            if cur_e is None or s.ts > cur_e:
                if cur_e is not None:
                    total += cur_e - cur_s
                cur_s, cur_e = s.ts, s.end
            else:
                cur_e = max(cur_e, s.end)
        if cur_e is not None:
            total += cur_e - cur_s
        return total


def attribute(sends: list[Send], collectives: list[Collective]) -> list[SendComm]:
    """One ``SendComm`` per send (same order), collectives attributed as the module says."""
    pool = [c for c in collectives if not c.hold]
    holds = [c for c in collectives if c.hold]
    taken = [False] * len(pool)
    starts = [c.span.ts for c in pool]
    out: list[SendComm] = []
    for send in sends:
        ars = send.allreduces
        sc = SendComm(ars[0].issue_ts if ars else send.span.ts, send.span.end)
        numel: int | None = 0
        nbytes: int | None = 0
        for ar in ars:
            i0 = bisect_right(starts, ar.issue_ts - 1e-3)
            pick = None
            for i in range(i0, len(pool)):
                if taken[i]:
                    continue
                # by element count: a kernel states a flat ``In msg nelems``, a c10d op its tensors' shapes
                if ar.shapes is None or pool[i].shapes is None or _numel(pool[i].shapes) == _numel(ar.shapes):
                    pick = i
                    break
            if pick is None and ar.shapes is not None:  # sizes differ (e.g. quantized): take by order
                pick = next((i for i in range(i0, len(pool)) if not taken[i]), None)
            coll = None
            if pick is not None:
                taken[pick] = True
                coll = pool[pick]
            sc.calls.append((ar.issue_ts, coll))
            n = _numel(ar.shapes)
            numel = numel + n if n is not None and numel is not None else None
            item = coll.itemsize if coll is not None else None
            nbytes = nbytes + n * item if (nbytes is not None and n is not None and item) else None
        sc.numel = numel if ars else None
        sc.bytes = nbytes if ars else None
        out.append(sc)
    for h in holds:
        prior = [sc for sc in out if sc.issue_ts <= h.span.ts]
        if prior:
            prior[-1].holds.append(h)
    return out


def _numel(shapes: Any) -> int | None:
    """Elements in all of ``shapes`` (None when unknown)."""
    if shapes is None:
        return None
    return sum(numels_of(shapes) or ())


def blocked_from(sync: Sync) -> float:
    """Start of the sync's blocking part: ftrun's wait before perform_sync, else perform_sync's start."""
    return sync.pre_wait.ts if sync.pre_wait is not None else sync.span.ts


def blocked_until(sync: Sync) -> float:
    """End of the sync's blocking part (see ``exposed`` in the module docstring)."""
    if sync.wait is not None:
        return sync.wait.end
    if sync.restore is not None:
        return sync.restore.ts
    if sync.should_commit is not None:
        return sync.should_commit.ts
    return sync.span.end


def _start(q: Span) -> float:
    return q.ts


def quorum_before(send: Send, quorums: list[Span], step_of: Callable[[float], int | None]) -> Span | None:
    """The quorum wait of ``send`` (module docstring), or None: the longest ``wait_quorum`` on the
    send's thread in its step before it. torchft (and the numeric check's sketches, which ask
    ``num_participants``) also call ``wait_quorum`` on the quorum once it is formed: those
    microsecond spans come later but are not the wait."""
    i = bisect_right(quorums, send.span.ts, key=_start)  # quorums are sorted by start (TraceSpans.quorums)
    step = step_of(send.span.ts)
    best = None
    for j in range(i - 1, -1, -1):  # backwards from the send, no copy of the list
        q = quorums[j]
        if q.thread != send.span.thread or q.end > send.span.ts:
            continue
        if step_of(q.ts) != step:
            break
        if best is None or q.dur > best.dur:
            best = q
    return best


class SyncTiming(msgspec.Struct, frozen=True):
    exposed_ms: float
    hidden_ms: float | None
    send_to_done_ms: float | None
    comm_union_ms: float | None
    should_commit_ms: float | None
    serialized_collectives: int | None
    quorum_ms: float | None = None  # the send's quorum wait
    exposed_control_ms: float = 0.0
    issuing_ms: float | None = None  # in flight while the training thread still issued the send

    @property
    def exposed_data_ms(self) -> float:
        return self.exposed_ms


def sync_timing(sync: Sync, sc: SendComm | None, serial: int | None, quorum: Span | None = None) -> SyncTiming:
    start, until = blocked_from(sync), blocked_until(sync)
    exposed = (until - start) / 1000.0
    done = sc.done_ts if sc is not None else None
    # Waited on in flight: the fragment reached the training thread when that wait ended (its
    # completion callbacks, torchft's divide, run in it), so send→done spans them as exposed does.
    ready = max(done, until) if done is not None and start < done else done
    s2d = (ready - sc.issue_ts) / 1000.0 if sc is not None and ready is not None else None
    hidden: float | None = None
    issuing: float | None = None
    if sc is not None and done is not None:
        free = max(sc.issue_ts, sc.send_end_ts if sc.send_end_ts is not None else sc.issue_ts)
        hidden = max(0.0, min(done, start) - free) / 1000.0
        issuing = max(0.0, min(done, start, free) - sc.issue_ts) / 1000.0
    quorum_ms = quorum.dur / 1000.0 if quorum is not None else None
    commit_ms = sync.should_commit.dur / 1000.0 if sync.should_commit is not None else None
    return SyncTiming(
        exposed_ms=exposed,
        hidden_ms=hidden,
        send_to_done_ms=s2d,
        comm_union_ms=sc.union_us() / 1000.0 if sc is not None and sc.spans else None,
        should_commit_ms=commit_ms,
        serialized_collectives=serial,
        quorum_ms=quorum_ms,
        exposed_control_ms=(quorum_ms or 0.0) + (commit_ms or 0.0),
        issuing_ms=issuing,
    )
