"""Stage 4 of the check, figures: one ``EventResult`` per matched (expected, observed) pair, and
each worker's ``WorkerReport``.

A row says where the event was expected and observed, which fragment the evidence names
(identify stage), its figures (``ftrun.check.figures``), notes on what its send's capture
lacks, and its own verdict (``ftrun.check.problems.event_problem``). Rows are ordered by step,
a send before the sync of the same step.
"""

from __future__ import annotations

from ftrun.check.figures import send_figures, sync_figures, totals
from ftrun.check.identify import Identities
from ftrun.check.match import WorkerMatch
from ftrun.check.observe import Obs
from ftrun.check.problems import event_problem
from ftrun.check.result import EventResult, WorkerReport
from ftrun.schedule import Event, Schedule


def event_results(
    matches: list[WorkerMatch], ids: Identities, schedule: Schedule
) -> tuple[list[EventResult], list[WorkerReport]]:
    """Per worker: one result per matched pair, and the worker's report."""
    results: list[EventResult] = []
    reports: list[WorkerReport] = []
    for m in matches:
        mine = [_result(m, e, o, ids, schedule) for e, o in m.pairs]
        mine.sort(key=lambda r: (r.expected_step or r.observed_step or 0, r.kind == "sync"))
        results.extend(mine)
        w = m.seen.worker
        reports.append(
            WorkerReport(
                replica=w.replica,
                rank=w.rank,
                source=w.source,
                files=[str(t.path) for t in w.traces],
                step_source=w.traces[0].step_source,
                step_ranges=m.seen.ranges,
                failed_cycles=m.failed,
                totals=totals(mine),
                global_rank=w.global_rank,
                world_size=w.world_size,
            )
        )
    return results, reports


def _result(m: WorkerMatch, e: Event | None, o: Obs | None, ids: Identities, schedule: Schedule) -> EventResult:
    w = m.seen.worker
    first = e if e is not None else o
    assert first is not None, "a pair has an expected or an observed side"
    kind = first.kind
    r = EventResult(
        replica=w.replica,
        rank=w.rank,
        kind=kind,
        fragment=None,
        expected_fragment=e.fragment if e else None,
        expected_step=e.step if e else None,
        observed_step=o.step if o else None,
        ok=True,
        manager_step=(o.manager_step if o and o.manager_step is not None else (e.manager_step if e else None)),
        cycle=e.cycle if e else (schedule.cycle_of(o.step) if o and o.step else None),
    )
    identity = ids.of(o) if o is not None else None
    if o is not None and identity is not None:
        r.fragment, r.evidence, r.fragment_checked = identity.fragment, identity.evidence, identity.checked
        r.fragment_basis = identity.basis if identity.fragment is not None else "none"
        r.fragment_candidates = list(identity.candidates) if identity.candidates else None
        r.file, r.ts_us = str(o.trace.path), o.ts
        if o.kind == "send":
            r.send = send_figures(o)
        else:
            r.sync = sync_figures(o)
            r.notes.extend(_capture_notes(m, e, o, schedule))
    r.problem = event_problem(kind, e, o, identity)
    r.ok = r.problem is None
    return r


def _capture_notes(m: WorkerMatch, e: Event | None, o: Obs, schedule: Schedule) -> list[str]:
    """What a sync's row cannot show because its send's capture lacks it."""
    p = o.paired
    if p is None:
        send_step = schedule.send_step(e.cycle) if e else None
        lo = min((lo for lo, hi in m.seen.ranges if o.step is not None and lo <= o.step <= hi), default=None)
        if send_step is not None and lo is not None and send_step < lo:
            return ["send not captured (before the profiled steps)"]
        return ["no send before this sync"]
    if p.comm is not None and not p.comm.complete and p.trace.collectives:
        return ["collectives of its send not all captured"]
    return []
