"""A started rank parked until it is given its work: it has imported torch and torchft and built
its model, and waits for a file to appear before its torchft Manager exists (so it is in no
quorum and holds no process group yet). ``sweep --warm-start`` parks its next cell's groups
this way while the current cell trains (``HostsConfig.start_gate``); the file's text is the
assignment (empty: just go), for any other parked worker that must be told what to be."""

from __future__ import annotations

import time
from pathlib import Path

from ftrun.small_files import read_file

POLL_S = 0.02  # a look every 20 ms: a parked rank costs no CPU to speak of, the start waits <= 20 ms
MAX_ASSIGNMENT_BYTES = 4096


def park_until(gate: Path, poll_s: float = POLL_S) -> str:
    """Wait until ``gate`` exists; its text (the writer writes it whole: ``ftrun.output.atomic_write``).
    Waits for ever: a parked rank dies with its launcher (the parent-death signal)."""
    while not gate.exists():
        time.sleep(poll_s)
    return read_file(gate, MAX_ASSIGNMENT_BYTES, "start gate").decode()
