"""Where rank 0 of a group is right now: ``<run>/progress/replica{r}.txt`` = "STEP PHASE".

Phases: ``step`` (computing), ``quorum`` (in torchft's start_quorum: waiting for the other
groups), ``sync`` (in perform_sync: waiting for the fragment's allreduce and the commit). The
parent's watchdog reads it to tell a group that hangs from the groups that wait for it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable


class Whereabouts:
    def __init__(self, run_dir: Path, replica: int, enabled: bool) -> None:
        self.path = run_dir / "progress" / f"replica{replica}.txt"
        self.enabled = enabled
        self.step = 0
        if enabled:
            self.path.parent.mkdir(exist_ok=True)

    def set(self, phase: str, step: int | None = None) -> None:
        if step is not None:
            self.step = step
        if self.enabled:
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(f"{self.step} {phase}")
            os.replace(tmp, self.path)

    def around(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self.set(phase)
            try:
                return fn(*args, **kwargs)
            finally:
                self.set("step")

        return wrapped


def read(run_dir: Path, replica: int) -> tuple[int, str] | None:
    try:
        step, phase = (run_dir / "progress" / f"replica{replica}.txt").read_text().split()
        return int(step), phase
    except (OSError, ValueError):
        return None
