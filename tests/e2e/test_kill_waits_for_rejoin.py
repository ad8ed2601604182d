"""A kill whose relaunch is slower than the steps left (as on a busy machine): the survivors
train past --steps until the relaunched group has rejoined and committed, and train, the
summary, inspect-trace and the recovery breakdown all say it came back (issue 42 item 13).

The relaunch is slowed by a ``sitecustomize`` on PYTHONPATH that sleeps at interpreter start
in the relaunched incarnation only (``FTRUN_RESTART`` > 0): its launcher and its rank each
start that much later, whatever the machine's load. ~60 s on 2 cores."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from train_fixtures import RECOVERY_RUN, run_ftrun, run_train

STEPS = 30
SLOW_S = 4.0  # per interpreter start of the relaunch (launcher and rank): > 8 s late on any machine

SLOW_RELAUNCH = f"""\
import os, time
if os.environ.get("FTRUN_RESTART", "0") not in ("", "0"):
    time.sleep({SLOW_S})
"""


def slowed_relaunch(tmp: Path) -> dict[str, str]:
    site = tmp / "slow_relaunch"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_RELAUNCH)
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)}


@pytest.mark.e2e
def test_survivors_wait_for_a_slow_relaunch_to_rejoin(tmp_path):
    args = [*RECOVERY_RUN, "--profile", "3:8", "--steps", str(STEPS), "--kill", "1@15", "--restarts", "1"]
    run = run_train(tmp_path, "slow", *args, timeout=300, env=slowed_relaunch(tmp_path))
    assert run.rc == 0, run.explain()
    s = run.summary()
    extra = s["faults"]["extra_steps"]
    assert extra > 0, run.explain()  # the relaunch came after step STEPS: the survivors went on for it
    last = {r["replica"]: r["last_step"] for r in s["replicas"]}
    assert last == dict.fromkeys((0, 1, 2), STEPS + extra), last  # all three stopped after the same step
    (f,) = s["faults"]["faults"]
    assert f["recovered_s"] is not None and f["cause"] is None, f
    text = " ".join(run.stdout.split())
    assert f"past --steps {STEPS} to see it commit" in text, text
    assert "failure:" not in text and "error:" not in run.stderr, run.explain()
    (x,) = s["recovery"]
    assert x["total_s"] is not None and x["phases"]["catch_up"] is not None, x  # the breakdown saw its commit
    ins = run_ftrun("inspect-trace", str(run.run_dir), timeout=120)
    out = " ".join(ins.stdout.split())
    assert ins.returncode == 0 and "PASS" in out, ins.stdout + ins.stderr
    back = re.search(r"replica 1: SIGKILL at step 15, lost steps 15-(\d+), rejoined at step (\d+)", out)
    assert back and STEPS < int(back[2]) <= STEPS + extra, out
