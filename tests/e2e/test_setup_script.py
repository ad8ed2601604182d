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
# (installing ftrun sleeps FAKE_PIP_S); `-c CODE` fails, so torch and torchft count as missing,
# except the one reading torch's installed version (torch==$FAKE_TORCH: pip installed it); with
# FAKE_HAVE_TORCH set, torch imports as that version; a script on stdin (`-`: which torchft
# distribution is installed) prints none.
FAKE_PY = """#!/usr/bin/env bash
echo "$*" >> "$FAKE_LOG"
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; exit 0; fi
if [ "$1" = "-c" ]; then
  case "$2" in
    *metadata.version*) echo "torch==${FAKE_HAVE_TORCH:-$FAKE_TORCH}"; exit 0;;
    "import torch") [ -n "${FAKE_HAVE_TORCH:-}" ] && exit 0;;
    *torch.__version__*) [ -n "${FAKE_HAVE_TORCH:-}" ] && { echo "$FAKE_HAVE_TORCH"; exit 0; };;
  esac
  exit 1
fi
if [ "$1" = "-" ]; then cat > /dev/null; exit 0; fi
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
  case "$*" in *" -e "*) sleep "$FAKE_PIP_S";; esac
  exit 0
fi
exit 1
"""


def _setup(tmp_path: Path, **env_vars: str) -> tuple[subprocess.CompletedProcess, str]:
    """Run a copy of setup.sh with the stand-in Python; (its result, the calls it made)."""
    (tmp_path / "scripts").mkdir(exist_ok=True)
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    py = tmp_path / "fakepy"
    py.write_text(FAKE_PY)
    py.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FTRUN_")}
    env |= {
        "PYTHON": str(py),
        "FAKE_LOG": str(tmp_path / "calls.log"),
        "FAKE_PIP_S": "0",
        "FAKE_TORCH": env_vars.get("FTRUN_TORCH", "2.13.0"),
        "FTRUN_SETUP_TICK_S": "1",
        "PATH": "/usr/bin:/bin",
        **env_vars,
    }  # no nvidia-smi: the CPU host's branch
    r = subprocess.run(
        ["bash", str(tmp_path / "scripts" / "setup.sh")], capture_output=True, text=True, env=env, timeout=60
    )
    log = tmp_path / "calls.log"
    return r, log.read_text() if log.exists() else ""


def test_setup_prints_a_line_per_step_with_the_time_so_far(tmp_path):
    r, calls = _setup(tmp_path, FAKE_PIP_S="3")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert all(re.match(r"^setup: \[\s*\d+ s\] ", ln) for ln in lines), r.stderr
    text = "\n".join(lines)
    for step in ("creating .venv", "torch==2.13.0", "torchft", "ftrun and its dependencies", "done"):
        assert step in text, (step, text)
    assert any("still installing" in ln for ln in lines), text  # the long pip step is not silent
    pin = "-c .venv/ftrun-torch-pin.txt"
    assert "-m pip install -q torch==2.13.0" in calls and f"-m pip install -q {pin} -e .[test,lint,docs]" in calls
    assert f"-m pip install -q {pin} torchft>=0.2.0,<0.3" in calls, calls  # torch pinned while torchft installs
    assert (tmp_path / ".venv" / "ftrun-torch-pin.txt").read_text() == "torch==2.13.0\n"


def test_setup_installs_the_torch_ftrun_torch_names_pinned(tmp_path):
    r, calls = _setup(tmp_path, FTRUN_TORCH="2.14.1", FTRUN_TORCHFT="nightly", FTRUN_EXTRAS="test")
    assert r.returncode == 0, r.stderr
    assert "-m pip install -q torch==2.14.1" in calls, calls
    assert "-c .venv/ftrun-torch-pin.txt torchft-nightly==2026.10.26" in calls, calls
    assert "-e .[test]" in calls and "torch==2.14.1\n" == (tmp_path / ".venv" / "ftrun-torch-pin.txt").read_text()
    stamp_214 = (tmp_path / ".venv" / ".ftrun-installed").read_text()
    r, _ = _setup(tmp_path, FTRUN_CPU_TORCH="torch==2.14.1", FTRUN_TORCHFT="nightly", FTRUN_EXTRAS="test")
    assert r.returncode == 0, r.stderr  # the former name still works
    assert (tmp_path / ".venv" / ".ftrun-installed").read_text() == stamp_214  # the same choice, the same stamp


def test_setup_keeps_an_importable_torch_and_refuses_another_version(tmp_path):
    r, calls = _setup(tmp_path, FAKE_HAVE_TORCH="2.13.0+cpu")
    assert r.returncode == 0 and "keeping the importable torch (2.13.0+cpu)" in r.stderr, r.stderr
    assert (
        "install -q torch" not in calls and "torch==2.13.0+cpu" in (tmp_path / ".venv/ftrun-torch-pin.txt").read_text()
    )
    r, _ = _setup(tmp_path, FAKE_HAVE_TORCH="2.13.0+cpu", FTRUN_TORCH="2.14.1")
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        "setup: .venv already has torch 2.13.0+cpu; FTRUN_TORCH=2.14.1 asks for 2.14.1 — not replacing it "
        "(use another FTRUN_VENV)"
    )


@pytest.mark.parametrize(
    "var, value", [("FTRUN_TORCH", "latest"), ("FTRUN_TORCH", "torch>=2.13"), ("FTRUN_EXTRAS", "test;x")]
)
def test_setup_refuses_an_unpinned_torch_or_bad_extras_before_making_a_venv(tmp_path, var, value):
    r, calls = _setup(tmp_path, **{var: value})
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and var in r.stderr, r.stderr
    assert calls == "" and not (tmp_path / ".venv").exists()
