"""Failed commits: read from the event logs, or inferred from the trace. Torch-free.

When ``should_commit`` returns False, torchft does not advance the manager step, so the next
cycle sends the same fragment again (``ftrun.schedule``). Hence, on one worker:

* event log: a record with ``commit: false`` is a failed commit at its step (``synced`` = fragment);
* inferred from the trace, per sync, first of:

  1. the sync itself: torchft runs the outer step and ``save_parameters`` inside
     ``perform_sync`` only when ``should_commit`` returned True, so a captured ``should_commit``
     with no ``save_parameters`` after it is a failed commit, and one with it is not;
  2. the rotation: a sync of fragment class X followed by a send of class X — the next send on
     the same worker, at most one window w later — instead of the next fragment. The sync's
     class is its paired send's (it waits for that send's allreduces); when the sync's own
     restore evidence names another class, the two disagree and nothing is inferred (a fragment
     mismatch, reported elsewhere). Needs F >= 2 and classes that tell every fragment apart.

A healthy run does not fail commits: ``unexplained`` lists those no fired fault accounts for (a
kill fired at step f explains failures at sync steps from f up to H steps after the faulted
replica rejoined, or to the end when it never did; a ``--fail-commit`` explains its group's
failed commit at the sync it fired in).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import msgspec

from ftrun.check.fired_faults import FiredFaults
from ftrun.layout import EventRecord
from ftrun.schedule import Schedule


class FailedCommit(msgspec.Struct):
    replica: int
    rank: int
    sync_step: int
    fragment: int | None
    source: str  # "event_log" | "inferred"
    evidence: str = "commit: false"  # what showed it (NO_OUTER_STEP, SENT_AGAIN for inferred ones)
    explained: bool = False  # by an injected fault

    def to_json(self) -> dict:
        return {
            "replica": self.replica,
            "rank": self.rank,
            "sync_step": self.sync_step,
            "fragment": self.fragment,
            "source": self.source,
            "evidence": self.evidence,
            "explained_by_fault": self.explained,
        }


NO_OUTER_STEP = "no outer step after should_commit"
SENT_AGAIN = "the same fragment was sent again"


def from_logs(logs: dict[tuple[int, int], list[EventRecord]]) -> list[FailedCommit]:
    """``logs``: (replica, rank) -> event-log records. One entry per ``commit: false`` record."""
    out = []
    for (replica, rank), recs in sorted(logs.items()):
        for rec in recs:
            if rec.commit is False and rec.step is not None:
                out.append(FailedCommit(replica, rank, rec.step, rec.synced, "event_log"))
    return out


class SyncSeen(msgspec.Struct, frozen=True):
    """One observed sync: its step, the class of the send it waited for and of its own restore
    (None = no evidence), and the class of the next send on the worker (None = none captured)."""

    step: int
    paired: Hashable | None
    restored: Hashable | None
    next_send: Hashable | None
    next_send_step: int | None
    committed: bool | None = None  # from the sync's own spans (``ftrun.trace.spans.Sync.committed``)


def infer(syncs: Sequence[SyncSeen], schedule: Schedule, classes_distinct: bool = True) -> list[tuple[int, str]]:
    """(sync step, evidence) of each commit that failed, by the rules in the module docstring."""
    rotation = schedule.fragments >= 2 and classes_distinct
    out = []
    for s in syncs:
        if s.committed is not None:
            if not s.committed:
                out.append((s.step, NO_OUTER_STEP))
            continue
        if not rotation:
            continue
        cls = s.paired if s.paired is not None else s.restored
        if cls is None or s.next_send is None or s.next_send_step is None:
            continue
        if s.paired is not None and s.restored is not None and s.paired != s.restored:
            continue
        if 0 <= s.next_send_step - s.step <= schedule.window and s.next_send == cls:
            out.append((s.step, SENT_AGAIN))
    return out


def explain(commits: list[FailedCommit], faults: FiredFaults, schedule: Schedule) -> None:
    """Mark the failed commits a fired fault accounts for (module docstring)."""
    for c in commits:
        if any(v.replica == c.replica and v.sync_step == c.sync_step for v in faults.votes):
            c.explained = True
            continue
        for m in faults.marks:
            until = (m.rejoined_step + schedule.sync_every) if m.rejoined_step is not None else None
            if m.step <= c.sync_step and (until is None or c.sync_step <= until):
                c.explained = True


def heal_steps(logs: dict[tuple[int, int], list[EventRecord]]) -> dict[int, list[int]]:
    """replica -> the steps at which its event logs record a heal."""
    out: dict[int, list[int]] = {}
    for (r, _), recs in logs.items():
        out.setdefault(r, []).extend(rec.step for rec in recs if rec.healed and rec.step is not None)
    return out


def failed_cycles(
    replica: int,
    failed_commits: list[FailedCommit],
    faults: FiredFaults,
    schedule: Schedule,
    heals: dict[int, list[int]] | None = None,
) -> list[int]:
    """The cycles whose commit failed for ``replica`` — so that it sends the same fragment again —:
    its own failed commits, except those inside steps it lost to a fault and those it healed past
    (a replica whose commit failed while others committed is behind them at the next quorum and
    heals to their manager step, so it moves on with them: ``heals``, replica -> heal steps from
    the event logs, a heal within one window w after the sync), plus the others' failed commits
    while it was away (it healed past them)."""
    healed = (heals or {}).get(replica, [])
    mine = sorted(
        {
            schedule.cycle_of(c.sync_step)
            for c in failed_commits
            if c.replica == replica and not any(c.sync_step < h <= c.sync_step + schedule.window for h in healed)
        }
    )
    lost = faults.lost(replica)
    if lost:
        away = {
            schedule.cycle_of(c.sync_step)
            for c in failed_commits
            if c.replica != replica and any(a <= c.sync_step <= b for a, b in lost)
        }
        mine = sorted({c for c in mine if not any(a <= schedule.sync_step(c) <= b for a, b in lost)} | away)
    return mine
