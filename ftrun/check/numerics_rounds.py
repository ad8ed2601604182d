"""The numeric check's rounds: every rank's send and sync sketches grouped into the collectives
they took part in, and the run's heal and commit steps (``ftrun.check.numerics``). Torch-free."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ftrun.layout import EventRecord, RoundNumerics, Sketch

# one collective: the replicas of a round grouped by what they share (``rounds_of``)
RoundKey = tuple[Any, ...]


@dataclass
class ReplicaRound:
    """One rank's view of one round: its send and sync parts and the sync step's record."""

    replica: int
    rank: int
    send: RoundNumerics | None = None
    sync: RoundNumerics | None = None
    commit: bool | None = None
    sync_step: int | None = None
    manager_step_after: int | None = None
    restart: int = 0  # the incarnation that synced it (a relaunched process starts from new parameters)

    @property
    def head(self) -> RoundNumerics:
        head = self.send or self.sync
        assert head is not None, "a ReplicaRound is made from one of its parts"
        return head

    # the parts, for a round a list was filtered on (``sends``: a send with a contribution;
    # ``done``, ``sums``: a sync)
    @property
    def sent(self) -> RoundNumerics:
        assert self.send is not None
        return self.send

    @property
    def contribution(self) -> Sketch:
        assert self.send is not None and self.send.contribution is not None
        return self.send.contribution

    @property
    def synced(self) -> RoundNumerics:
        assert self.sync is not None
        return self.sync


def rounds_of(
    logs: dict[tuple[int, int], list[EventRecord]],
) -> tuple[dict[RoundKey, list[ReplicaRound]], int, dict[str, int]]:
    """Group every rank's rounds into collectives: (rank, fragment, quorum id, manager step,
    occurrence) -> one ``ReplicaRound`` per replica. Also: committed syncs in the logs, and the
    committed ones without a sync sketch (why -> count)."""
    groups: dict[RoundKey, list[ReplicaRound]] = {}
    committed = 0
    missing: dict[str, int] = {}
    for (replica, rank), recs in sorted(logs.items()):
        open_: dict[tuple[Any, ...], ReplicaRound] = {}
        seen: dict[tuple[Any, ...], int] = {}
        for rec in recs:
            parts = rec.numerics or []
            if rec.commit:
                committed += 1
                if not any(p.phase == "sync" for p in parts):
                    why = "no sketch of this sync on the rank"
                    missing[why] = missing.get(why, 0) + 1
            for p in parts:
                key = (rank, p.fragment, p.quorum_id, p.manager_step)
                if p.phase == "send" or key not in open_:
                    occ = seen.get(key, 0)
                    seen[key] = occ + 1
                    rr = ReplicaRound(replica, rank)
                    open_[key] = rr
                    groups.setdefault((*key, occ), []).append(rr)
                rr = open_[key]
                if p.phase == "send":
                    rr.send = p
                else:
                    rr.sync, rr.commit, rr.sync_step, rr.manager_step_after, rr.restart = (
                        p,
                        rec.commit,
                        rec.step,
                        rec.manager_step_after,
                        rec.restart,
                    )
                    del open_[key]
    return groups, committed, missing


def outer_context(
    logs: dict[tuple[int, int], list[EventRecord]],
) -> tuple[dict[tuple[int, int], list[int]], dict[tuple[int, int, int], list[int]]]:
    """Per (replica, rank): the steps whose record shows a heal; per (replica, rank, fragment): the
    steps of its commits (``OuterChecker``: a stage compares with the last commit only if it saw it)."""
    heals: dict[tuple[int, int], list[int]] = {}
    commits: dict[tuple[int, int, int], list[int]] = {}
    for key, recs in logs.items():
        for rec in recs:
            if rec.step is None:
                continue
            if rec.healed or rec.heal_numerics:
                heals.setdefault(key, []).append(rec.step)
            if rec.commit and rec.synced is not None:
                commits.setdefault((*key, rec.synced), []).append(rec.step)
    return heals, commits


def in_time(kv: tuple[RoundKey, list[ReplicaRound]]) -> tuple[float, int, int]:
    """A collective's place in the run: its earliest sync step, then manager step and fragment. A
    round no replica stepped (a relaunched ``ftrun launch`` group whose script counts from 1 again
    logs no step) follows by manager step, after those that did."""
    steps = [r.sync_step for r in kv[1] if r.sync_step is not None]
    return (min(steps) if steps else math.inf, kv[0][3], kv[0][1])
