"""``scripts/setup.sh`` shows its progress: a line per step with the time so far (issue 24 item
19: it used to print one line and then nothing for the minutes pip takes).

Runs the real script on a copy of the checkout's pyproject.toml with a stand-in Python whose
``-m venv`` and ``-m pip`` only record what they were asked (and the pip install of ftrun takes
a few seconds, as the real one takes minutes), so nothing is installed. Under 10 s.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]

# A stand-in interpreter: `-m venv DIR` makes DIR/bin/python (itself); `-m pip ...` is logged
# (installing ftrun sleeps FAKE_PIP_S); `-c CODE` fails, so torch and torchft count as missing; a
# script on stdin (`-`: which torchft distribution is installed) prints none.
FAKE_PY = """#!/usr/bin/env bash
echo "$*" >> "$FAKE_LOG"
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; exit 0; fi
if [ "$1" = "-" ]; then cat > /dev/null; exit 0; fi
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
  case "$*" in *" -e "*) sleep "$FAKE_PIP_S";; esac
  exit 0
fi
exit 1
"""


def test_setup_prints_a_line_per_step_with_the_time_so_far(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    py = tmp_path / "fakepy"
    py.write_text(FAKE_PY)
    py.chmod(0o755)
    env = {
        **os.environ,
        "PYTHON": str(py),
        "FAKE_LOG": str(tmp_path / "calls.log"),
        "FAKE_PIP_S": "3",
        "FTRUN_SETUP_TICK_S": "1",
        "PATH": "/usr/bin:/bin",
    }  # no nvidia-smi: the CPU torch
    r = subprocess.run(
        ["bash", str(tmp_path / "scripts" / "setup.sh")], capture_output=True, text=True, env=env, timeout=60
    )
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert all(re.match(r"^setup: \[\s*\d+ s\] ", ln) for ln in lines), r.stderr
    text = "\n".join(lines)
    for step in ("creating .venv", "torch==2.13.0", "torchft", "ftrun and its dependencies", "done"):
        assert step in text, (step, text)
    assert any("still installing" in ln for ln in lines), text  # the long pip step is not silent
    calls = (tmp_path / "calls.log").read_text()
    assert "-m pip install -q torch==2.13.0" in calls and "-m pip install -q -e .[test,lint,docs]" in calls, calls
