"""inspect-trace on traces from torchft's own DiLoCo loop (tests/foreign_diloco.py), no manifest."""

from __future__ import annotations

import json
import shutil

import pytest

from ftrun.check.analyze import analyze
from train_fixtures import FOREIGN, FOREIGN_FLAGS as FLAGS, ROOT, inspect as run

pytestmark = pytest.mark.e2e  # every test here starts processes (or uses a fixture that trains)

KW = dict(fragments=FOREIGN["fragments"], sync_every=FOREIGN["sync_every"], fragment_sync_delay=FOREIGN["delay"])


def test_foreign_passes_with_schedule_flags(foreign_traces):
    res = run(str(foreign_traces), *FLAGS, "--json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["verdict"] == "pass"
    assert d["replicas"] == [0, 1]
    assert len(d["files"]) == 4
    # H=8, F=2, tau=2 (w=4): sends at 2, 6, 10 | 14, 18, 22; syncs at 4, 8 | 16, 20.
    r0 = [(e["kind"], e["observed_step"], e["fragment"]) for e in d["events"] if e["replica"] == 0]
    assert r0 == [
        ("send", 2, 0),
        ("sync", 4, 0),
        ("send", 6, 1),
        ("sync", 8, 1),
        ("send", 10, 0),
        ("send", 14, 1),
        ("sync", 16, 1),
        ("send", 18, 0),
        ("sync", 20, 0),
        ("send", 22, 1),
    ]
    for e in d["events"]:
        assert {"replica", "rank", "kind", "fragment", "expected_step", "observed_step", "ok"} <= set(e)
        # no manifest: the fragments are told apart (classes) but which is fragment 0 is not in the trace
        assert not e["fragment_checked"] and e["fragment_basis"] == "class"
        assert e["fragment_candidates"] == [e["fragment"]]
        if e["kind"] == "sync":
            assert e["exposed_comm_ms"] > 0
            assert e["send_to_done_ms"] > 0 and e["should_commit_ms"] > 0
            # hidden is the part of the send's flight the sync did not block on
            assert e["hidden_comm_ms"] <= e["send_to_done_ms"]
            assert e["serialized"] == (e["serialized_collectives"] > 0) and e["serialized_collectives"] <= 2
            assert e["evidence"] == "restore sizes"
        else:
            assert e["evidence"] == "send sizes" and e["allreduces"] == 2
    # tau = 2 steps of compute between send and sync: streaming hides some communication
    assert any(e["hidden_comm_ms"] > 0 for e in d["events"] if e["kind"] == "sync")
    assert d["failed_commits"] == []
    assert "no event log: commits before and between the captured steps are assumed to have succeeded" in d["notes"]
    # Windows of one worker belong together; the replicas come from file order (no names/metadata).
    assert [(w["replica"], w["source"], len(w["files"])) for w in d["workers"]] == [
        (0, "file order", 2),
        (1, "file order", 2),
    ]
    assert all(c["ok"] for c in d["cross_replica"])


def test_foreign_table_output(foreign_traces):
    res = run(str(foreign_traces), *FLAGS)
    assert res.exit_code == 0, res.output
    assert "replica 1 rank 0" in res.output and "PASS" in res.output


def test_foreign_needs_schedule_flags(foreign_traces):
    res = run(str(foreign_traces), "--fragments", "2")
    assert res.exit_code == 2
    assert "no manifest.json" in res.output and "--sync-every" in res.output


def test_step_numbering_end_fails_and_auto_refuses_a_fit(foreign_traces):
    res = run(str(foreign_traces), *FLAGS, "--step-numbering", "end", "--json")
    assert res.exit_code == 1
    assert json.loads(res.output)["verdict"] == "fail"
    # the windows start after ProfilerStep#0: nothing proves the numbering, and a fit is no proof
    res = run(str(foreign_traces), *FLAGS, "--step-numbering", "auto")
    assert res.exit_code == 2, res.output
    assert "step numbering not proven" in res.output and "under 'top'" in res.output and "under 'end'" in res.output
    d = json.loads(run(str(foreign_traces), *FLAGS, "--json").output)
    assert d["step_numbering"]["used"] == "top" and not d["step_numbering"]["proven"]
    assert any(n.startswith("step numbering 'top' (as given, not proven") for n in d["notes"])


def test_second_window_alone_and_single_file(foreign_traces):
    # One window file of one worker: expectations only inside its captured steps (14..23).
    r = analyze([foreign_traces / "r0" / "step-24.json"], **KW)
    assert r.ok
    assert [(e.kind, e.observed_step) for e in r.events] == [
        ("send", 14),
        ("sync", 16),
        ("send", 18),
        ("sync", 20),
        ("send", 22),
    ]


def test_window_starting_with_sync_reports_send_not_captured(foreign_traces, tmp_path):
    # Cut the first window so it starts at ProfilerStep#4: its sync's send (step 2) is outside.
    d = json.loads((foreign_traces / "r0" / "step-12.json").read_text())
    start = next(e["ts"] for e in d["traceEvents"] if e.get("name") == "ProfilerStep#4")
    d["traceEvents"] = [e for e in d["traceEvents"] if e.get("ph") != "X" or e["ts"] >= start]
    p = tmp_path / "step-12.json"
    p.write_text(json.dumps(d))
    r = analyze([p], **KW)
    assert r.ok, r.problems()
    first = r.events[0]
    assert (first.kind, first.observed_step, first.fragment) == ("sync", 4, 0)
    assert "send not captured (before the profiled steps)" in first.notes
    assert first.evidence == "restore sizes" and first.sync.send_captured is False


def test_replica_from_file_name(foreign_traces, tmp_path):
    for r in (0, 1):
        for n in (12, 24):
            shutil.copy(foreign_traces / f"r{r}" / f"step-{n}.json", tmp_path / f"replica{1 - r}_rank0.{n}.json")
    r = analyze([tmp_path], **KW)
    assert r.ok
    assert [(w.replica, w.source, len(w.files)) for w in r.workers] == [(0, "file name", 2), (1, "file name", 2)]


def test_distributed_info_is_shown_never_taken_as_the_replica(foreign_traces, tmp_path):
    """distributedInfo.rank is the default group's (global) rank: file order numbers the replicas."""
    for r in (0, 1):
        d = json.loads((foreign_traces / f"r{r}" / "step-24.json").read_text())
        d["distributedInfo"] = {"backend": "gloo", "rank": 1 - r, "world_size": 2}
        (tmp_path / f"a{r}.json").write_text(json.dumps(d))
    rep = analyze([tmp_path / "a0.json", tmp_path / "a1.json"], **KW)
    assert rep.ok
    assert [(w.replica, w.source, w.files[0][-7:], w.global_rank_text()) for w in rep.workers] == [
        (0, "file order", "a0.json", "global rank 1 of 2"),
        (1, "file order", "a1.json", "global rank 0 of 2"),
    ]


def test_prof_step_at_loop_end(tmp_path):
    # prof.step() at the END of the loop, the window from ProfilerStep#0 (wait 0, warmup 0): #0
    # holds step 1's optimizer step, which proves 'end'; 'top' given contradicts the trace and fails.
    import subprocess
    import sys

    out = tmp_path / "end"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests" / "foreign_diloco.py"),
            "--out",
            str(out),
            "--step-at",
            "end",
            "--steps",
            "14",
            "--repeat",
            "1",
            "--wait",
            "0",
            "--warmup",
            "0",
            "--active",
            "12",
            "--fragments",
            "2",
            "--sync-every",
            "8",
            "--fragment-sync-delay",
            "2",
        ],
        check=True,
        capture_output=True,
        timeout=240,
    )
    top = analyze([out], **KW)
    assert not top.ok
    assert any("--step-numbering top contradicts the trace" in p for p in top.run_problems), top.run_problems
    assert analyze([out], **KW, step_numbering="end").ok
    r = analyze([out], **KW, step_numbering="auto")
    assert r.ok and r.step_numbering.used == "end" and r.step_numbering.proven
    assert "ProfilerStep#0 holds an optimizer step" in r.step_numbering.evidence
    # ProfilerStep#0..#11 = steps 1..12
    assert [(e.kind, e.observed_step) for e in r.events if e.replica == 0] == [
        ("send", 2),
        ("sync", 4),
        ("send", 6),
        ("sync", 8),
        ("send", 10),
        ("sync", 12),
    ]
