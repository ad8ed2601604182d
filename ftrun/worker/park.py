"""A started rank parked until it is told to go on: it has imported torch and torchft and built
its model, and waits for a file to appear, before its torchft Manager exists (so it is in no
quorum and holds no process group yet). The one wait of both warm mechanisms: ``sweep
--warm-start``'s next cell (``HostsConfig.start_gate``, ``cells/CELL.gate``) and ``train
--spares``' spares (``ftrun.worker.spare``: its assignment file). Torch-free."""

from __future__ import annotations

import time
from pathlib import Path

POLL_S = 0.005  # a look (a stat: cheap) every 5 ms: a parked rank costs no CPU to speak of


def park_until(gate: Path, poll_s: float = POLL_S) -> None:
    """Wait until ``gate`` exists (its writer writes it whole, by a rename: ``ftrun.output.atomic_write``).
    Waits for ever: a parked rank dies with its launcher (``ftrun.worker.setup.die_with_parent``)."""
    while not gate.exists():
        time.sleep(poll_s)
