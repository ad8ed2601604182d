"""Bad input to inspect-trace through a child process: one line, no traceback; the inspect path
imports no torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from train_fixtures import FTRUN

FLAGS = ["--fragments", "2", "--sync-every", "8", "--fragment-sync-delay", "2"]


def _mk(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


@pytest.mark.e2e
def test_subprocess_no_traceback(tmp_path):
    p = _mk(tmp_path, "n.json.gz", b"\x1f\x8bnot really")
    res = subprocess.run([*FTRUN, "inspect-trace", str(p), *FLAGS], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert res.stdout == "" and res.stderr.strip().count("\n") == 0
    assert "broken gzip" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.e2e
def test_import_is_torch_free():
    code = "import ftrun.commands.inspect_trace, ftrun.check.analyze, ftrun.report.inspect_view, sys; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
