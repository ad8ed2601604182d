"""``examples/train_diloco_min.py`` runs under ``ftrun launch`` as the docs' launch page says, and passes.

An e2e test (``examples/conftest.py``): two replica groups of the script, on CPU, a few seconds of
training, then the check of its traces.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "train_diloco_min.py"
SCHEDULE = ["--fragments", "2", "--sync-every", "4", "--fragment-sync-delay", "1"]


def _ftrun() -> list[str]:
    exe = Path(sys.executable).with_name("ftrun")
    found = str(exe) if exe.exists() else shutil.which("ftrun")
    return [found] if found else [sys.executable, "-m", "ftrun"]


def _launch(out: Path) -> tuple[subprocess.CompletedProcess[str], str]:
    """One ``ftrun launch`` of the example into ``out``; the result and the text that explains it
    (the summary, stderr and the tail of each group's log, where a crash's stacks are)."""
    argv = [*_ftrun(), "launch", "--replicas", "2", *SCHEDULE, "--out", str(out), "--run-name", "example"]
    res = subprocess.run([*argv, "--json", "--", str(SCRIPT)], capture_output=True, text=True, timeout=240)
    logs = "".join(
        f"\n{log.name} (tail):\n{log.read_text(errors='replace')[-4000:]}"
        for log in sorted((out / "example" / "logs").glob("replica*.log"))
    )
    return res, f"rc={res.returncode}\nstdout:\n{res.stdout[-3000:]}\nstderr:\n{res.stderr[-3000:]}{logs}"


# A rank aborted inside torch or torchft (C++), not in ftrun or the script: seen once on a loaded CI
# machine, right after a profiler export, and not reproduced. Rerun once for that signature only,
# as tests/train_fixtures.py's NATIVE_CRASH does for the launch tests; the failure shows the logs.
@pytest.mark.flaky(reruns=1, only_rerun=[r"SIGABRT"])
def test_the_example_passes_under_ftrun_launch(tmp_path):
    res, explain = _launch(tmp_path)
    assert res.returncode == 0, explain
    summary = json.loads(res.stdout)
    assert [g["exit_codes"] for g in summary["groups"]] == [[0], [0]], explain
    assert summary["inspection"]["verdict"] == "pass" and summary["inspection"]["events"], explain
    assert len(summary["traces"]) == 2  # one per replica group, found in its working dir
