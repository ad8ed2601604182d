"""A hang is not a crash: a group stalls inside a step longer than the lighthouse's join timeout,
the survivors go on without it, it comes back, heals and commits; the recovery breakdown has
every phase measured or null with its reason. Real torchft groups on Gloo; ~35 s on 2 cores."""

from __future__ import annotations

import pytest

from ftrun.check.recovery import PHASES
from train_fixtures import RECOVERY_RUN, run_train

HANG_S = 13.0  # > the lighthouse's join timeout (10 s): a stalled group still heartbeats, so only that drops it
RUN = [*RECOVERY_RUN, "--profile", "none", "--steps", "80", "--hang", f"1@15:{HANG_S:g}"]


@pytest.mark.e2e
def test_hang_one_of_three_gets_the_recovery_breakdown(tmp_path):
    run = run_train(tmp_path, "hang", *RUN, timeout=240)
    assert run.rc == 0, run.explain()
    s = run.summary()
    (x,) = s["recovery"]
    assert (x["fault"], x["replica"]) == ("hang 1@15", 1)
    # every phase measured, or null with the reason said
    for k in PHASES:
        assert (x["phases"][k] is not None and x["phases"][k] >= 0) or k in x["reasons"], (k, x)
    assert x["phases"]["relaunch"] is None and "a hang is not a crash" in x["reasons"]["relaunch"]
    for k in ("detect", "join", "reconfigure", "catch_up"):
        assert x["phases"][k] is not None and x["spans"][k][1] > x["spans"][k][0], (k, x)
    # detection: the survivors' quorum without the group, bounded by the join timeout (it still heartbeats)
    m = run.manifest()
    join_s = m["detection"]["join_timeout_ms"] / 1e3
    assert 0.8 * join_s <= x["spans"]["detect"][1] < HANG_S, x["spans"]["detect"]
    assert "join timeout" in x["detect_bound"] and "bounded by the join timeout" in x["detect_bound"], x["detect_bound"]
    assert x["sources"]["detect"] == "trace"  # the survivors were profiled around the quorum change
    # every participant's configure: the survivors' from their traces; the hung group (neither
    # relaunched nor a survivor: not profiled) from its lifecycle log
    assert x["participant_sources"] == {"0": "trace", "1": "event log", "2": "trace"}
    # the group came back after its stall, and the phases plus what no phase covers are the total
    assert x["spans"]["join"][0] == pytest.approx(HANG_S, abs=0.01)
    assert x["total_s"] > HANG_S
    assert sum(v for v in x["phases"].values() if v is not None) + x["unaccounted_s"] == pytest.approx(
        x["total_s"], abs=0.01
    )
    # what no phase covers is the stall after the survivors had dropped it (detect end -> stall end),
    # not more than 10% beside
    stalled_alone = HANG_S - x["spans"]["detect"][1]
    assert x["unaccounted_s"] <= stalled_alone + 0.10 * x["total_s"], x
    if x["phases"]["heal"] is not None:
        assert x["heal_bytes"] > 0 and x["heal_bytes"] == x["heal_bytes_sent"]
    traces = sorted(t["path"] for t in m["recovery_traces"])
    assert traces == [
        "traces/recovery/replica0_rank0.hang-r1-s15.pt.trace.json.gz",
        "traces/recovery/replica2_rank0.hang-r1-s15.pt.trace.json.gz",
    ]
    assert "recovery · hang 1@15" in run.stdout
