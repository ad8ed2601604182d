"""A kill whose relaunch is slower than the steps left (as on a busy machine): the survivors
train past --steps until the relaunched group has rejoined and committed, and train, the
summary, inspect-trace and the recovery breakdown all say it came back (issue 42 item 13).

The relaunch is slowed by a ``sitecustomize`` on PYTHONPATH that sleeps at interpreter start
in the relaunched incarnation only (``FTRUN_RESTART`` > 0): its launcher (and so its ranks,
forked from it) start that much later, whatever the machine's load. Its launchers are fresh
interpreters (``--no-fork-agents``): one forked from the training's zygote starts no interpreter.
The same run holds the whole story of a kill with a restart: quorum 3 -> 2 -> 3, the heal from
a live peer, agreement and the numerics across it, and inspect-trace's lost steps for an
incarnation killed inside the profiled window (never exported). ~60 s on 2 cores."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from train_fixtures import RECOVERY_RUN, TrainRun, run_ftrun, run_train

STEPS = 30
SLOW_S = 8.0  # at the relaunch's interpreter start (its launcher; a rank forked from it adds none): > 8 s late

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
    # the window holds the kill: the killed incarnation never exports, the relaunch is not profiled
    args = [*RECOVERY_RUN, "--profile", "11:30", "--steps", str(STEPS), "--kill", "1@15", "--restarts", "1"]
    args.append("--no-fork-agents")
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
    _the_kill_story(run)


def _the_kill_story(run: TrainRun) -> None:
    """What torchft did, from the run's own files: the kill at its step, one relaunch healed from a
    live peer, quorum 3 -> 2 -> 3, agreement and numerics after the heal; inspect-trace passes and
    marks the steps group 1 lost (its killed incarnation never exported)."""
    run_dir, s = run.run_dir, run.summary()
    rec = s["faults"]  # what happened; s["recovery"]: where the time went (ftrun.check.recovery)
    assert [f["step"] for f in rec["faults"]] == [15] and rec["faults"][0]["action"] == "kill"
    assert rec["restarts"] == 1
    assert len(rec["heals"]) == 1 and rec["heals"][0]["replica"] == 1 and rec["heals"][0]["source_replica"] in (0, 2)
    # quorum went 3 -> 2 (group 1 gone) -> 3 (group 1 back)
    sizes = [len(q["participants"]) for q in rec["quorum_changes"]]
    assert sizes[0] == 3 and 2 in sizes and sizes[-1] == 3, rec["quorum_changes"]
    assert 1 not in next(q for q in rec["quorum_changes"] if len(q["participants"]) == 2)["participants"]
    # replicas agreed after every commit, including those after the heal
    assert s["agreement"]["ok"] and s["agreement"]["commits_checked"] >= 4, s["agreement"]
    healed_at = rec["heals"][0]["step"]
    r1 = [x for x in run.events(1) if x.get("step") is not None]
    assert any(x["step"] > healed_at and x.get("commit") for x in r1)
    kinds = [json.loads(x)["event"] for x in (run_dir / "events" / "run.jsonl").read_text().splitlines()]
    assert kinds[:2] == ["group_exit", "restart"]
    res = run_ftrun("inspect-trace", str(run_dir), "--json", timeout=120)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    report = json.loads(res.stdout)
    assert report["verdict"] == "pass" and report["agreement"]["ok"] and not report["problems"]
    assert report["replicas"] == [0, 2]  # the killed incarnation never exported; the restart is not profiled
    (f,) = report["faults"]
    r1_back = next(x for x in run.events(1) if x.get("rejoined"))
    assert (f["replica"], f["action"], f["step"]) == (1, "kill", 15)
    assert f["rejoined_step"] == r1_back["step"] and f["lost_steps"] == [15, r1_back["step"] - 1]
    assert not f["never_rejoined"] and not f["has_trace"]
    assert f["heal"]["source_replica"] == rec["heals"][0]["source_replica"]
    assert f["heal"]["manager_step"] == rec["heals"][0]["manager_step"]
    assert f"lost steps 15-{r1_back['step'] - 1}" in f["text"]
    # participants changed 3 -> 2 -> 3 and the healed group contributed: every sync's numbers held,
    # and the healed replica's parameters equal its source's (the numeric check, ftrun.check.numerics)
    num = s["numerics"]
    assert num["status"] == "checked" and not num["problems"] and num["checked"] >= 5, num
    assert report["numerics"]["checked"] == num["checked"] and not report["numerics"]["problems"]
    (h,) = num["heals"]
    assert h["replica"] == 1 and h["source_replica"] == rec["heals"][0]["source_replica"] and h["params_match"] is True
    assert h["fragments_checked"] == 2 and h["first_contribution"]["follows_rule"] is True
