"""``ftrun sweep`` end to end: a real 2x2 grid (fail_commit none/1@3 x tau 1/3 at H=4, F=2,
8 steps), interrupted during its second cell, then ``--resume``d. About 60 s on 2 CPU cores.

Checks: invalid combinations are listed with torchft's rule and never run; the first cell passes
with its commits counted; Ctrl-C stops the running training (no process left), keeps the
finished cell and exits 130; ``--resume`` keeps the finished cell untouched and runs the
unfinished one, whose commit fails by ftrun's own fault (``--fail-commit``, the same on every
torchft): that failure is explained, so the cell passes with it counted, and the exit is 0.
Then, version-specific: a baby-gloo cell is ``failed-commits`` (exit 1, with torchft's first
error) on torchft 0.2.x, whose Baby process groups fail commits (shared torchft notes), and
``pass`` on torchft-nightly.
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

GRID = [
    "--axis",
    "fail_commit=none,1@3",
    "--axis",
    "fragment_sync_delay=1,3",
    "--sync-every",
    "4",
    "--fragments",
    "2",
    "--steps",
    "8",
    *SMALL,
    "--json",
]


def _cmd(out: Path, *extra: str, grid: list[str] = GRID, name: str = "s") -> list[str]:
    return [sys.executable, "-m", "ftrun.cli", "sweep", "--out", str(out), "--name", name, *grid, *extra]


def test_sweep_interrupted_then_resumed(tmp_path):
    sweep_dir = tmp_path / "s"
    gloo, baby = sweep_dir / "fail-commit-none_tau1", sweep_dir / "fail-commit-1-3_tau1"
    slow = ("--step-sleep-ms", "250")  # the second cell's 8 steps take 2 s: stopped while it trains
    p = subprocess.Popen(_cmd(tmp_path, *slow), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watch = TreeWatch(p.pid)
    deadline = time.monotonic() + 180
    steps = baby / "events" / "replica0_rank0.jsonl"
    while not ((gloo / "sweep-cell.json").exists() and steps.exists() and steps.read_text()) and p.poll() is None:
        assert time.monotonic() < deadline, "the sweep did not reach its second cell's steps"
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)  # the second cell's training is running
    out, err = p.communicate(timeout=120)
    watch.stop()
    assert p.returncode == 130, err
    assert "1 finished cell(s) kept" in err
    assert survivors(watch, str(sweep_dir)) == []
    assert not (baby / "sweep-cell.json").exists()
    stopped = {c["name"]: c for c in json.loads((sweep_dir / "sweep.json").read_text())["cells"]}
    assert stopped["fail-commit-1-3_tau1"]["verdict"] == "not run"
    first = json.loads((gloo / "sweep-cell.json").read_text())
    assert first["verdict"] == "pass", first
    assert first["commits"] == 4 and first["failed_commits"] == 0  # 8 steps / (H/F = 2): 4 syncs, all committed
    assert first["steps_per_s"] > 0 and first["exposed_comm_per_sync_ms"] is not None
    kept = (gloo / "sweep-cell.json").stat().st_mtime_ns

    junit = tmp_path / "sweep.xml"
    r = subprocess.run(
        _cmd(tmp_path, *slow, "--resume", "--junit", str(junit)), capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    cells = {c["name"]: c for c in result["cells"]}
    assert list(cells) == [
        "fail-commit-none_tau1",
        "fail-commit-none_tau3",
        "fail-commit-1-3_tau1",
        "fail-commit-1-3_tau3",
    ]
    assert cells["fail-commit-none_tau1"]["resumed"] and (gloo / "sweep-cell.json").stat().st_mtime_ns == kept
    b = cells["fail-commit-1-3_tau1"]
    assert b["verdict"] == "pass" and b["problem"] is None, b
    assert b["failed_commits"] == 0 and b["failed_commits_explained"] == 1, (
        b
    )  # group 1 at step 4, explained by its fault
    for n in ("fail-commit-none_tau3", "fail-commit-1-3_tau3"):
        assert cells[n]["verdict"] == "invalid" and "tau < H/F" in cells[n]["problem"]
        assert not (sweep_dir / n).exists()  # listed, never run
    assert result["versions"]["torchft"] and result["versions"]["torchft_pg_api"] in ("configure", "reconfigure")
    assert result["machine"]["cpus"]
    assert (sweep_dir / "sweep.md").read_text().count("| 1@3 |") == 2
    assert (sweep_dir / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    root = validate_junit(junit)  # one case per cell: the two that ran pass, the invalid ones are skipped
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("4", "0", "2")


def test_sweep_killed_mid_cell_takes_its_training_along_and_resume_reruns_it(tmp_path):
    """Issue 24 item 11: SIGKILL of ``ftrun sweep`` (no handler runs) used to orphan the cell's
    whole training tree, which trained on; a --resume then recorded "crashed: in use by pid N".
    Now the training gets the parent-death signal and stops its own children; --resume reruns it.
    One 40-step cell of 300 ms steps; about 40 s on 2 CPU cores."""
    sweep_dir = tmp_path / "k"
    cell = sweep_dir / "tau1"
    argv = [
        sys.executable,
        "-m",
        "ftrun.cli",
        "sweep",
        "--out",
        str(tmp_path),
        "--name",
        "k",
        "--axis",
        "fragment_sync_delay=1",
        "--sync-every",
        "4",
        "--fragments",
        "2",
        "--steps",
        "40",
        "--step-sleep-ms",
        "300",
        *SMALL,
        "--json",
    ]  # 12 s of steps: it cannot finish in the 10 s
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
    # its ranks ran: forked (with its agents) from the sweep's zygote, they bear its command line
    # (the zygote itself may have been seen before its exec, with the sweep's)
    assert sum("ftrun.worker.zygote" in c for c in watch.seen.values()) >= 2 + 2, watch.seen
    assert left == [], f"orphans of the SIGKILLed sweep after 10 s: {left}"
    gone_s = time.monotonic() - t_kill
    zygote = next(c.split()[-1] for c in watch.seen.values() if "ftrun.worker.zygote" in c)
    assert not Path(zygote).parent.exists()  # its socket's folder: removed by the zygote itself
    assert not (cell / "manifest.json").exists() and not (cell / "sweep-cell.json").exists()  # stopped, not finished

    r = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)["cells"][0]
    assert res["verdict"] == "pass" and not res.get("resumed"), res
    print(f"training tree gone {gone_s:.1f} s after SIGKILL of the sweep")


def test_baby_gloo_cell_verdict_follows_the_release(tmp_path):
    """Version-specific (module docstring): torchft 0.2.x fails baby-gloo's commits, the nightly commits."""
    from ftrun.torchft_compat import baby_pg_fails_commits, installed

    grid = [
        "--axis",
        "backend=baby-gloo",
        "--sync-every",
        "4",
        "--fragments",
        "2",
        "--fragment-sync-delay",
        "1",
        "--steps",
        "8",
        *SMALL,
        "--json",
    ]
    junit = tmp_path / "baby.xml"
    r = subprocess.run(
        _cmd(tmp_path, "--junit", str(junit), grid=grid, name="baby"), capture_output=True, text=True, timeout=300
    )
    (b,) = json.loads(r.stdout)["cells"]
    assert sum("no collective spans" in n for n in b["notes"]) == 1  # said once, and the rest still checked
    assert b["hidden_share"] is None  # no collective spans on a Baby group: hidden time is not claimed
    if baby_pg_fails_commits(installed()):  # torchft 0.2.x
        assert r.returncode == 1, r.stderr
        assert b["verdict"] == "failed-commits" and b["failed_commits"] > 0 and "no injected fault" in b["problem"], b
        assert "first error in logs/replica" in b["problem"]  # what went wrong inside torchft, as found
        assert "failed-commits: backend-baby-gloo" in r.stderr
        root = validate_junit(junit)  # the failing cell is a JUnit failure naming its verdict
        assert (root.get("tests"), root.get("failures")) == ("1", "1")
        case = junit_cases(root)[("sweep", "backend-baby-gloo")].find("failure")
        assert case.get("message").startswith("failed-commits: ") and "no injected fault" in case.text
    else:  # torchft-nightly
        assert r.returncode == 0, r.stderr
        assert b["verdict"] == "pass" and b["failed_commits"] == 0 and b["commits"] == 4, b
