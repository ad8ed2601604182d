"""Recovery you can see, on real torchft groups (Gloo): kill 1 of 3 groups, relaunch it, and
break the time to its first commit into phases, each from its own records; with and without the
emulated link. ~25 s per training on 2 cores (3 trainings)."""

from __future__ import annotations

import json
import subprocess

import pytest

from ftrun.check.recovery import PHASES
from train_fixtures import FTRUN, RECOVERY_RUN, run_train

RUN = [*RECOVERY_RUN, "--profile", "3:8", "--steps", "90", "--kill", "1@15", "--restarts", "1"]


@pytest.mark.e2e
def test_kill_one_of_three_recovery_breakdown(tmp_path):
    run = run_train(tmp_path, "rec", *RUN, timeout=240)
    assert run.rc == 0, run.explain()
    s = run.summary()
    (x,) = s["recovery"]  # top level, as inspect-trace --json has it
    assert (x["fault"], x["replica"]) == ("kill 1@15", 1)
    # every phase happened, and each holds a positive share of the critical path; the phases cover
    # the fault -> first-commit time the summary measured on its own, within 10%; heal bytes =
    # what the source staged
    recovered = s["faults"]["faults"][0]["recovered_s"]
    assert recovered is not None
    _complete(x, recovered)
    assert x["unaccounted_s"] <= 0.10 * x["total_s"]
    # the relaunched group's own heal (on a slow machine a survivor that fell behind heals too:
    # seen once, replica 0 from replica 1 after the relaunched group's heal)
    heal = next(h for h in s["faults"]["heals"] if h["replica"] == 1)
    assert x["heal_source"] in (0, 2) and x["heal_source"] == heal["source_replica"]
    # the relaunched group was profiled through its first commit: its trace is beside the window
    # traces, and torchft's own configure / recv_checkpoint spans there were used
    # ... and so were the survivors, around the quorum change (same scheme, named by the fault)
    m = run.manifest()
    assert [t["path"] for t in m["recovery_traces"]] == [
        "traces/recovery/replica0_rank0.kill-r1-s15.pt.trace.json.gz",
        "traces/recovery/replica1_rank0.restart1.pt.trace.json.gz",
        "traces/recovery/replica2_rank0.kill-r1-s15.pt.trace.json.gz",
    ]
    assert all((run.run_dir / t["path"]).is_file() for t in m["recovery_traces"])
    assert x["sources"]["reconfigure"] == x["sources"]["heal"] == "trace"
    # detection and every participant's configure from the survivors' traces: evidence, not inference
    assert x["sources"]["detect"] == "trace" and "(traced)" in x["detect_bound"], x["detect_bound"]
    assert x["participant_sources"] == {"0": "trace", "1": "trace", "2": "trace"}
    assert set(x["reconfigure_participants"]) == {"0", "1", "2"}
    assert x["heal_send_source"] == "trace" and x["heal_send_s"] > 0
    # what bounded detection, from the manifest
    assert m["detection"] == {
        "heartbeat_timeout_ms": 2000,
        "join_timeout_ms": 10000,
        "quorum_tick_ms": 100,
        "lighthouse": "ftrun",
    }
    assert "heartbeat timeout" in x["detect_bound"]
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


def _complete(x, recovered_s=None):
    """Every phase happened with a positive share; the phases cover the total within 10%; the
    bytes the healer received are what the source staged."""
    assert all(x["phases"][k] is not None and x["phases"][k] > 0 for k in PHASES), x
    assert not x["reasons"], x["reasons"]
    total = recovered_s if recovered_s is not None else x["total_s"]
    assert abs(sum(x["phases"].values()) - total) <= 0.10 * total, (x, total)
    assert x["heal_bytes"] > 0 and x["heal_bytes"] == x["heal_bytes_sent"], x


@pytest.mark.e2e
def test_heal_crosses_the_emulated_link_as_linkcost_says_and_profile_recovery_off(tmp_path):
    """Two links, 4x apart: the heal's duration is linkcost's for its bytes on each (+-25%), so it
    grows with the slower link as linkcost says; the slower run without recovery profiles."""
    from ftrun import linkcost

    heal = {}
    for name, bw, extra in (("fast", 20e6, []), ("slow", 5e6, ["--profile-recovery", "off"])):
        run = run_train(tmp_path, name, *RUN, "--link", f"{bw / 1e6:g}mbit,5ms", *extra, timeout=240)
        assert run.rc == 0, run.explain()
        s = run.summary()
        (x,) = s["recovery"]
        _complete(x, s["faults"]["faults"][0]["recovered_s"])
        # the checkpoint transfer was held by the link's cost for its bytes (a recv between two groups)
        want = linkcost.collective_s("recv", x["heal_bytes"], 2, bw, 0.005)
        a, b = x["spans"]["heal"]
        assert abs((b - a) - want) <= 0.25 * want, (name, b - a, want)
        assert x["heal_link_hold_s"] > 0
        heal[name] = (b - a, want)
        if extra:  # --profile-recovery off: no recovery profile at all (relaunched or surviving), the logs' timings
            assert run.manifest()["recovery_traces"] == []
            assert not (run.run_dir / "traces" / "recovery").exists()
            assert x["sources"]["heal"] == x["sources"]["reconfigure"] == x["sources"]["detect"] == "event log"
            assert set(x["participant_sources"].values()) == {"event log"}
        else:
            assert x["sources"]["heal"] == x["sources"]["detect"] == "trace"
    (fast, fast_want), (slow, slow_want) = heal["fast"], heal["slow"]
    assert slow > fast and abs(slow / fast - slow_want / fast_want) <= 0.25 * (slow_want / fast_want), heal
