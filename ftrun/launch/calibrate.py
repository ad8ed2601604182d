"""Measure one training step where the run will run: ``ftrun.worker.calibrate`` in a child. Torch-free here."""

from __future__ import annotations

import json
import subprocess
import sys

import msgspec

from ftrun.config import RunConfig
from ftrun.errors import RunFailed


def calibrate(cfg: RunConfig, threads: int, ranks: int) -> dict:
    """``{"step_s", "model_bytes"}`` of ``cfg``'s model, measured with ``ranks`` concurrent
    processes of ``threads`` threads each (as the run's ranks will be). ``RunFailed`` if it fails."""
    code = [sys.executable, "-m", "ftrun.worker.calibrate", msgspec.json.encode(cfg).decode(), str(threads), str(ranks)]
    out = subprocess.run(code, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RunFailed(
            f"calibration failed: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}"
        )
    return json.loads(out.stdout.strip().splitlines()[-1])
