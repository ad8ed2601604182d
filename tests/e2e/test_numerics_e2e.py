"""The numeric check on real torchft runs (Gloo, small model): a clean run passes with every sync
checked; every --corrupt-allreduce kind, each on its own sync of one run, fails it with its
cause; a bucketized run passes; --no-sketches says "not checked". (A --kill run:
tests/e2e/test_faults.py.)"""

from __future__ import annotations

import json

import pytest

from train_fixtures import SMALL, inspect, run_train

pytestmark = pytest.mark.e2e

# H=10, F=2, tau=2: a fragment syncs every 5 steps (5, 10, 15, 20); 20 steps = 4 syncs
SCHEDULE = [*SMALL, "--sync-every", "10", "--fragments", "2", "--fragment-sync-delay", "2"]
SHORT = [*SCHEDULE, "--steps", "20"]


def test_clean_run_checks_every_sync(tmp_path):
    """30 steps: 6 syncs, 12 replica-syncs; every stage of the outer step checked where the next
    round shows its result (at alpha 0.5: test_corrupt_sync)."""
    run = run_train(tmp_path, "clean", *SCHEDULE, "--steps", "30", "--profile", "21:30", "--json", timeout=180)
    assert run.rc == 0, run.explain()
    num = run.summary()["numerics"]
    assert num["status"] == "checked" and num["problems"] == []
    assert num["checked"] == 6 and num["replica_syncs_checked"] == 12 and num["committed"] == 12
    le = num["tolerance"]["largest_error"]
    assert 0 <= le["ratio"] < 1 and le["tolerance"] > 0
    st = num["stages"]
    # each step against the next round's originals: not the last sync of each fragment and replica
    for stage, n in (("pseudo-gradient", 12), ("outer step", 8)):
        assert st[stage]["checked"] == n, (stage, st[stage])
        assert 0 <= st[stage]["largest_error"]["ratio"] < 1
    last = "the fragment's last sync in the log (no next send shows its globals)"
    assert st["outer step"]["not_checked"] == {last: 4}
    res = inspect(str(run.run_dir), "--json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["numerics"]["checked"] == 6 and d["numerics"]["problems"] == [] and "rule" in d["numerics"]["tolerance"]
    text = " ".join(inspect(str(run.run_dir)).output.split())  # rich wraps lines
    assert "landed as expected; numerics ok (6 sync(s))" in text
    assert "numerics: average = SUM/participants and SUM = sum of contributions held for 6 sync(s)" in text


CAUSES = {
    "wrong-count": "divided by participants + 1 = 3 instead of 2 participants",
    "drop": "a contribution missing (replica 1's is not in the SUM)",
    "stale": "a stale buffer",
    "late": "values changed after the collective",
    "noise": "values changed in the collective",
}
# one run, each kind on its own sync (fragment 1 syncs at 10, 20, 30; fragment 0 at 15, 25), both
# replicas corrupting: every check is per sync and replica, so each kind is found where it was put
CORRUPTED = {"wrong-count": (1, 10), "drop": (1, 15), "stale": (0, 20), "late": (1, 25), "noise": (0, 30)}


def test_each_corruption_is_caught_and_named(tmp_path):
    flags = [x for kind, (r, s) in CORRUPTED.items() for x in ("--corrupt-allreduce", f"{r}@{s}:{kind}")]
    run = run_train(tmp_path, "corrupt", *SCHEDULE, "--steps", "30", "--profile", "none", *flags, timeout=180)
    assert run.rc == 1, run.explain()
    err = run.stderr.strip().splitlines()[-1]
    assert "numerics: sync step 10" in err and CAUSES["wrong-count"] in err and "(and " in err, err
    problems = run.summary()["numerics"]["problems"]
    for kind, (replica, step) in CORRUPTED.items():
        at = [p for p in problems if p["sync_step"] == step]
        assert at and all(CAUSES[kind] in p["cause"] for p in at), (kind, at)
        assert all(p["fragment"] == (0 if step % 10 else 1) for p in at), (kind, at)
        assert (tmp_path / "corrupt" / "faults" / f"corrupt-r{replica}-s{step}.json").exists()
    # "drop" is seen by both replicas (the SUM both hold lacks one); every other kind by the one that did it
    assert {(p["replica"], p["sync_step"]) for p in problems} == {*CORRUPTED.values(), (0, 15)}, problems


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
