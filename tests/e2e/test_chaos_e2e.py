"""A chaos run on real torchft groups (Gloo): ``--chaos`` with a fixed seed injects the same
faults twice, never both groups at once, and reports goodput; the run's check still passes
(schedule and numerics across the faults). Hangs only, so no relaunch (the kill path is the
``--kill`` path: test_recovery_e2e); 2 groups, 60 steps, the two trainings at once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from train_fixtures import SMALL, run_train

# seed 1 draws: hang group 0 at 0.14 s, hang group 1 at 0.44 s: the second waits for group 0 to be
# back (a commit after its 1 s stall), as --chaos-min-alive 1 of 2 groups says
RUN = [*SMALL, "--replicas", "2", "--fragments", "2", "--sync-every", "10", "--fragment-sync-delay", "3"]
RUN += ["--step-sleep-ms", "50", "--steps", "60", "--chaos", "hang:1:1", "--chaos-seed", "1", "--chaos-max-faults", "2"]


def _faults(run) -> tuple[list[str], list[tuple[str, int]]]:
    """The supervisor's requests (their text names index, kind, group and due time) and the fired
    faults' (action, group), in order."""
    m = run.manifest()
    asked = [e["fault"] for e in m["run_events"] if e["event"] == "chaos"]
    fired = [(f["action"], f["replica"]) for f in sorted(m["faults"]["fired"], key=lambda f: f["fired_at"])]
    return asked, fired


@pytest.mark.e2e
def test_a_seeded_chaos_run_injects_the_same_faults_twice_and_reports_goodput(tmp_path):
    with ThreadPoolExecutor(2) as pool:  # two children at once: the wall time of about one
        runs = list(pool.map(lambda name: run_train(tmp_path, name, *RUN, "--json", timeout=150), ("a", "b")))
    for run in runs:
        assert run.rc == 0, run.explain()
    a, b = (_faults(run) for run in runs)
    assert a == b
    asked, fired = a
    assert fired == [("hang", 0), ("hang", 1)]
    assert asked == [
        "chaos #0: hang 1s replica group 0 (due at 0.1 s)",
        "chaos #1: hang 1s replica group 1 (due at 0.4 s)",
    ]
    for run in runs:
        s = run.summary()
        c = s["chaos"]
        assert (c["requested"], c["fired"], c["by_kind"]) == (2, 2, {"hang": 2})
        assert c["ended"] == "--chaos-max-faults 2 reached"
        events = [e["event"] for e in run.manifest()["run_events"]]
        assert "chaos_wait" in events  # the second hang waited: never both groups at once
        g = c["goodput"]
        assert g["useful_steps"] > 0 and g["train_s"] > 0
        assert g["steps_per_s"] == pytest.approx(g["useful_steps"] / g["train_s"], rel=1e-3)
        assert g["useful_steps"] + g["lost_steps"] + g["tail_steps"] == sum(r["steps"] for r in s["replicas"])
        assert c["retained"] is None and c["twin"] is None  # a run never measures its own twin
        # the whole-run timeline: every group's steps, the two hangs and their recoveries
        assert c["timeline"] == "chaos_timeline.png"
        assert (Path(s["run_dir"]) / c["timeline"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        rec = c["recoveries"]
        assert rec["count"] + rec["never_back"] + rec["absorbed"] == 2
        # the check of the captured run across the faults: numerics checked and clean, no FAIL
        assert s["numerics"]["status"] == "checked" and not s["numerics"]["problems"]
        assert s["check"]["verdict"] == "pass", s["check"]
