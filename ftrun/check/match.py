"""Stage 3 of the check, expect/match: what each worker should have shown, paired with what it
showed -> ``WorkerMatch``.

The expected events are ``ftrun.schedule.Schedule.events`` (never re-derived here) restricted to
the captured steps of each worker, outside the steps it lost to a fault, and shifted by the
cycles in which no replica group committed (``ftrun.check.commits``' heal model over the failed
commits: event log, else inferred here from the trace, which needs the identify stage's classes;
a group that failed alone heals from a peer and is not shifted). ``pair`` matches expected with observed: same kind and
step, then the nearest within a window; what is left over is missing or unexpected.
``choose_numbering`` takes the ``ProfilerStep`` numbering the traces prove
(``ftrun.check.numbering``); it never picks one because it matches more.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

import msgspec

from ftrun.check import commits as commit_checks
from ftrun.check.fired_faults import FiredFaults
from ftrun.check.identify import Identities, Pair, RunIdentities
from ftrun.check.numbering import NumberingProof
from ftrun.check.observe import NUMBERINGS, Obs, WorkerObs, observe
from ftrun.check.result import StepNumbering
from ftrun.check.workers import Worker
from ftrun.errors import NotChecked
from ftrun.schedule import Event, Schedule


class WorkerMatch(msgspec.Struct):
    """One worker's expectations and the (expected, observed) pairs; ``None`` on a side: missing / unexpected."""

    seen: WorkerObs
    failed: list[int]  # cycles no group committed (the heal model's, ``commit_checks``): their fragment is sent again
    lost: list[tuple[int, int]]  # steps lost to a fault: nothing expected
    expected: list[Event]
    pairs: list[Pair] = msgspec.field(default_factory=list)


def expected_events(
    schedule: Schedule, ranges: Sequence[tuple[int, int]], failed: Sequence[int], lost: Sequence[tuple[int, int]]
) -> list[Event]:
    """Expected events inside the captured steps, outside the steps lost to a fault."""
    last = max((hi for _, hi in ranges), default=0)
    inside, gone = _Steps(ranges), _Steps(lost)
    return [e for e in schedule.events(last, failed_cycles=failed) if inside.has(e.step) and not gone.has(e.step)]


class _Steps:
    """Membership in a union of inclusive step ranges, by bisection (a large trace has thousands)."""

    def __init__(self, ranges: Sequence[tuple[int, int]]) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        for lo, hi in sorted(ranges):
            if self.ends and lo <= self.ends[-1]:
                self.ends[-1] = max(self.ends[-1], hi)
            else:
                self.starts.append(lo)
                self.ends.append(hi)

    def has(self, step: int) -> bool:
        i = bisect_right(self.starts, step) - 1
        return i >= 0 and step <= self.ends[i]


def expect(seen: WorkerObs, schedule: Schedule, failed: list[int], lost: Sequence[tuple[int, int]]) -> WorkerMatch:
    return WorkerMatch(seen, failed, list(lost), expected_events(schedule, seen.ranges, failed, lost))


def pair(expected: Sequence[Event], obs: Sequence[Obs], window: int) -> list[Pair]:
    """Pair expected events with observed ones: same step, then nearest within a window."""
    by_key: dict[tuple[str, int | None], list[Obs]] = {}
    for o in obs:
        by_key.setdefault((o.kind, o.step), []).append(o)
    left_e: list[Event] = []
    pairs: list[Pair] = []
    for e in expected:
        got = by_key.get((e.kind, e.step))
        if got:
            pairs.append((e, got.pop(0)))
        else:
            left_e.append(e)
    left_o = [o for lst in by_key.values() for o in lst]
    for e in left_e:
        near = [o for o in left_o if o.kind == e.kind and o.step is not None and abs(o.step - e.step) < window]
        if near:
            o = min(near, key=lambda o: abs((o.step or 0) - e.step))  # every one in near has a step
            left_o.remove(o)
            pairs.append((e, o))
        else:
            pairs.append((e, None))
    pairs.extend((None, o) for o in left_o)
    return pairs


def choose_numbering(
    workers: list[Worker],
    schedule: Schedule,
    failed: dict[tuple[int, int], list[int]],
    requested: str,
    faults: FiredFaults,
    proof: NumberingProof,
) -> tuple[int, StepNumbering, list[str]]:
    """The ``ProfilerStep`` offset, how it was chosen (the report's ``step_numbering``) and the
    run problems of the choice. Only evidence chooses (``ftrun.check.numbering``): a numbering
    the traces prove is used, and one asked for that they contradict is a problem; ``auto``
    without proof raises ``NotChecked`` with both candidates' fits (a fit is no proof)."""
    info = StepNumbering(requested, proof.evidence, proof.numbering is not None)
    if proof.absolute:
        info.used, info.proven = "ftrun::step", True
        return 0, info, []
    if proof.numbering is not None:
        info.used = proof.numbering
        problems = []
        if requested not in ("auto", proof.numbering):
            problems.append(
                f"--step-numbering {requested} contradicts the trace ({proof.evidence}: numbering "
                f"'{proof.numbering}'); events checked with '{proof.numbering}'"
            )
        return NUMBERINGS[proof.numbering], info, problems
    if proof.conflict:
        used = requested if requested != "auto" else "top"
        info.used = used
        return NUMBERINGS[used], info, [f"step numbering: {proof.evidence}"]
    if requested != "auto":
        info.used = requested
        return NUMBERINGS[requested], info, []
    scores = {name: _fit(workers, schedule, failed, off, faults) for name, off in NUMBERINGS.items()}
    raise NotChecked(
        f"step numbering not proven: {proof.evidence}; expected events matched: "
        + ", ".join(f"{scores[n]} under '{n}'" for n in NUMBERINGS)
        + ". A fit is no proof (a schedule shifted by one step fits the other numbering): give "
        "--step-numbering top (prof.step() at the loop's top, as torchft's example) or end"
    )


