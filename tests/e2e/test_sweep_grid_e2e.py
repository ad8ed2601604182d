"""``ftrun sweep`` bad axes through the real CLI (a child process)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.e2e
def test_sweep_bad_input_is_one_line_exit_2(tmp_path):
    """Bad axes through the real CLI: exit 2, one line, nothing written."""
    for args in (["--axis", "fragments=1,x"], ["--axis", "nope=1"], [], ["--preset", "pgs", "--backend", "gloo"],
                 ["--axis", "steps=8", "--metric", "bogus"], ["--axis", "steps=8", "--parallel", "0"]):
        r = subprocess.run([sys.executable, "-m", "ftrun.cli", "sweep", "--out", str(tmp_path), "--name", "s", *args],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "s").exists()
