"""A run's directory and identity: never overwrite silently; one job id for all groups. Torch-free."""

from __future__ import annotations

import hashlib
import shutil
import socket
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

from ftrun import layout
from ftrun.config import RunConfig
from ftrun.errors import BadInput


def prepare_run_dir(cfg: RunConfig, overwrite: bool) -> Path:
    """``<out>/<run-name>``; an existing dir is refused unless ``overwrite`` (never silently)."""
    root = Path(cfg.out)
    if not cfg.run_name:
        # a fresh name, claimed atomically: two runs started in the same second get -2, -3, ...
        base = f"{cfg.mode}-{time.strftime('%Y%m%d-%H%M%S')}"
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise BadInput(f"--out {cfg.out}: cannot create ({e.strerror})")
        for n in range(1, 1000):
            name = base if n == 1 else f"{base}-{n}"
            try:
                (root / name).mkdir()
            except FileExistsError:
                continue
            cfg.run_name = name
            return root / name
    run_dir = root / cfg.run_name
    if run_dir.exists():
        if not overwrite:
            raise BadInput(f"--run-name {cfg.run_name}: {run_dir} already exists (pass --overwrite to replace it, or pick another name)")
        if not (run_dir / layout.MANIFEST).exists() and not (run_dir / "spec.json").exists() and any(run_dir.iterdir()):
            raise BadInput(f"--overwrite: {run_dir} is not an ftrun run dir; refusing to delete it")
        shutil.rmtree(run_dir)
    try:
        run_dir.mkdir(parents=True)
    except OSError as e:
        raise BadInput(f"--out {cfg.out}: cannot create {run_dir} ({e.strerror})")
    return run_dir


def job_id(cfg: RunConfig) -> str:
    """One id for all replica groups of a job. Local runs: random. Multi-host: --job-id, else
    derived from the lighthouse URL and run name that every host's command line shares."""
    if cfg.job_id:
        return cfg.job_id
    if cfg.replica_group_id >= 0:
        return "job-" + hashlib.sha1(f"{cfg.lighthouse}|{cfg.run_name}".encode()).hexdigest()[:12]
    return uuid.uuid4().hex[:12]


def advertise_host(cfg: RunConfig) -> str:
    """The name other groups use to reach this group's torchft manager: loopback for a local
    run or a loopback lighthouse, else this host's name (or --advertise-host)."""
    if cfg.advertise_host:
        return cfg.advertise_host
    host = urlparse(cfg.lighthouse).hostname if cfg.lighthouse else None
    if host is None or host in ("127.0.0.1", "localhost", "::1"):
        return "localhost"
    return socket.gethostname()


