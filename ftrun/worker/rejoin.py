"""Where a restarted group is in the run's step numbering, once it has rejoined. Torch-free.

A relaunched group starts counting from 1, trains ``H/F - tau`` steps and then blocks in
torchft's quorum until the live groups reach their next send step: from that quorum on it is
in lock-step with them. Its step number then comes from the live peer it healed from (the
peer's training step travels in the checkpoint), or — when no heal was needed (no commit yet)
— from the live groups' event logs in a shared run dir: their last complete step + 1.
"""

from __future__ import annotations

from pathlib import Path

from ftrun import layout
from ftrun.event_log import read_event_log


def peers_step(run_dir: Path, replica: int) -> int | None:
    best = None
    for p in (run_dir / layout.EVENT_LOGS).glob("replica*_rank0.jsonl"):
        if p.name.startswith(f"replica{replica}_"):
            continue
        steps = [r.step for r in read_event_log(p) if r.step is not None]
        if steps:
            best = max(best or 0, steps[-1] + 1)
    return best


def aligned_step(healed_from_step: int | None, run_dir: Path, replica: int) -> int | None:
    return healed_from_step if healed_from_step is not None else peers_step(run_dir, replica)
