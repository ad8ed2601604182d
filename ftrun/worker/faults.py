"""Faults injected on purpose, inside a rank (issue: fault tolerance). Torch-free.

A fault spec is ``{"replica": r, "step": s, "action": "kill"|"sigterm"|"hang", "seconds": x}``.
``kill``/``sigterm`` are delivered by the parent to the whole group when the event log shows
the group reached the step; ``hang`` stalls inside the step here.
"""

from __future__ import annotations

import time


class Faults:
    def __init__(self, specs: list[dict], replica: int) -> None:
        self.hangs = {f["step"]: f.get("seconds", 0.0) for f in specs if f["replica"] == replica and f["action"] == "hang"}
        self._done: set[int] = set()

    def before_step(self, step: int, manager_step: int) -> None:
        seconds = self.hangs.get(step)
        if seconds and step not in self._done:
            self._done.add(step)
            time.sleep(seconds)
