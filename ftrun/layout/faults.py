"""``faults/<key>.json``: the faults that fired (``FaultMarker``). Torch-free.

Also the faults a run plans (``FaultSpec``, in spec.json and the manifest)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from ftrun.fault_flags import fault_key  # a fault's name: its marker file faults/<key>.json
from ftrun.layout.paths import fault_markers
from ftrun.small_files import read_json

FAULT_MARKER_LIMIT = 64 << 10  # bytes of faults/<key>.json read at most: one fault, ~200 bytes


def fault_label(action: str, replica: int, step: int) -> str:
    """A fault as reports show it: ``kill 1@25`` (the ``--kill``/``--hang`` flags' R@S form)."""
    return f"{action} {replica}@{step}"


class FaultSpec(msgspec.Struct):
    """A planned fault (``ftrun.fault_flags.Fault``): ``action`` kill | sigterm | hang | fail-commit |
    corrupt (``--corrupt-allreduce``; ``kind`` says how, ``ftrun.fault_flags.CORRUPT_KINDS``)."""

    replica: int
    step: int
    action: str
    seconds: float = 0.0
    kind: str = ""

    @property
    def key(self) -> str:
        return fault_key(self.action, self.replica, self.step)


class FaultMarker(FaultSpec):
    """``faults/<key>.json``: a fault that fired, written by the rank that fired it, before it fired
    (``fired_step``: the step it fired in; for ``fail-commit`` the sync whose vote it turned)."""

    fired_at: float = 0.0
    fired_step: int = 0
    pid: int = 0


def read_fault_markers(run_dir: Path) -> list[FaultMarker]:
    """The faults that fired in this run dir (``faults/*.json``), in file-name order; ``BadInput``
    (one line naming the file) for one that is unreadable, over ``FAULT_MARKER_LIMIT`` bytes or not one."""
    out = []
    for p in fault_markers(run_dir):
        out.append(read_json(p, FAULT_MARKER_LIMIT, "fault marker", FaultMarker))
    return out
