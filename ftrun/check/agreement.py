"""Did all replicas hold the same synced fragment after every commit? Torch-free.

Each rank logs, at a committed sync, a fingerprint of the fragment's new global parameters,
with the manager step the commit produced and the id of the rank's quorum at that step. Ranks
that took part in the same commit must agree bit for bit: torchft averages with one allreduce,
so every participant applies the same outer update. Ranks that missed a commit (dead, healing)
simply have no entry.

One commit is (quorum id, manager step), not the manager step alone: with ``--min-replicas``
below the group count, groups can commit the same manager step in different quorums (a group
left behind, or the last one still running after the others finished, commits alone), and
those are different averages that need not agree. The lighthouse numbers its quorums once for
the whole job and gives a new id whenever membership changes, so equal ids mean the same
members.
"""

from __future__ import annotations

import msgspec

from ftrun.layout import Disagreement, EventRecord, SyncedFingerprint


class Agreement(msgspec.Struct):
    commits_checked: int = 0
    disagreements: list[Disagreement] = msgspec.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.disagreements


def check_agreement(logs: dict[tuple[int, int], list[EventRecord]]) -> Agreement:
    """``logs``: (replica, rank) -> event records. Compares fingerprints per (rank, quorum id,
    manager step)."""
    by_key: dict[tuple[int, int, int], dict[int, tuple[str, int | None]]] = {}  # -> replica -> (fingerprint, fragment)
    for (replica, rank), records in logs.items():
        for rec in records:
            if rec.commit and rec.fingerprint:
                key = (rank, -1 if rec.quorum_id is None else rec.quorum_id, rec.manager_step_after)
                by_key.setdefault(key, {})[replica] = (rec.fingerprint, rec.synced)
    out = Agreement()
    for (rank, qid, manager_step), seen in sorted(by_key.items()):
        if len(seen) < 2:
            continue
        out.commits_checked += 1
        if len(set(seen.values())) > 1:
            replicas = {str(r): SyncedFingerprint(fp, f) for r, (fp, f) in seen.items()}
            out.disagreements.append(Disagreement(rank, manager_step, None if qid < 0 else qid, replicas))
    return out