def _fit(
    workers: list[Worker],
    schedule: Schedule,
    failed: dict[tuple[int, int], list[int]],
    offset: int,
    faults: FiredFaults,
) -> int:
    """How many observed events sit where expected under ``offset`` (less those outside every step)."""
    n = 0
    for w in workers:
        seen = observe(w, schedule.window, offset)
        exp = {
            (e.kind, e.step)
            for e in expected_events(schedule, seen.ranges, failed[(w.replica, w.rank)], faults.lost(w.replica))
        }
        n += sum((o.kind, o.step) in exp for o in seen.obs) - sum(o.step is None for o in seen.obs)
    return n


def unseen_syncs(seen: WorkerObs, schedule: Schedule) -> bool:
    """Does a sync fall before or between the worker's captured steps (its commit unseen)?"""
    last = max((hi for _, hi in seen.ranges), default=0)
    steps = range(schedule.window, last + 1, schedule.window)
    return any(not any(lo <= s <= hi for lo, hi in seen.ranges) for s in steps)


def syncs_seen(seen: WorkerObs, ids: RunIdentities) -> list[commit_checks.SyncSeen]:
    """Each observed sync with the classes of its send, its restore and the next send."""
    out = []
    obs = sorted(seen.obs, key=lambda o: o.ts)
    for i, o in enumerate(obs):
        if o.sync is None or o.step is None:
            continue
        nxt = next((x for x in obs[i + 1 :] if x.kind == "send"), None)
        out.append(
            commit_checks.SyncSeen(
                o.step,
                ids.cls(o.paired),
                ids.cls(o),
                ids.cls(nxt),
                nxt.step if nxt is not None else None,
                o.sync.committed,
            )
        )
    return out


def infer_failed(
    matches: list[WorkerMatch],
    logged: set[int],
    ids: RunIdentities,
    model: commit_checks.CommitModel,
    commits: Sequence[commit_checks.FailedCommit],
) -> list[tuple[WorkerMatch, int, str]]:
    """Failed commits of the replicas without an event log, inferred from their traces:
    (worker, sync step, how). With ``commits`` (the logged ones) and the stalls the traces show
    (``commit_checks.outcomes``), the heal model
    (``model``) then fixes every worker's repeating cycles and expectations: a group that failed
    alone heals and follows its peers, so a failure moves the schedule of all or none."""
    schedule = model.schedule
    inferred: list[tuple[WorkerMatch, int, str]] = []
    evidence: dict[int, bool] = {}
    for m in matches:
        for o in m.seen.obs:
            if o.sync is not None and o.sync.committed and o.step is not None:
                model.saw_commit(m.seen.worker.replica, o.step)
    for m in matches:
        if m.seen.worker.replica in logged:
            continue  # the event log says which commits failed
        syncs = syncs_seen(m.seen, ids)
        inferred += [(m, s, how) for s, how in commit_checks.infer(syncs, schedule, ids.distinct)]
        evidence |= commit_checks.outcomes(syncs, schedule, ids.distinct)  # stalls seen: a fragment sent again
    if not inferred and not evidence:
        return inferred
    job = list(commits) + [
        commit_checks.FailedCommit(m.seen.worker.replica, m.seen.worker.rank, step, None, "inferred", how)
        for m, step, how in inferred
    ]
    for m in matches:
        m.failed = model.stalled(m.seen.worker.replica, job, evidence)
        m.expected = expected_events(schedule, m.seen.ranges, m.failed, m.lost)
    return inferred


def inferred_commits(inferred: list[tuple[WorkerMatch, int, str]], ids: Identities) -> list[commit_checks.FailedCommit]:
    """``infer_failed``'s findings as failed commits, each with the fragment its sync moved (once labelled)."""
    out = []
    for m, step, how in inferred:
        sync = next((o for o in m.seen.obs if o.kind == "sync" and o.step == step), None)
        frag = ids.of(sync).fragment if sync is not None else None
        out.append(commit_checks.FailedCommit(m.seen.worker.replica, m.seen.worker.rank, step, frag, "inferred", how))
    return out
