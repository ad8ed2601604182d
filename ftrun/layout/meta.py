"""``meta/replica{r}_rank{g}.json``: what each rank measured about itself (its fragments, files, status). Torch-free."""

from __future__ import annotations

from pathlib import Path

import msgspec

from ftrun.errors import BadInput
from ftrun.small_files import read_json

RANK_META_LIMIT = (
    64 << 20
)  # bytes read at most: a few KB; its fragments list every parameter (a 10k-tensor model: ~1 MB)


class Param(msgspec.Struct):
    name: str
    numel: int
    shape: list[int]


class Fragment(msgspec.Struct):
    """One model fragment as the ranks built it (``ftrun.worker.fragments.Fragment.record``)."""

    id: int
    params: list[Param]
    numel: int
    bytes: int


class RankMeta(msgspec.Struct, kw_only=True):
    """``meta/replica{r}_rank{g}.json`` (``ftrun.worker.meta``): what a rank knows about itself.
    ``status``: running | done | failed; on failure ``error`` (its first line, which the parent
    shows), ``error_type`` and ``phase`` (the torchft wait it left: quorum, sync, or step)."""

    replica: int
    rank: int
    pid: int = 0
    status: str = "running"
    group_size: int | None = None
    restart: int = 0
    backend: str | None = None
    device: str | None = None
    fragments: list[Fragment] = []
    versions: dict[str, str | None] = {}
    traces: list[str] = []
    profile_window: list[int] | None = None
    commits: int | None = None
    failed_commits: int | None = None
    final_manager_step: int | None = None
    error: str | None = None
    error_type: str | None = None
    phase: str | None = None


def read_rank_meta(path: Path) -> RankMeta | None:
    """A rank's meta file; None when it is missing, half-written, over ``RANK_META_LIMIT`` bytes,
    not a regular file or not one (the parent reads it while the rank may be writing, and a rank
    that died early wrote none)."""
    try:
        return read_json(Path(path), RANK_META_LIMIT, "rank meta", RankMeta)
    except BadInput:
        return None
