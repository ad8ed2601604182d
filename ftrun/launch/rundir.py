"""A run's directory and identity: never overwrite silently; one job id for all groups. Torch-free."""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

from ftrun.config import RunConfig
from ftrun.errors import BadInput
from ftrun.output import RunDirLock, check_name, claim_run_dir, mark_new_run_dir


def prepare_run_dir(cfg: RunConfig, overwrite: bool) -> tuple[Path, RunDirLock]:
    """``<out>/<run-name>``, created and locked for this run (``ftrun.output.claim_run_dir``):
    an existing dir is refused unless ``overwrite``, and then only an ftrun run dir is replaced.
    The run's config is then ``cfg.replaced(run_name=run_dir.name)`` (a name left empty is chosen here)."""
    inputs = [Path(cfg.data.data)] if cfg.data.data and cfg.data.data != "synthetic" else []
    return claim_named_run_dir(Path(cfg.out), cfg.run_name, cfg.mode, overwrite, inputs)


def claim_named_run_dir(
    root: Path, run_name: str | None, prefix: str, overwrite: bool, inputs: Iterable[Path] = ()
) -> tuple[Path, RunDirLock]:
    """``root/run_name`` claimed (see ``prepare_run_dir``); without a name, a fresh
    ``PREFIX-<time>`` claimed atomically: two runs started in the same second get -2, -3, ..."""
    if not run_name:
        base = f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}"
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise BadInput(f"--out {root}: cannot create ({e.strerror})") from None
        for n in range(1, 1000):
            name = base if n == 1 else f"{base}-{n}"
            try:
                (root / name).mkdir()
            except FileExistsError:
                continue
            except OSError as e:
                raise BadInput(f"--out {root}: cannot create {root / name} ({e.strerror})") from None
            return root / name, mark_new_run_dir(root / name)
        raise BadInput(f"--out {root}: {base} and {base}-2 .. {base}-999 all exist; give --run-name")
    check_name("--run-name", run_name)
    run_dir = root / run_name
    return run_dir, claim_run_dir(run_dir, overwrite, inputs=inputs)


def job_id(cfg: RunConfig) -> str:
    """One id for all replica groups of a job. Local runs: random. Multi-host: --job-id, else
    derived from the lighthouse URL and run name that every host's command line shares."""
    if cfg.hosts.job_id:
        return cfg.hosts.job_id
    if cfg.hosts.replica_group_id >= 0:
        return "job-" + hashlib.sha1(f"{cfg.hosts.lighthouse}|{cfg.run_name}".encode()).hexdigest()[:12]
    return uuid.uuid4().hex[:12]
