"""Measure one training step where the run will run: ``ftrun.worker.calibrate`` in a child. Torch-free here."""

from __future__ import annotations

import subprocess
import sys

import msgspec

from ftrun.config import RunConfig
from ftrun.errors import RunFailed
from ftrun.worker.calibrate import Calibrated  # (torch only inside its measuring functions)


def calibrate(cfg: RunConfig, threads: int, ranks: int) -> Calibrated:
    """The step (``step_s``) and size (``model_bytes``) of ``cfg``'s model, measured with ``ranks`` concurrent
    processes of ``threads`` threads each (as the run's ranks will be). ``RunFailed`` if it fails."""
    code = [sys.executable, "-m", "ftrun.worker.calibrate", msgspec.json.encode(cfg).decode(), str(threads), str(ranks)]
    out = subprocess.run(code, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RunFailed(
            f"calibration failed: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}"
        )
    lines = out.stdout.strip().splitlines()
    try:
        return msgspec.json.decode(lines[-1] if lines else "", type=Calibrated)
    except msgspec.DecodeError as e:
        raise RunFailed(f"calibration failed: its output is not a calibration record ({e})") from None
