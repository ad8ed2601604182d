"""``SWEEP_DIR/sweep.json``: what ``ftrun sweep`` found (also its ``--json``), one typed record
of nested Structs: every cell in grid order, the counts by verdict, the grid, the machine and
the versions. Torch-free.

Written with one encode (``ftrun.json_out.report_json``, as compare's report.json); read back
with one typed, bounded decode (``read_sweep_result``: ``plan --check``, the docs' picture). A
field an earlier ftrun did not write reads as its default; a field of another type is one line
naming the file and the field. ``UNSET`` fields are absent by meaning and not written.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
from msgspec import UNSET, UnsetType

from ftrun.layout.compare_report import RESULT_LIMIT
from ftrun.layout.sweep_cell import AxisValue, ConfigValue, SweepCell
from ftrun.small_files import read_json

SWEEP_JSON = "sweep.json"  # ftrun sweep: the result, in the sweep dir


class SweepRow(SweepCell, kw_only=True):
    """A cell of sweep.json: its ``sweep-cell.json`` (``SweepCell``; a cell that did not run has
    its name, parameters, verdict and reason only), the first fault's recovery
    (``ftrun.sweep.evaluate.recovery_metrics``), and on ``--resume`` ``resumed`` (kept from an
    earlier run of the sweep, re-checked) and ``recorded_verdict`` (the verdict it had then,
    when the re-check differs)."""

    recovery_s: float | None = None
    recovery_largest_phase: str | None = None
    recovery_largest_phase_s: float | None = None
    recorded_verdict: str | UnsetType = UNSET
    resumed: bool | UnsetType = UNSET


class SweepAxis(msgspec.Struct):
    """An axis of the grid (``ftrun.grid.Axis``): a config key and its values."""

    key: str
    values: list[AxisValue]


class Machine(msgspec.Struct, kw_only=True):
    """The host the sweep ran on: name, platform, CPUs, GPUs, whether a CUDA device is usable."""

    hostname: str = ""
    platform: str = ""
    cpus: int | None = None
    gpus: int = 0
    cuda_device: bool = False


class SweepResult(msgspec.Struct, kw_only=True):
    """``sweep.json`` (module docstring): ``shared``: the train options every cell shares (by
    key); ``metric``: the picture's; ``picture`` and ``exit_code``: once the sweep finished (a
    stopped sweep's file has neither)."""

    sweep_dir: str = ""
    name: str = ""
    preset: str | None = None
    axes: list[SweepAxis] = []
    shared: dict[str, ConfigValue] = {}
    metric: str = ""
    parallel: int = 1
    machine: Machine = msgspec.field(default_factory=Machine)
    versions: dict[str, str] = {}
    notes: list[str] = []
    counts: dict[str, int] = {}
    cells: list[SweepRow] = []
    picture: str | None | UnsetType = UNSET
    exit_code: int | UnsetType = UNSET


def read_sweep_result(path: Path) -> SweepResult:
    """``path`` (a sweep dir's sweep.json) with one typed decode, at most ``RESULT_LIMIT`` bytes;
    ``BadInput`` (one line naming the file, and the field) otherwise. Python's JSON tokens
    ``NaN``/``Infinity`` read too (earlier ftruns wrote them)."""
    return read_json(Path(path), RESULT_LIMIT, "result", SweepResult, python_json=True)
