"""Fire ``--kill``/``--hang`` faults inside the target group, exactly at the step. Torch-free.

At the start of step S, rank 0 of replica group R:
* ``kill``: SIGKILLs its launcher (torchrun) and itself; the group's other ranks die through
  their parent-death signal — every process of the group is gone, with no chance to clean up.
* ``sigterm``: SIGTERMs its launcher, which stops its ranks (torchrun's polite shutdown).
* ``hang``: sleeps SECONDS inside the step (every rank of the group).
Each fault fires once per run: a marker ``<run>/faults/<key>.json`` (written before firing)
tells the parent what happened and keeps a restarted group from firing it again.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

from ftrun import layout
from ftrun.output import atomic_write

log = logging.getLogger(__name__)


class Faults:
    def __init__(self, specs: list[layout.FaultSpec], replica: int, rank: int, run_dir: Path) -> None:
        self.mine = {f.step: f for f in specs if f.replica == replica}
        self.rank = rank
        self.run_dir = run_dir

    def before_step(self, step: int) -> None:
        f = self.mine.get(step)
        if f is None:
            return
        marker = layout.fault_marker(self.run_dir, f.key)
        if f.action == "hang":
            if marker.exists() and self.rank == 0:
                return
            if self.rank == 0:
                self._mark(marker, f, step)
            time.sleep(f.seconds)
            return
        if self.rank != 0 or marker.exists():
            return
        self._mark(marker, f, step)
        launcher = os.getppid()
        if f.action == "kill":
            os.kill(launcher, signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)
        else:
            os.kill(launcher, signal.SIGTERM)
            time.sleep(30)  # torchrun stops us; never train past the fault step

    def _mark(self, marker: Path, f: layout.FaultSpec, step: int) -> None:
        marker.parent.mkdir(exist_ok=True)
        fired = layout.FaultMarker(f.replica, f.step, f.action, f.seconds, fired_at=time.time(), fired_step=step, pid=os.getpid())
        atomic_write(marker, layout.to_json(fired), "fault marker")  # the parent may read it meanwhile
        log.warning("fault %s fires at step %d", f.key, step)
