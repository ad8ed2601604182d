"""The numeric check on real torchft runs (Gloo, small model): a clean run passes with every sync
checked; each --corrupt-allreduce kind fails the run with its cause; a bucketized run passes;
--no-sketches says "not checked". (A --kill run: tests/test_faults.py.)"""

from __future__ import annotations

import json

import pytest

from train_fixtures import SMALL, inspect, run_train

pytestmark = pytest.mark.e2e

# H=10, F=2, tau=2: a fragment syncs every 5 steps (5, 10, 15, 20); 20 steps = 4 syncs
SCHEDULE = [*SMALL, "--sync-every", "10", "--fragments", "2", "--fragment-sync-delay", "2"]
SHORT = [*SCHEDULE, "--steps", "20"]


def test_clean_run_checks_every_sync(tmp_path):
    run = run_train(tmp_path, "clean", *SHORT, "--profile", "11:20", "--json", timeout=180)
    assert run.rc == 0, run.explain()
    num = run.summary()["numerics"]
    assert num["status"] == "checked" and num["problems"] == []
    assert num["checked"] == 4 and num["replica_syncs_checked"] == 8 and num["committed"] == 8
    le = num["tolerance"]["largest_error"]
    assert 0 <= le["ratio"] < 1 and le["tolerance"] > 0
    res = inspect(str(run.run_dir), "--json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["numerics"]["checked"] == 4 and d["numerics"]["problems"] == [] and "rule" in d["numerics"]["tolerance"]
    text = " ".join(inspect(str(run.run_dir)).output.split())  # rich wraps lines
    assert "landed as expected; numerics ok (4 sync(s))" in text
    assert "numerics: average = SUM/participants and SUM = sum of contributions held for 4 sync(s)" in text


CAUSES = {
    "wrong-count": "divided by participants + 1 = 3 instead of 2 participants",
    "drop": "a contribution missing (replica 1's is not in the SUM)",
    "stale": "a stale buffer",
    "late": "values changed after the collective",
    "noise": "values changed in the collective",
}


@pytest.mark.parametrize("kind", list(CAUSES))
def test_each_corruption_is_caught_and_named(tmp_path, kind):
    run = run_train(tmp_path, kind, *SHORT, "--profile", "none", "--corrupt-allreduce", f"1@15:{kind}", timeout=180)
    assert run.rc == 1, run.explain()
    err = run.stderr.strip().splitlines()[-1]
    assert "numerics: sync step 15" in err and CAUSES[kind] in err, err
    num = run.summary()["numerics"]
    assert num["problems"] and all(p["sync_step"] == 15 and p["fragment"] == 0 for p in num["problems"])
    assert (tmp_path / kind / "faults" / "corrupt-r1-s15.json").exists()


def test_bucketized_run_passes(tmp_path):
    run = run_train(tmp_path, "bucket", *SHORT, "--profile", "none", "--bucketize", "--json", timeout=180)
    assert run.rc == 0, run.explain()
    num = run.summary()["numerics"]
    assert num["status"] == "checked" and num["checked"] == 4 and num["paths"] == ["bucketized"] and not num["problems"]


def test_no_sketches_is_not_checked_never_ok(tmp_path):
    run = run_train(
        tmp_path, "off", *SCHEDULE, "--steps", "10", "--profile", "none", "--no-sketches", "--json", timeout=180
    )
    assert run.rc == 0, run.explain()
    num = run.summary()["numerics"]
    assert num["status"] == "not checked" and "sketches off" in num["why"] and num["checked"] == 0
    assert not any(r.get("numerics") for r in run.events(0))
