"""The lighthouse process loads torchft's native extension alone: no torch (whose import took ~4 s
of CPU per lighthouse start on a slow 2-core machine, one core's worth of a small run's start-up)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from ftrun.launch.lighthouse import LIGHTHOUSE_ENTRY


@pytest.mark.e2e
def test_lighthouse_serves_without_importing_torch(tmp_path):
    log = tmp_path / "lighthouse.log"
    with log.open("wb") as f:
        proc = subprocess.Popen(
            [sys.executable, LIGHTHOUSE_ENTRY, "--bind", "127.0.0.1:0", "--min_replicas", "1"],
            stdout=f,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while b"Lighthouse listening on" not in log.read_bytes():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
        assert "_torchft" in maps  # torchft's lighthouse itself
        assert "libtorch" not in maps and "libc10" not in maps
    finally:
        proc.kill()
        proc.wait()
