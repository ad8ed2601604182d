"""The outer step's numeric check on real torchft runs (Gloo, small model): a clean run checks every
stage of every sync; each --corrupt-sync kind fails the run naming its stage and cause, and the
same run without it passes (ftrun.check.numerics_outer)."""

from __future__ import annotations

import pytest

from train_fixtures import SMALL, run_train

pytestmark = pytest.mark.e2e

# H=10, F=2, tau=2: a fragment syncs every 5 steps; 30 steps = 6 syncs, fragment 0 at 5, 15, 25
RUN = [*SMALL, "--sync-every", "10", "--fragments", "2", "--fragment-sync-delay", "2", "--steps", "30"]
RUN += ["--profile", "none"]
ALPHA = ["--fragment-update-alpha", "0.5"]

CAUSES = {
    "sign": ("sync step 15", "likely cause: sign flipped: the contribution is local - original"),
    "stale": ("sync step 15", "likely cause: stale original parameters: the next round's (sync step 25) equal this"),
    "lr": ("sync step 15", "likely cause: wrong lr: the step fits lr 1.4, the optimizer's param_groups say 0.7"),
    "alpha": ("sync step 15", "likely cause: alpha ignored: the merged parameters are the globals"),
}


@pytest.mark.parametrize("alpha", [False, True], ids=["alpha0", "alpha0.5"])
def test_a_clean_run_checks_every_stage(tmp_path, alpha):
    run = run_train(tmp_path, "clean", *RUN, *(ALPHA if alpha else []), "--json", timeout=240)
    assert run.rc == 0, run.explain()
    num = run.summary()["numerics"]
    assert num["status"] == "checked" and num["problems"] == [] and num["checked"] == 6
    st = num["stages"]
    # each step against the next round's originals: not the last sync of each fragment and replica
    for stage, n in (("pseudo-gradient", 12), ("outer step", 8), *((("merge", 8),) if alpha else ())):
        assert st[stage]["checked"] == n, (stage, st[stage])
        assert 0 <= st[stage]["largest_error"]["ratio"] < 1
    last = "the fragment's last sync in the log (no next send shows its globals)"
    assert st["outer step"]["not_checked"] == {last: 4}


@pytest.mark.parametrize("kind", list(CAUSES))
def test_each_corrupt_sync_kind_is_caught_and_named(tmp_path, kind):
    extra = ALPHA if kind == "alpha" else []
    run = run_train(tmp_path, kind, *RUN, *extra, "--corrupt-sync", f"1@15:{kind}", timeout=240)
    assert run.rc == 1, run.explain()
    where, cause = CAUSES[kind]
    err = run.stderr.strip().splitlines()[-1]
    assert f"numerics: {where}" in err and cause in err, err
    num = run.summary()["numerics"]
    assert {p["replica"] for p in num["problems"]} == {1}, num["problems"]
    assert (tmp_path / kind / "faults" / "corrupt-sync-r1-s15.json").exists()
