"""Record every quorum torchft computes for this rank: participants, quorum id, heals.

The Manager asks its client for each new quorum (from its quorum thread); we see each result
(``ftrun.torchft_compat.after_each_quorum``) and keep it. Replica ids are
``<job>_replica<r>:<uuid>`` (torchft appends the uuid), so replica numbers are recoverable.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

from ftrun.layout import Quorum
from ftrun.torchft_compat import after_each_quorum

_REPLICA_RE = re.compile(r"_replica(\d+)(?::|$)")


def replica_of(replica_id: str) -> int | None:
    m = _REPLICA_RE.search(replica_id or "")
    return int(m[1]) if m else None


class QuorumProbe:
    def __init__(self, manager: Any) -> None:
        self._lock = threading.Lock()
        self._new: list[Quorum] = []
        self.last_quorum_id: int | None = None
        after_each_quorum(manager, self.record)

    def record(self, q: Any) -> None:
        ids = list(getattr(q, "replica_ids", []) or [])
        src_rank = getattr(q, "recover_src_replica_rank", None)
        info = Quorum(
            quorum_id=q.quorum_id,
            participants=[replica_of(i) for i in ids],
            replica_rank=q.replica_rank,
            max_step=q.max_step,
            heal=bool(q.heal),
            heal_source=replica_of(ids[src_rank]) if q.heal and src_rank is not None and src_rank < len(ids) else None,
            t=time.time(),
        )
        with self._lock:
            self._new.append(info)

    def take(self) -> list[Quorum]:
        """Quorums computed since the last call (new quorum ids only)."""
        with self._lock:
            new, self._new = self._new, []
        out = []
        for q in new:
            if q.quorum_id != self.last_quorum_id or q.heal:
                out.append(q)
                self.last_quorum_id = q.quorum_id
        return out
