"""Recovery you can see, on real torchft groups (Gloo): kill 1 of 3 groups, relaunch it, and
break the time to its first commit into phases, each from its own records. ~30 s on 2 cores."""

from __future__ import annotations

import json
import subprocess

import pytest

from ftrun.check.recovery import PHASES
from train_fixtures import FTRUN, SMALL, run_train

RUN = [
    *SMALL,
    "--profile",
    "3:8",
    "--sync-every",
    "10",
    "--fragments",
    "2",
    "--fragment-sync-delay",
    "3",
    "--replicas",
    "3",
    "--steps",
    "50",
    "--step-sleep-ms",
    "100",
    "--kill",
    "1@15",
    "--restarts",
    "1",
]


@pytest.mark.e2e
def test_kill_one_of_three_recovery_breakdown(tmp_path):
    run = run_train(tmp_path, "rec", *RUN, timeout=240)
    assert run.rc == 0, run.explain()
    s = run.summary()
    (x,) = s["recovery"]["breakdown"]
    assert (x["fault"], x["replica"]) == ("kill 1@15", 1)
    # every phase happened, and each holds a positive share of the critical path
    assert all(x["phases"][k] is not None and x["phases"][k] > 0 for k in PHASES), x
    assert not x["reasons"], x["reasons"]
    # the phases cover the fault -> first-commit time the summary measured on its own, within 10%
    recovered = s["recovery"]["faults"][0]["recovered_s"]
    assert recovered is not None
    assert abs(sum(x["phases"].values()) - recovered) <= 0.10 * recovered, (x, recovered)
    assert x["unaccounted_s"] <= 0.10 * x["total_s"]
    # heal: what the healer received is what the source staged
    assert x["heal_source"] in (0, 2) and x["heal_source"] == s["recovery"]["heals"][0]["source_replica"]
    assert x["heal_bytes"] > 0 and x["heal_bytes"] == x["heal_bytes_sent"]
    # the relaunched group was profiled through its first commit: its trace is beside the window
    # traces, and torchft's own configure / recv_checkpoint spans there were used
    m = run.manifest()
    assert [t["path"] for t in m["recovery_traces"]] == ["traces/recovery/replica1_rank0.restart1.pt.trace.json.gz"]
    assert (run.run_dir / m["recovery_traces"][0]["path"]).is_file()
    assert x["sources"]["reconfigure"] == x["sources"]["heal"] == "trace"
    assert set(x["reconfigure_participants"]) == {"0", "1", "2"}
    assert x["survivors"]["steps_without_group"] > 0 and x["survivors"]["goodput"] is not None
    assert "recovery · kill 1@15" in run.stdout or "recovery" in run.stdout
    # inspect-trace of the run dir gives the same breakdown
    res = subprocess.run(
        [*FTRUN, "inspect-trace", str(run.run_dir), "--json"], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    (y,) = json.loads(res.stdout)["recovery"]
    assert y["phases"] == x["phases"] and y["heal_bytes"] == x["heal_bytes"]
    text = subprocess.run(
        [*FTRUN, "inspect-trace", str(run.run_dir)], capture_output=True, text=True, timeout=120
    ).stdout
    assert "recovery · kill 1@15" in text and "unaccounted" in text


@pytest.mark.e2e
def test_heal_crosses_the_emulated_link_and_profile_recovery_off(tmp_path):
    from ftrun import linkcost

    run = run_train(tmp_path, "reclink", *RUN, "--link", "20mbit,5ms", "--profile-recovery", "off", timeout=240)
    assert run.rc == 0, run.explain()
    s = run.summary()
    (x,) = s["recovery"]["breakdown"]
    # the checkpoint transfer was held by the link's cost for its bytes (a recv between two groups)
    want = linkcost.collective_s("recv", x["heal_bytes"], 2, 20e6, 0.005)
    a, b = x["spans"]["heal"]
    assert abs((b - a) - want) <= 0.25 * want, (b - a, want)
    assert x["heal_link_hold_s"] > 0
    # --profile-recovery off: no recovery profile, the lifecycle log's timings are used
    assert run.manifest()["recovery_traces"] == []
    assert not (run.run_dir / "traces" / "recovery").exists()
    assert x["sources"]["heal"] == x["sources"]["reconfigure"] == "event log"
    assert all(x["phases"][k] is not None for k in PHASES), x
