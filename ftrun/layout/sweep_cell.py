"""``CELL/sweep-cell.json``: what ``ftrun sweep`` found for one cell. Torch-free."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args

import msgspec

from ftrun.config.fields import ConfigValue as ConfigValue  # (its home: the config's flat form)
from ftrun.errors import BadInput
from ftrun.layout.compare_report import NumericsBrief
from ftrun.small_files import read_json

SWEEP_CELL = "sweep-cell.json"  # ftrun sweep: a finished cell's result, in the cell's run dir
# a trained cell's verdicts (sweep-cell.json), then a cell's in sweep.json: one that did not run
TrainedVerdict = Literal["pass", "fail", "failed-commits", "crashed"]
CellVerdict = Literal["pass", "fail", "failed-commits", "crashed", "invalid", "unavailable", "not run"]
SWEEP_VERDICTS: tuple[str, ...] = get_args(TrainedVerdict)
# an axis value, a cell's parameter (``ftrun.grid.parse_value``): typed as its config field
AxisValue = bool | int | float | str | list[str]


class SweepCell(msgspec.Struct, kw_only=True):
    """``CELL/sweep-cell.json``: what ``ftrun sweep`` found for one cell (``--resume`` reads it,
    then re-checks the cell from its run dir). Metrics as ``ftrun.sweep.evaluate.evaluate``."""

    name: str = ""
    params: dict[str, AxisValue] = {}
    run_dir: str | None = None
    verdict: CellVerdict  # in a sweep-cell.json: a ``TrainedVerdict`` (``read_sweep_cell``)
    problem: str | None = None
    config: dict[str, ConfigValue] = {}  # the options that differ from the defaults (``ftrun.sweep.runner.differing``)
    wall_s: float | None = None
    failed_commits: int | None = None
    failed_commits_explained: int | None = None
    commits: float | None = None
    steps_per_s: float | None = None
    exposed_comm_per_sync_ms: float | None = None
    exposed_control_per_sync_ms: float | None = None
    hidden_share: float | None = None
    final_loss: float | None = None
    numerics: NumericsBrief | None = None  # ``ftrun.check.metrics.numerics_brief`` (None: an earlier ftrun's file)
    torch: str | None = None  # the torch the cell trained with (None: an earlier ftrun's file)
    torchft: str | None = None  # its torchft, distribution and version ("torchft-nightly 2026.10.26")
    notes: list[str] = []


SWEEP_CELL_LIMIT = 16 << 20  # bytes of a sweep-cell.json read at most (one is a few KB: metrics and the config)


def read_sweep_cell(path: Path) -> SweepCell:
    """``BadInput`` (one line naming the file and the field) unless it is a sweep cell result
    (of at most ``SWEEP_CELL_LIMIT`` bytes) of a trained cell (``TrainedVerdict``)."""
    cell = read_json(Path(path), SWEEP_CELL_LIMIT, "sweep cell result", SweepCell)  # (bounded in depth too)
    if cell.verdict not in SWEEP_VERDICTS:
        raise BadInput(f"{path}: not an ftrun sweep cell result (Invalid enum value {cell.verdict!r} - at `$.verdict`)")
    return cell
