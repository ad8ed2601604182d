"""Where a restarted group is in the run's step numbering, once it has rejoined. Torch-free.

A relaunched group starts counting from 1, trains ``H/F - tau`` steps and then blocks in
torchft's quorum until the live groups reach their next send step: from that quorum on it is
in lock-step with them. Its step number then comes from the live peer it healed from (the
peer's training step travels in the checkpoint), or — when no heal was needed (no commit yet)
— from the live groups' event logs in a shared run dir: their last complete step + 1. When that
is past the run's last step (the others finished while it was starting), it never rejoined:
its event log says so (a ``rejoined`` record without a step) and it stops.
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


def too_late(aligned: int | None, steps: int) -> bool:
    """The live groups finished before this group rejoined (its aligned step lies past the
    run's last step): it has no step of the run left to train, and must not log one."""
    return aligned is not None and aligned > steps
