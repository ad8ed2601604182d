"""``ftrun sweep --warm-start`` end to end: two cells of the same training (only ``--stall-timeout``
differs, which changes no number), 6 steps each. The second cell's groups start while the first
trains and park before their torchft Manager; each cell must still be its own clean run.

Checks: both cells pass; the second cell's ranks parked (its lifecycle says so) and started before
the first cell's last step (a warm start, not a cold one), but built their Manager only after it
(no overlap of trainings); nothing carried: other job ids, other rank pids, each run dir's spec names
itself, the second cell's first quorum is quorum 1 of its own lighthouse, its first steps are at
manager step 0 with the very loss the first cell had at step 1 (fresh model and optimizer, not the
first cell's trained state); no process left behind. About 85 s on 2 CPU cores at a load of ~12.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from train_fixtures import SMALL, TreeWatch, survivors

pytestmark = pytest.mark.e2e


def _jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_warm_started_cells_carry_nothing_from_the_previous_cell(tmp_path):
    argv = [sys.executable, "-m", "ftrun.cli", "sweep", "--out", str(tmp_path), "--name", "w"]
    argv += ["--axis", "stall_timeout_s=100,101", "--steps", "6", "--sync-every", "2", "--fragments", "1"]
    argv += ["--fragment-sync-delay", "0", *SMALL, "--warm-start", "--json"]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watch = TreeWatch(p.pid)
    out, err = p.communicate(timeout=300)
    watch.stop()
    assert p.returncode == 0, err
    sweep_dir = tmp_path / "w"
    assert survivors(watch, str(sweep_dir)) == []
    cells = json.loads(out)["cells"]
    assert [c["verdict"] for c in cells] == ["pass", "pass"], cells
    first, second = (sweep_dir / c["name"] for c in cells)

    steps = {d: {r: _jsonl(d / "events" / f"replica{r}_rank0.jsonl") for r in (0, 1)} for d in (first, second)}
    life = {r: _jsonl(second / "events" / "lifecycle" / f"replica{r}_rank0.jsonl") for r in (0, 1)}
    first_last_step = max(recs[-1]["t"] for recs in steps[first].values())
    for events in life.values():
        by = {e["event"]: e for e in events}
        assert "parked" in by, events  # started warm
        assert by["start"]["t"] < first_last_step, "the second cell started cold"
        assert by["manager_up"]["t_start"] > first_last_step, "the second cell trained beside the first"
        assert next(e for e in events if e["event"] == "configure")["quorum_id"] == 1  # its own lighthouse

    manifests = [json.loads((d / "manifest.json").read_text()) for d in (first, second)]
    assert manifests[0]["job_id"] != manifests[1]["job_id"]
    pids = [
        {json.loads((d / "meta" / f"replica{r}_rank0.json").read_text())["pid"] for r in (0, 1)}
        for d in (first, second)
    ]
    assert not pids[0] & pids[1]
    for d in (first, second):
        assert json.loads((d / "spec.json").read_text())["run_dir"] == str(d.resolve())
    for r in (0, 1):
        a, b = steps[first][r][0], steps[second][r][0]
        assert (a["step"], a["manager_step"]) == (b["step"], b["manager_step"]) == (1, 0)
        assert a["loss"] == b["loss"]  # the same fresh model on the same data, not the first cell's weights


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stopped_warm_sweep_leaves_nothing_running(tmp_path, sig):
    """Stopped while its first cell trains and the second is parked, both with their agents
    forked by the sweep's zygote: exit 130, and every process it started is gone."""
    argv = [sys.executable, "-m", "ftrun.cli", "sweep", "--out", str(tmp_path), "--name", "w"]
    argv += ["--axis", "seed=1,2", "--steps", "6", "--sync-every", "2", "--fragments", "1"]
    argv += ["--fragment-sync-delay", "0", *SMALL, "--step-sleep-ms", "2000"]
    argv += ["--warm-start", "--json"]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_hup_default)
    watch = TreeWatch(p.pid)
    deadline = time.monotonic() + 120
    # 4 agents and 4 ranks, forked (with the zygote's command line; the zygote itself may have been
    # seen before its exec, with the sweep's)
    while sum("ftrun.worker.zygote" in cmd for cmd in watch.seen.values()) < 4 + 4:
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.1)
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    watch.stop()
    assert p.returncode == 130, err
    assert survivors(watch, str(tmp_path / "w")) == []


def _hup_default() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)  # (a suite under nohup passes SIGHUP ignored)
