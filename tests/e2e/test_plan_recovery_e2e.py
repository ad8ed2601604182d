"""``ftrun plan --check RUN_DIR`` of a real kill run (Gloo, 3 groups, one killed and relaunched,
the heal across an emulated 20 Mbit/s link): the predicted detect, heal and catch-up against the
run's own recovery breakdown, and the heal's bytes exactly what torchft sent. ~40 s on 2 cores."""

from __future__ import annotations

import json
import subprocess

import pytest

from train_fixtures import FTRUN, RECOVERY_RUN, run_train

# 90 steps, as test_recovery_e2e: the relaunch (torch's import in a new rank) took 10.8 s on a slow
# 2-core machine, longer than the survivors' 35 steps after the kill at 50 (the group never rejoined)
RUN = [*RECOVERY_RUN, "--profile", "3:8", "--steps", "90", "--kill", "1@15", "--restarts", "1"]
RUN += ["--link", "20mbit,5ms"]


@pytest.mark.e2e
def test_plan_check_of_a_kill_run_predicts_its_recovery(tmp_path):
    run = run_train(tmp_path, "planrec", *RUN, timeout=240)
    assert run.rc == 0, run.explain()
    res = subprocess.run(
        [*FTRUN, "plan", "--check", str(run.run_dir), "--json"], capture_output=True, text=True, timeout=120
    )
    assert res.returncode in (0, 1), res.stdout[-3000:] + res.stderr[-2000:]
    out = json.loads(res.stdout)
    (row,) = out["recovery"]
    assert row["fault"] == "kill 1@15"
    # what torchft's HTTP transport sent is what the model says it sends, to the byte
    assert row["heal_bytes"]["measured"] == row["heal_bytes"]["predicted"] == row["heal_bytes"]["sent"]
    for k in ("detect", "heal", "catch_up", "total"):
        assert row["within_tolerance"][k] is True, (k, row["predicted"][k], row["measured"][k], row["how"][k])
    for k in ("relaunch", "join", "reconfigure"):  # inputs from the run itself: shown, never judged
        assert row["within_tolerance"][k] is None and row["predicted"][k] == pytest.approx(row["measured"][k])
    assert res.returncode == 0 and out["verdict"] == "pass"
    text = subprocess.run(
        [*FTRUN, "plan", "--check", str(run.run_dir)], capture_output=True, text=True, timeout=120
    ).stdout
    assert "kill 1@15" in text and "heal bytes" in text and "PASS" in text
