"""After a heal: the healed replica's global parameters equal the source's after its last commit
of each fragment (fingerprints, bit for bit), and its first contribution follows the rule.
Torch-free."""

from __future__ import annotations

from collections.abc import Callable

from ftrun.check.numerics_result import Numerics
from ftrun.check.numerics_rounds import ReplicaRound
from ftrun.layout import EventRecord, FirstContribution, HealCheck, RoundNumerics

# ``_Checker.problem``: (round, head, check, expected, observed, error, tolerance, cause, what)
ProblemFn = Callable[
    [ReplicaRound, RoundNumerics, str, float | None, float | None, float | None, float | None, str, str], None
]


def _last_commit(
    logs: dict[tuple[int, int], list[EventRecord]], rank: int, fragment: int, healed: int, source: int | None, at: int
) -> tuple[int, EventRecord] | None:
    """The (replica, sync step's record) of the last commit of ``fragment`` with its fingerprint, on
    ``rank`` of another replica than ``healed``, to a manager step <= ``at``: the global parameters
    a heal at manager step ``at`` received. The ``source``'s own commit when it is the latest; else
    another replica's: a source that itself healed since its last commit of the fragment (a chain
    of faults) holds the globals of a commit it did not make, and the replicas of a quorum agree on
    every commit (``ftrun.check.agreement``)."""
    best: tuple[int, EventRecord] | None = None
    for (replica, r), recs in sorted(logs.items(), key=lambda kv: kv[0][0] != source):  # the source first
        if r != rank or replica == healed:
            continue
        for rec in recs:
            if rec.synced == fragment and rec.commit and rec.fingerprint and (rec.manager_step_after or 0) <= at:
                if best is None or (rec.manager_step_after or 0) > (best[1].manager_step_after or 0):
                    best = (replica, rec)
    return best


def check_heals(logs: dict[tuple[int, int], list[EventRecord]], out: Numerics, problem: ProblemFn) -> None:
    """Each heal's global parameters against the source's last commit of every fragment, bit for
    bit (fingerprints), and the healed replica's first contribution against the rule; an entry per
    heal in ``out.heals``, a mismatch a ``problem``."""
    for (replica, rank), recs in sorted(logs.items()):
        for i, rec in enumerate(recs):
            if not rec.heal_numerics:
                continue
            hn = rec.heal_numerics
            src = rec.healed.source_replica if rec.healed else None
            entry = HealCheck(replica, rank, src, hn.manager_step, rec.step)
            for f, mine in enumerate(hn.fingerprints):
                ref = _last_commit(logs, rank, f, replica, src, hn.manager_step)
                if ref is None:
                    entry.fragments_not_checked.append(f)
                    continue
                (ref_replica, ref_rec) = ref
                entry.fragments_checked += 1
                if mine != ref_rec.fingerprint:
                    entry.params_match = False
                    rr = ReplicaRound(replica, rank, sync_step=rec.step)
                    head = RoundNumerics("heal", f, hn.manager_step, None)
                    problem(
                        rr,
                        head,
                        "heal",
                        None,
                        None,
                        None,
                        None,
                        "the checkpoint transport delivered other parameters",
                        f"after healing from replica {ref_replica}, fragment {f}'s global parameters (fingerprint "
                        f"{mine}) differ from the source's after its commit to manager step "
                        f"{ref_rec.manager_step_after} ({ref_rec.fingerprint})",
                    )
                elif entry.params_match is None:
                    entry.params_match = True
            first = next((p for x in recs[i:] for p in (x.numerics or []) if p.phase == "send"), None)
            if first is not None and first.contribution is not None:
                # the rule: a non-participant contributes zeros; a participant's values are in
                # the SUM, which the round's own check verified (no problem named it)
                zero = first.contribution.norm == 0.0
                flagged = any(
                    p.fragment == first.fragment and p.manager_step == first.manager_step for p in out.problems
                )
                entry.first_contribution = FirstContribution(
                    first.fragment,
                    first.manager_step,
                    first.participating,
                    zero,
                    (not flagged) if first.participating else zero,
                )
            out.heals.append(entry)
