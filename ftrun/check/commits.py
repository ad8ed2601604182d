"""Failed commits: read from the event logs, or inferred from the trace; and what they do to
the schedule (``ftrun.schedule.rounds``, torchft's heal). Torch-free.

``should_commit`` is a vote inside one replica group. A group whose commit failed keeps its
manager step; at the next send's quorum it is behind the groups that committed, heals from one
of them (manager step included) and sends their fragment: it does not retry its own. Only a
cycle in which no group of the quorum committed repeats its fragment, for every group
(``CommitModel.stalled``). Hence, on one worker:

* event log: a record with ``commit: false`` is a failed commit at its step (``synced`` = fragment,
  ``commit_error``: the rank's torchft error behind it, ``FailedCommit.torchft_error``); a
  ``healed`` record within one window after it says some group committed;
* inferred from the trace, per sync, first of:

  1. the sync itself: torchft runs the outer optimizer's step inside ``perform_sync`` only when
     ``should_commit`` returned True, so a captured ``should_commit`` with no outer step after it
     is a failed commit, and one with it is not (``ftrun.trace.spans.Sync.committed``; not
     ``save_parameters``, which a bug may skip on a commit that succeeded);
  2. the rotation: a sync of fragment class X followed by a send of class X — the next send on
     the same worker, at most one window w later — instead of the next fragment: the job
     stalled there, so this group's commit failed too. The sync's class is its paired send's (it
     waits for that send's allreduces); when the sync's own restore evidence names another
     class, the two disagree and nothing is inferred (a fragment mismatch, reported elsewhere).
     Needs F >= 2 and classes that tell every fragment apart. The same comparison after a failed
     commit seen by (1) shows a stall (``outcomes``); a next send that moved on proves nothing
     where every known group failed (no unseen committer is assumed from a trace).

A healthy run does not fail commits: ``unexplained`` lists those no fired fault accounts for (a
kill fired at step f explains failures at sync steps from f up to H steps after the faulted
replica rejoined, or to the end when it never did, and on the other replicas from the faulted
one's last sync before f, ``last_sync_before``; a ``--fail-commit`` explains its group's failed
commit at the sync it fired in).
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping, Sequence

import msgspec

from ftrun.check.fired_faults import FiredFaults
from ftrun.layout import EventRecord, JsonObject, clip_error
from ftrun.schedule import ReleaseBehaviour, Schedule, rounds, stalled


class FailedCommit(msgspec.Struct):
    replica: int
    rank: int
    sync_step: int
    fragment: int | None
    source: str  # "event_log" | "inferred"
    evidence: str = "commit: false"  # what showed it (NO_OUTER_STEP, SENT_AGAIN for inferred ones)
    explained: bool = msgspec.field(default=False, name="explained_by_fault")  # by an injected fault
    # the rank's own torchft error behind it (event log's ``commit_error``; None: none logged)
    torchft_error: str | None = None

    def to_json(self) -> JsonObject:
        """The record as report.json writes it (``explained`` as ``explained_by_fault``)."""
        out: JsonObject = msgspec.to_builtins(self)
        return out


NO_OUTER_STEP = "no outer step after should_commit"
SENT_AGAIN = "the same fragment was sent again"


def from_logs(logs: dict[tuple[int, int], list[EventRecord]]) -> list[FailedCommit]:
    """``logs``: (replica, rank) -> event-log records. One entry per ``commit: false`` record."""
    out = []
    for (replica, rank), recs in sorted(logs.items()):
        for rec in recs:
            if rec.commit is False and rec.step is not None:
                err = clip_error(rec.commit_error) if isinstance(rec.commit_error, str) else None
                out.append(FailedCommit(replica, rank, rec.step, rec.synced, "event_log", torchft_error=err or None))
    return out


# the most distinct torchft errors one line names (``torchft_errors``)
ERRORS_SHOWN = 3


def torchft_errors(commits: Sequence[FailedCommit]) -> str | None:
    """The distinct torchft errors behind ``commits``, in order of first failure, as one phrase:
    ``torchft: E1 | E2 | E3 | and 2 other error(s)`` (at most ``ERRORS_SHOWN`` named, each one
    bounded line); None when none was logged."""
    distinct = list(
        dict.fromkeys(c.torchft_error for c in sorted(commits, key=lambda c: c.sync_step) if c.torchft_error)
    )
    if not distinct:
        return None
    shown = distinct[:ERRORS_SHOWN]
    more = len(distinct) - len(shown)
    return "torchft: " + " | ".join(shown + ([f"and {more} other error(s)"] if more else []))


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


def outcomes(syncs: Sequence[SyncSeen], schedule: Schedule, classes_distinct: bool = True) -> dict[int, bool]:
    """cycle -> False for each failed or unlabelled sync after which the worker sent the sync's
    class again (the job stalled: no group committed). A next send of another class is no
    evidence that some group committed: where every known group failed, only an unseen group's
    commit (a heal, which the event log records) would explain it, and a release that moved on
    after a failed commit is a bug the check must name. Empty without classes that tell the
    fragments apart."""
    if schedule.fragments < 2 or not classes_distinct:
        return {}
    out: dict[int, bool] = {}
    for s in syncs:
        cls = s.paired if s.paired is not None else s.restored
        if s.committed is True or cls is None or s.next_send is None or s.next_send_step is None:
            continue
        if s.paired is not None and s.restored is not None and s.paired != s.restored:
            continue
        if 0 <= s.next_send_step - s.step <= schedule.window and s.next_send == cls:
            out[schedule.cycle_of(s.step)] = False
    return out


def explain(commits: list[FailedCommit], faults: FiredFaults, schedule: Schedule) -> None:
    """Mark the failed commits a fired fault accounts for (module docstring)."""
    for c in commits:
        if any(v.replica == c.replica and v.sync_step == c.sync_step for v in faults.votes):
            c.explained = True
            continue
        for m in faults.marks:
            until = (m.rejoined_step + schedule.sync_every) if m.rejoined_step is not None else None
            first = m.step if c.replica == m.replica else last_sync_before(m.step, schedule)
            if first <= c.sync_step and (until is None or c.sync_step <= until):
                c.explained = True


def last_sync_before(step: int, schedule: Schedule) -> int:
    """The last sync step before ``step``: the faulted group's last sync when a fault fired at the
    start of ``step``. The group finished it, but its peers need not have: replicas drift apart
    between syncs, and a peer still reading the group's part of that sync's collective loses it
    when the group dies (Gloo: "Connection reset by peer", "pair closure")."""
    return schedule.sync_step(schedule.cycle_of(step) - 1)


def heal_steps(logs: dict[tuple[int, int], list[EventRecord]]) -> dict[int, list[int]]:
    """replica -> the steps at which its event logs record a heal."""
    out: dict[int, list[int]] = {}
    for (r, _), recs in logs.items():
        out.setdefault(r, []).extend(rec.step for rec in recs if rec.healed and rec.step is not None)
    return out


class CommitModel:
    """The job's commits as the heal model reads them: ``stalled(replica, commits)`` gives the
    cycles after which ``replica``'s fragment repeats (``Schedule.events``'s ``failed_cycles``).

    ``groups``: the job's replica groups known to the check (traced, logged, the manifest's);
    one with no failed commit at a cycle is taken to have committed. ``faults``: the steps each
    group lost (not in those cycles' quorums). ``heals``: replica -> heal steps from the event
    logs. ``behaviour``: the release's (``ftrun.torchft_compat.release_behaviour``).
    """

    def __init__(
        self,
        schedule: Schedule,
        faults: FiredFaults,
        behaviour: ReleaseBehaviour,
        heals: Mapping[int, list[int]] | None = None,
        groups: Collection[int] = (),
    ) -> None:
        self.schedule, self.faults, self.behaviour = schedule, faults, behaviour
        self.heals = dict(heals or {})
        self.groups = set(groups)
        self.seen_committed: dict[int, set[int]] = {}  # cycle -> groups seen committing (``saw_commit``)

    def saw_commit(self, replica: int, sync_step: int) -> None:
        """A commit that succeeded, seen (an outer step in the trace, ``commit: true`` logged): at
        that cycle the job moved on, whatever another worker's next send suggests."""
        self.seen_committed.setdefault(self.schedule.cycle_of(sync_step), set()).add(replica)

    def saw_logged(self, logs: dict[tuple[int, int], list[EventRecord]]) -> None:
        """``saw_commit`` for every ``commit: true`` record of the event logs."""
        for (replica, _), recs in logs.items():
            for rec in recs:
                if rec.commit is True and rec.step is not None:
                    self.saw_commit(replica, rec.step)

    def _away(self, group: int, cycle: int) -> bool:
        at = self.schedule.sync_step(cycle)
        return any(a <= at <= b for a, b in self.faults.lost(group))

    def stalled(
        self, replica: int, commits: Sequence[FailedCommit], evidence: Mapping[int, bool] | None = None
    ) -> list[int]:
        """``replica``'s repeating cycles, given the job's failed ``commits`` and ``evidence``
        (cycle -> did the job move on, from the traces: ``outcomes``); a heal logged within one
        window after a group's failed commit says the job moved on."""
        # a worker that sent its fragment again where a group is seen committing deviates itself
        outcome = {c: v for c, v in (evidence or {}).items() if v or not self.seen_committed.get(c)}
        w = self.schedule.window
        for c in commits:
            if any(c.sync_step < h <= c.sync_step + w for h in self.heals.get(c.replica, [])):
                outcome[self.schedule.cycle_of(c.sync_step)] = True
        cycles = [self.schedule.cycle_of(c.sync_step) for c in commits] + list(outcome)
        if not cycles:
            return []
        failed: dict[int, set[int]] = {}
        for c in commits:
            failed.setdefault(self.schedule.cycle_of(c.sync_step), set()).add(c.replica)
        groups = self.groups | {replica} | {c.replica for c in commits}
        played = rounds(max(cycles) + 2, groups, failed, self.behaviour, away=self._away, outcome=outcome)
        return stalled(played, replica, self.behaviour)


def failed_cycles(
    replica: int,
    failed_commits: list[FailedCommit],
    faults: FiredFaults,
    schedule: Schedule,
    heals: dict[int, list[int]] | None = None,
    behaviour: ReleaseBehaviour | None = None,
    groups: Collection[int] = (),
) -> list[int]:
    """``CommitModel(...).stalled(replica, failed_commits)``: the cycles after which ``replica``
    sends the same fragment again — those in which no group of the quorum committed, never merely
    its own failed commits (it heals past them when a peer committed)."""
    behaviour = behaviour or ReleaseBehaviour("torchft")
    return CommitModel(schedule, faults, behaviour, heals, groups).stalled(replica, failed_commits)
