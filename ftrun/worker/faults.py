"""Fire ``--kill``/``--hang``/``--fail-commit`` faults inside the target group, exactly at the step. Torch-free.

At the start of step S, rank 0 of replica group R:
* ``kill``: SIGKILLs its launcher (torchrun) and itself; the group's other ranks die through
  their parent-death signal — every process of the group is gone, with no chance to clean up.
* ``sigterm``: SIGTERMs its launcher, which stops its ranks (torchrun's polite shutdown).
* ``hang``: sleeps SECONDS inside the step (every rank of the group).
* ``fail-commit``: from step S on, at the group's next ``should_commit``, rank 0 reports an error
  to its Manager (``Manager.report_error``, torchft's public API for "this step went wrong"), so it
  votes false and the whole group's commit fails (the vote is a collective inside the group);
  torchft clears the error at the next quorum. The other groups commit as usual.
Each fault fires once per run: a marker ``<run>/faults/<key>.json`` (written before firing)
tells the parent what happened and keeps a restarted group from firing it again.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

from ftrun import layout

log = logging.getLogger(__name__)


class Faults:
    def __init__(self, specs: list[layout.FaultSpec], replica: int, rank: int, run_dir: Path) -> None:
        self.mine = {f.step: f for f in specs if f.replica == replica and f.action != "fail-commit"}
        self.commit_faults = sorted((f for f in specs if f.replica == replica and f.action == "fail-commit"), key=lambda f: f.step)
        self.rank = rank
        self.run_dir = run_dir
        self.step = 0  # the step being trained (``before_step``)

    def wrap_commit(self, manager: Any) -> None:
        """Route ``manager.should_commit`` through the ``fail-commit`` faults (rank 0 votes)."""
        if not self.commit_faults or self.rank != 0:
            return
        real = manager.should_commit

        def should_commit(*args: Any, **kwargs: Any) -> bool:
            f = next((f for f in self.commit_faults if f.step <= self.step), None)
            if f is not None:
                self.commit_faults.remove(f)
                marker = layout.fault_marker(self.run_dir, f.key)
                if not marker.exists():  # a restarted group does not fire it again
                    self._mark(marker, f, self.step)
                    manager.report_error(RuntimeError(f"ftrun --fail-commit {f.replica}@{f.step}: this rank votes against the commit"))
            return real(*args, **kwargs)

        manager.should_commit = should_commit

    def before_step(self, step: int) -> None:
        self.step = step
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
        marker.write_text(layout.to_json(fired))
        log.warning("fault %s fires at step %d", f.key, step)
