"""Figures of one observed send or sync (``SendFigures``, ``SyncFigures``), and a worker's totals.

A send's figures are what it moved and how its collectives queued; a sync's, the timing of the
sync and of the send it waited for (``ftrun.check.comm``'s definitions, ``ftrun.check.gpu_comm``'s
commit synchronizes), in milliseconds rounded to the microsecond. Pure functions over the
observe stage's ``Obs``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ftrun.check import comm as communication, gpu_comm
from ftrun.check.observe import Obs
from ftrun.check.result import EventResult, SendFigures, SyncFigures, WorkerTotals


def _r(x: float | None) -> float | None:
    return round(x, 3) if x is not None else None


def send_figures(o: Obs) -> SendFigures | None:
    """None for a send whose communication was not attributed (never: ``comm.attribute`` gives one per send)."""
    sc = o.comm
    if sc is None:
        return None
    q = o.queue
    delayed = q is not None and q.max_delay_ms is not None
    return SendFigures(
        allreduces=len(sc.calls),
        numel=sc.numel,
        bytes=sc.bytes,
        collectives=sum(c is not None for _, c in sc.calls) + len(sc.holds),
        queue_delay_ms=_r(q.max_delay_ms) if q is not None and delayed else None,
        queue_cause=q.cause if q is not None and delayed else None,
    )


def sync_figures(o: Obs) -> SyncFigures:
    """The sync ``o``'s timing, with the send it waited for when that was captured (``o.paired``)."""
    assert o.sync is not None, "sync figures of a send"
    p = o.paired
    t = communication.sync_timing(
        o.sync, p.comm if p else None, p.queue.serialized if p and p.queue else None, p.quorum if p else None
    )
    return SyncFigures(
        exposed_comm_ms=round(t.exposed_ms, 3),
        hidden_comm_ms=_r(t.hidden_ms),
        send_to_done_ms=_r(t.send_to_done_ms),
        comm_union_ms=_r(t.comm_union_ms),
        should_commit_ms=_r(t.should_commit_ms),
        exposed_data_ms=round(t.exposed_data_ms, 3),
        exposed_control_ms=round(t.exposed_control_ms, 3),
        quorum_ms=_r(t.quorum_ms),
        serialized=bool(t.serialized_collectives) if t.serialized_collectives is not None else None,
        serialized_collectives=t.serialized_collectives,
        send_captured=p is not None,
        commit_sync_ms=_r(gpu_comm.commit_sync_ms(o.sync)),
        issuing_comm_ms=_r(t.issuing_ms),
    )


def exposed_past_done(s: SyncFigures) -> bool:
    """The sync's exposed data wait is longer than its whole send→done (beyond the figures'
    rounding): the training thread cannot wait on collectives longer than they were in flight, so
    the two figures are not of one wait and neither is a measurement of it."""
    return s.send_to_done_ms is not None and s.exposed_data_ms > s.send_to_done_ms + 0.001


def _summed(results: Sequence[EventResult], key: str) -> float:
    return round(sum(getattr(r.sync, key) or 0.0 for r in results if r.sync is not None), 3)


def totals(results: Sequence[EventResult]) -> WorkerTotals:
    """One worker's totals (``WorkerReport.totals``): events and verdicts, summed sync figures, bytes sent."""
    syncs = [r for r in results if r.kind == "sync" and r.observed_step is not None]
    return WorkerTotals(
        events=len(results),
        ok=sum(r.ok for r in results),
        failed=sum(not r.ok for r in results),
        sends=sum(r.kind == "send" and r.observed_step is not None for r in results),
        syncs=len(syncs),
        exposed_comm_ms=_summed(results, "exposed_comm_ms"),
        hidden_comm_ms=_summed(results, "hidden_comm_ms"),
        send_to_done_ms=_summed(results, "send_to_done_ms"),
        should_commit_ms=_summed(results, "should_commit_ms"),
        exposed_data_ms=_summed(results, "exposed_data_ms"),
        exposed_control_ms=_summed(results, "exposed_control_ms"),
        bytes=sum(r.send.bytes or 0 for r in results if r.send is not None),
        serialized_syncs=sum(bool(r.sync.serialized) for r in syncs if r.sync is not None),
    )
