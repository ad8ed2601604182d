"""Which launched rank this process is, from the environment ``ftrun launch`` and torchrun give it.
Stdlib only: ``boot`` runs it at every interpreter start of a group."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def rank_of(env: Mapping[str, str]) -> tuple[Path, int, int] | None:
    """(run dir, replica group, rank in the group) of a launched rank (``FTRUN_RUN_DIR``,
    ``REPLICA_GROUP_ID``, torchrun's ``RANK``); None for any other process (torchrun's agent has
    no ``RANK``) or malformed values."""
    run_dir, replica, rank = env.get("FTRUN_RUN_DIR"), env.get("REPLICA_GROUP_ID"), env.get("RANK")
    if not run_dir or replica is None or rank is None or not replica.isdigit() or not rank.isdigit():
        return None
    return Path(run_dir), int(replica), int(rank)
