"""``.ftrun-run`` (and ``.ftrun-out``): ftrun made this dir, and which process (``ftrun.output``). Torch-free."""

from __future__ import annotations

from pathlib import Path

import msgspec

from ftrun.errors import BadInput
from ftrun.layout.paths import RUN_MARKER
from ftrun.small_files import read_json

MARKER_LIMIT = 64 << 10  # bytes of .ftrun-run read at most: a pid and a time, ~40 bytes


class RunMarker(msgspec.Struct):
    """``.ftrun-run``: ftrun made this run dir, the process that made it (``ftrun.output``); the
    same record marks an output dir of compare or sweep (``.ftrun-out``)."""

    pid: int
    started: float  # unix time


def read_run_marker(run_dir: Path) -> RunMarker | None:
    """A run dir's ``.ftrun-run`` (None: missing, not a regular file, over ``MARKER_LIMIT`` bytes,
    or not one)."""
    try:
        return read_json(Path(run_dir) / RUN_MARKER, MARKER_LIMIT, "run marker", RunMarker)
    except BadInput:
        return None
