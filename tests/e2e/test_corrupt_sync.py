"""The outer step's numeric check on real torchft runs (Gloo, small model): a clean run checks every
stage of every sync; every --corrupt-sync kind, each on its own sync of one run, is found where
it was put, naming its stage and cause, and the same run without it passes
(ftrun.check.numerics_outer)."""

from __future__ import annotations

import pytest

from train_fixtures import SMALL, run_train

pytestmark = pytest.mark.e2e

# H=10, F=2, tau=2: a fragment syncs every 5 steps; 30 steps = 6 syncs, fragment 0 at 5, 15, 25
SCHEDULE = [*SMALL, "--sync-every", "10", "--fragments", "2", "--fragment-sync-delay", "2"]
RUN = [*SCHEDULE, "--steps", "30", "--profile", "none"]
ALPHA = ["--fragment-update-alpha", "0.5"]

CAUSES = {
    "sign": ("sync step 5", "likely cause: sign flipped: the contribution is local - original"),
    "stale": ("sync step 15", "likely cause: stale original parameters: the next round's (sync step 25) equal this"),
    "lr": ("sync step 10", "likely cause: wrong lr: the step fits lr 1.4, the optimizer's param_groups say 0.7"),
    "alpha": ("sync step 20", "likely cause: alpha ignored: the merged parameters are the globals"),
}


def test_a_clean_run_checks_every_stage(tmp_path):
    """At alpha 0.5 (the merge checked too; alpha 0: test_numerics_e2e's clean run)."""
    run = run_train(tmp_path, "clean", *RUN, *ALPHA, "--json", timeout=240)
    assert run.rc == 0, run.explain()
    num = run.summary()["numerics"]
    assert num["status"] == "checked" and num["problems"] == [] and num["checked"] == 6
    st = num["stages"]
    # each step against the next round's originals: not the last sync of each fragment and replica
    for stage, n in (("pseudo-gradient", 12), ("outer step", 8), ("merge", 8)):
        assert st[stage]["checked"] == n, (stage, st[stage])
        assert 0 <= st[stage]["largest_error"]["ratio"] < 1
    last = "the fragment's last sync in the log (no next send shows its globals)"
    assert st["outer step"]["not_checked"] == {last: 4}


# one run at alpha 0.5, each kind on its own sync and replica (fragment 0 syncs at 5, 15, 25, 35,
# fragment 1 at 10, 20, 30, 40): each is checked against the next round of its fragment
CORRUPTED = {"sign": (1, 5), "lr": (0, 10), "stale": (1, 15), "alpha": (0, 20)}


def test_each_corrupt_sync_kind_is_caught_and_named(tmp_path):
    flags = [x for kind, (r, s) in CORRUPTED.items() for x in ("--corrupt-sync", f"{r}@{s}:{kind}")]
    run = run_train(tmp_path, "corrupt", *SCHEDULE, "--steps", "40", "--profile", "none", *ALPHA, *flags, timeout=240)
    assert run.rc == 1, run.explain()
    err = run.stderr.strip().splitlines()[-1]
    assert "numerics: sync step 5" in err and CAUSES["sign"][1] in err, err
    problems = run.summary()["numerics"]["problems"]
    for kind, (replica, step) in CORRUPTED.items():
        where, cause = CAUSES[kind]
        at = [p for p in problems if p["sync_step"] == step]
        assert any(p["text"].startswith(where) and cause in p["text"] for p in at) and {p["replica"] for p in at} == {
            replica
        }, (kind, at)
        assert (tmp_path / "corrupt" / "faults" / f"corrupt-sync-r{replica}-s{step}.json").exists()
    # nothing is found where nothing was done (stale at 15 also breaks that sync's merge: alpha 0.5)
    assert {(p["replica"], p["sync_step"]) for p in problems} == set(CORRUPTED.values()), problems
