"""``CELL/sweep-cell.json``: what ``ftrun sweep`` found for one cell. Torch-free."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import msgspec

from ftrun.small_files import read_json

SWEEP_CELL = "sweep-cell.json"  # ftrun sweep: a finished cell's result, in the cell's run dir
SWEEP_VERDICTS = ("pass", "fail", "failed-commits", "crashed")


class SweepCell(msgspec.Struct, kw_only=True):
    """``CELL/sweep-cell.json``: what ``ftrun sweep`` found for one cell (``--resume`` reads it,
    then re-checks the cell from its run dir). Metrics as ``ftrun.sweep.evaluate.evaluate``."""

    name: str = ""
    params: dict[str, Any] = {}
    run_dir: str | None = None
    verdict: Literal["pass", "fail", "failed-commits", "crashed"]
    problem: str | None = None
    config: dict[str, Any] = {}
    wall_s: float | None = None
    failed_commits: int | None = None
    failed_commits_explained: int | None = None
    commits: float | None = None
    steps_per_s: float | None = None
    exposed_comm_per_sync_ms: float | None = None
    exposed_control_per_sync_ms: float | None = None
    hidden_share: float | None = None
    final_loss: float | None = None
    numerics: dict[str, Any] | None = None  # ``ftrun.check.metrics.numerics_brief`` (None: an earlier ftrun's file)
    torch: str | None = None  # the torch the cell trained with (None: an earlier ftrun's file)
    torchft: str | None = None  # its torchft, distribution and version ("torchft-nightly 2026.10.26")
    notes: list[str] = []


SWEEP_CELL_LIMIT = 16 << 20  # bytes of a sweep-cell.json read at most (one is a few KB: metrics and the config)


def read_sweep_cell(path: Path) -> SweepCell:
    """``BadInput`` (one line naming the file and the field) unless it is a sweep cell result
    (of at most ``SWEEP_CELL_LIMIT`` bytes)."""
    return read_json(Path(path), SWEEP_CELL_LIMIT, "sweep cell result", SweepCell)  # (bounded in depth too)
