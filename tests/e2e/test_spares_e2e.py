"""Warm spares on real torchft groups (Gloo): kill 1 of 3 groups with one spare waiting; the
spare takes the replica id, heals and commits, the dead group's relaunch becomes the next spare,
and the recovery breakdown covers the time to the first commit. One training, ~30 s on 2 cores."""

from __future__ import annotations

import json

import pytest

from ftrun.check.recovery import PHASES
from train_fixtures import RECOVERY_RUN, run_train

RUN = [*RECOVERY_RUN, "--steps", "45", "--kill", "1@15", "--restarts", "1", "--spares", "1"]


@pytest.mark.e2e
def test_a_spare_takes_over_a_killed_group(tmp_path):
    run = run_train(tmp_path, "spare", *RUN, timeout=240)
    assert run.rc == 0, run.explain()
    assert not run.survivors, run.survivors  # every spare reaped with the groups
    events = [json.loads(x) for x in (run.run_dir / "events" / "run.jsonl").read_text().splitlines()]
    (restart,) = [e for e in events if e["event"] == "restart"]
    assert (restart["replica"], restart["incarnation"], restart["spare"]) == (1, 1, 0)
    assert not [e for e in events if e["event"] == "spare_exit"]
    # the spare ran as replica 1's incarnation 1: built before the fault, started at its assignment
    life = [json.loads(x) for x in (run.run_dir / "events/lifecycle/replica1_rank0.jsonl").read_text().splitlines()]
    ready = next(e for e in life if e["event"] == "spare_ready")
    start = next(e for e in life if e["event"] == "start" and e["incarnation"] == 1)
    assert ready["incarnation"] == 1 and ready["t"] <= start["t"]
    assert start["t"] >= restart["t"]
    assert (run.run_dir / "spares" / "spare0.json").is_file()
    assert (run.run_dir / "logs" / "spare1.log").is_file()  # the dead group's relaunch, as the next spare
    # the breakdown: back with a commit, the phases cover the total within 10%
    (x,) = run.summary()["recovery"]
    assert (x["fault"], x["replica"]) == ("kill 1@15", 1)
    assert x["total_s"] is not None and x["unaccounted_s"] <= 0.10 * x["total_s"], x
    for k in ("relaunch", "join", "catch_up"):
        assert x["phases"][k] is not None, (k, x["reasons"])
    assert set(x["phases"]) == set(PHASES)
    # the relaunch is the spare's pickup and its Manager: a spare ready before the fault paid the
    # launcher, the imports and the model before it, so none of that lies in the relaunch span
    # (a rank forked from its pre-imported agent builds in milliseconds: no duration to compare)
    assert x["relaunch_detail"]["launcher_to_rank_s"] >= 0
    if ready["t"] < restart["t"]:
        assert x["fault_at"] + x["spans"]["relaunch"][0] >= ready["t"], (x["fault_at"], x["spans"], ready)
