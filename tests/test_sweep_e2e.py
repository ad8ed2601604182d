"""``ftrun sweep`` end to end: a real 2x2 grid (backend gloo/baby-gloo x tau 1/3 at H=4, F=2,
8 steps), interrupted during its second cell, then ``--resume``d. About 60 s on 2 CPU cores.

Checks: invalid combinations are listed with torchft's rule and never run; the gloo cell passes
with its commits counted; Ctrl-C stops the running training (no process left), keeps the
finished cell and exits 130; ``--resume`` keeps the finished cell untouched and runs the
unfinished one; baby-gloo's commits fail (torchft 0.2.0's Baby process groups, see
shared torchft notes), so that cell is ``failed-commits``, not ``pass``, and the exit is 1.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from train_fixtures import SMALL, TreeWatch, junit_cases, survivors, validate_junit

pytestmark = pytest.mark.e2e

GRID = ["--axis", "backend=gloo,baby-gloo", "--axis", "fragment_sync_delay=1,3", "--sync-every", "4", "--fragments", "2",
        "--steps", "8", *SMALL, "--json"]


def _cmd(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "ftrun.cli", "sweep", "--out", str(out), "--name", "s", *GRID, *extra]


def test_sweep_interrupted_then_resumed(tmp_path):
    sweep_dir = tmp_path / "s"
    gloo, baby = sweep_dir / "backend-gloo_tau1", sweep_dir / "backend-baby-gloo_tau1"
    p = subprocess.Popen(_cmd(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watch = TreeWatch(p.pid)
    deadline = time.monotonic() + 180
    while not ((gloo / "sweep-cell.json").exists() and (baby / "events").is_dir()) and p.poll() is None:
        assert time.monotonic() < deadline, "the sweep did not reach its second cell"
        time.sleep(0.2)
    time.sleep(2)  # the baby-gloo training is running
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    watch.stop()
    assert p.returncode == 130, err
    assert "1 finished cell(s) kept" in err
    assert survivors(watch, str(sweep_dir)) == []
    assert not (baby / "sweep-cell.json").exists()
    stopped = {c["name"]: c for c in json.loads((sweep_dir / "sweep.json").read_text())["cells"]}
    assert stopped["backend-baby-gloo_tau1"]["verdict"] == "not run"
    first = json.loads((gloo / "sweep-cell.json").read_text())
    assert first["verdict"] == "pass", first
    assert first["commits"] == 4 and first["failed_commits"] == 0  # 8 steps / (H/F = 2): 4 syncs, all committed
    assert first["steps_per_s"] > 0 and first["exposed_comm_per_sync_ms"] is not None
    kept = (gloo / "sweep-cell.json").stat().st_mtime_ns

    junit = tmp_path / "sweep.xml"
    r = subprocess.run(_cmd(tmp_path, "--resume", "--junit", str(junit)), capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr
    result = json.loads(r.stdout)
    cells = {c["name"]: c for c in result["cells"]}
    assert list(cells) == ["backend-gloo_tau1", "backend-gloo_tau3", "backend-baby-gloo_tau1", "backend-baby-gloo_tau3"]
    assert cells["backend-gloo_tau1"]["resumed"] and (gloo / "sweep-cell.json").stat().st_mtime_ns == kept
    b = cells["backend-baby-gloo_tau1"]
    assert b["verdict"] == "failed-commits" and b["failed_commits"] > 0 and "no injected fault" in b["problem"], b
    assert "first error in logs/replica" in b["problem"]  # what went wrong inside torchft, as found
    assert sum("no collective spans" in n for n in b["notes"]) == 1  # said once, and the rest still checked
    assert b["hidden_share"] is None  # no collective spans on a Baby group: hidden time is not claimed
    for n in ("backend-gloo_tau3", "backend-baby-gloo_tau3"):
        assert cells[n]["verdict"] == "invalid" and "tau < H/F" in cells[n]["problem"]
        assert not (sweep_dir / n).exists()  # listed, never run
    assert "failed-commits: backend-baby-gloo_tau1" in r.stderr and "backend-gloo_tau1:" not in r.stderr
    assert result["versions"]["torchft"] and result["machine"]["cpus"]
    assert (sweep_dir / "sweep.md").read_text().count("| baby-gloo |") == 2
    assert (sweep_dir / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    root = validate_junit(junit)  # one case per cell: the pass passes, baby-gloo fails, the invalid ones are skipped
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("4", "1", "2")
    case = junit_cases(root)[("sweep", "backend-baby-gloo_tau1")].find("failure")
    assert case.get("message").startswith("failed-commits: ") and "no injected fault" in case.text


def test_sweep_killed_mid_cell_takes_its_training_along_and_resume_reruns_it(tmp_path):
    """Issue 24 item 11: SIGKILL of ``ftrun sweep`` (no handler runs) used to orphan the cell's
    whole training tree, which trained on; a --resume then recorded "crashed: in use by pid N".
    Now the training gets the parent-death signal and stops its own children; --resume reruns it.
    One 40-step cell of 300 ms steps; about 40 s on 2 CPU cores."""
    sweep_dir = tmp_path / "k"
    cell = sweep_dir / "tau1"
    argv = [sys.executable, "-m", "ftrun.cli", "sweep", "--out", str(tmp_path), "--name", "k", "--axis", "fragment_sync_delay=1",
            "--sync-every", "4", "--fragments", "2", "--steps", "40", "--step-sleep-ms", "300", *SMALL, "--json"]  # 12 s of steps: it cannot finish in the 10 s
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    watch = TreeWatch(p.pid)
    deadline = time.monotonic() + 120
    while not any(len(f.read_text().splitlines()) >= 2 for f in (cell / "events").glob("replica*_rank0.jsonl")):
        assert p.poll() is None and time.monotonic() < deadline, "the cell never started training"
        time.sleep(0.2)
    p.kill()
    p.wait()
    t_kill = time.monotonic()
    left = survivors(watch, str(sweep_dir), within_s=10)
    watch.stop()
    for pid in (int(x.split()[0]) for x in left):  # don't leak into the next test
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert any("ftrun.worker.main" in c for c in watch.seen.values()), watch.seen
    assert left == [], f"orphans of the SIGKILLed sweep after 10 s: {left}"
    gone_s = time.monotonic() - t_kill
    assert not (cell / "manifest.json").exists() and not (cell / "sweep-cell.json").exists()  # stopped, not finished

    r = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)["cells"][0]
    assert res["verdict"] == "pass" and not res.get("resumed"), res
    print(f"training tree gone {gone_s:.1f} s after SIGKILL of the sweep")
