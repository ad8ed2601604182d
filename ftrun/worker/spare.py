"""A warm spare's side of ``ftrun train --spares N``: wait, outside torchft, for a replica id. Torch-free.

A spare is a replica-group job like any other (torchrun, the same worker), started with
``FTRUN_SPARE=K`` (its slot) instead of a replica id. Its ranks import torch and torchft, then
each touches ``spares/spare{K}.rank{g}.ready`` and waits for ``spares/spare{K}.json``
(``SpareAssignment``), which only the parent writes, once, atomically (``write_assignment``):
the replica id the spare takes over and the incarnation it runs as. No torchft Manager exists
before that, so a waiting spare is never a quorum participant; after it, the ranks run exactly
as a relaunched group (``FTRUN_RESTART`` = the incarnation): they join, heal from a peer and
rejoin the run's step numbering (``ftrun.worker.rejoin``).
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from ftrun import layout
from ftrun.output import atomic_write
from ftrun.worker.park import park_until

ENV_SPARE = "FTRUN_SPARE"  # the spare's slot; set instead of REPLICA_GROUP_ID
SPARES = "spares"  # run-dir folder of the assignments and readiness marks
MAX_ASSIGNMENT_BYTES = 4096  # an assignment is one short JSON object


class SpareAssignment(msgspec.Struct, forbid_unknown_fields=True):
    """``spares/spare{slot}.json``: the parent's decision that spare ``slot`` now is replica
    group ``replica``, incarnation ``incarnation`` (the group's relaunch count), at unix time ``t``."""

    slot: int
    replica: int
    incarnation: int
    t: float


def spares_dir(run_dir: Path) -> Path:
    return run_dir / SPARES


def assignment_path(run_dir: Path, slot: int) -> Path:
    return spares_dir(run_dir) / f"spare{slot}.json"


def ready_path(run_dir: Path, slot: int, rank: int) -> Path:
    return spares_dir(run_dir) / f"spare{slot}.rank{rank}.ready"


def write_assignment(run_dir: Path, a: SpareAssignment) -> None:
    """Hand spare ``a.slot`` its replica id (atomic: a rank reads all of it or nothing). A slot
    is assigned once; a second assignment is refused (``BadInput``), never overwritten."""
    path = assignment_path(run_dir, a.slot)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, msgspec.json.encode(a), "spare assignment")


def read_assignment(run_dir: Path, slot: int) -> SpareAssignment | None:
    """Spare ``slot``'s assignment; None while there is none (or it is not yet whole)."""
    try:
        with assignment_path(run_dir, slot).open("rb") as f:
            data = f.read(MAX_ASSIGNMENT_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_ASSIGNMENT_BYTES:
        raise ValueError(f"{assignment_path(run_dir, slot)}: larger than {MAX_ASSIGNMENT_BYTES} bytes")
    return msgspec.json.decode(data, type=SpareAssignment)


def ready_ranks(run_dir: Path, slot: int, ranks: int) -> bool:
    """Every rank of spare ``slot`` has its runtime imported and waits."""
    return all(ready_path(run_dir, slot, g).exists() for g in range(ranks))


def wait_for_assignment(run_dir: Path, slot: int, rank: int) -> SpareAssignment:
    """Mark rank ``rank`` of spare ``slot`` ready, then block until the parent assigns the slot.
    Returns the assignment with the environment set as a relaunched group's (``REPLICA_GROUP_ID``,
    ``FTRUN_RESTART``). The wait ends with the process: the parent stops a spare it no longer
    needs, and the rank dies with its launcher (``ftrun.worker.setup.die_with_parent``)."""
    mark = ready_path(run_dir, slot, rank)
    mark.parent.mkdir(parents=True, exist_ok=True)
    mark.touch()
    park_until(assignment_path(run_dir, slot))  # (ftrun.worker.park: the one wait)
    a = read_assignment(run_dir, slot)
    assert a is not None  # written whole by a rename: it exists, so it is complete
    os.environ[layout.ENV_REPLICA] = str(a.replica)
    os.environ[layout.ENV_RESTART] = str(a.incarnation)
    return a
