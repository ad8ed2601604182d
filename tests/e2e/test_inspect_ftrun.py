"""inspect-trace on run dirs written by ``ftrun train`` (manifest + event logs)."""

from __future__ import annotations

import json
import shutil

import pytest

from ftrun.check.analyze import analyze
from ftrun.schedule import Schedule
from train_fixtures import inspect as run

pytestmark = pytest.mark.e2e  # every test here starts processes (or uses a fixture that trains)


@pytest.mark.parametrize("name", ["streaming", "baseline", "f3"])
def test_ftrun_runs_pass(ftrun_run, name):
    run_dir = ftrun_run(name)
    m = json.loads((run_dir / "manifest.json").read_text())
    res = run(str(run_dir), "--json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["verdict"] == "pass" and d["mode"] == "manifest"
    assert d["replicas"] == list(range(m["replicas"]))
    sch = m["schedule"]
    s = Schedule(sch["fragments"], sch["sync_every"], sch["fragment_sync_delay"])
    ((lo, hi),) = m["profile_windows"]
    want = [(e.kind, e.step, e.fragment) for e in s.events(hi) if lo <= e.step]
    for w in d["workers"]:
        assert w["source"] == "manifest" and w["step_source"] == "ftrun"
        got = [(e["kind"], e["observed_step"], e["fragment"]) for e in d["events"] if e["replica"] == w["replica"]]
        assert got == want
        assert w["totals"]["syncs"] == sum(k == "sync" for k, _, _ in want)
    assert d["failed_commits"] == [] and d["notes"] == []
    for e in d["events"]:
        assert e["ok"] and e["evidence"] in ("send sizes", "restore sizes") and e["fragment_checked"]
        assert e["fragment_candidates"] == [e["fragment"]]
        if e["kind"] == "send":
            assert e["numel"] == m["fragments"][e["fragment"]]["numel"]
            assert e["bytes"] == m["fragments"][e["fragment"]]["bytes"]
        else:
            assert e["exposed_comm_ms"] > 0 and e["send_to_done_ms"] > 0
            assert e["hidden_comm_ms"] <= e["send_to_done_ms"]  # the part of the flight the sync did not block on
    # table rendering
    res = run(str(run_dir))
    assert res.exit_code == 0 and "PASS" in res.output


def test_trace_files_and_traces_folder_use_the_manifest(ftrun_run):
    run_dir = ftrun_run("streaming")
    files = sorted((run_dir / "traces").glob("*.json.gz"))
    for args in ([str(run_dir / "traces")], [str(f) for f in files], [str(files[1])]):
        r = analyze(args)
        assert r.ok and r.mode == "manifest", args
        assert all(w.source == "manifest" for w in r.workers)
    assert [w.replica for w in analyze([str(files[1])]).workers] == [1]


def test_trace_outside_run_dir_uses_file_name(ftrun_run, tmp_path):
    run_dir = ftrun_run("streaming")
    for f in (run_dir / "traces").glob("*.json.gz"):
        shutil.copy(f, tmp_path / f.name)
    r = analyze([tmp_path], fragments=2, sync_every=20, fragment_sync_delay=5)
    assert r.ok and r.mode == "foreign"
    assert [(w.replica, w.source) for w in r.workers] == [(0, "file name"), (1, "file name")]


def test_manifest_and_flags_must_agree(ftrun_run):
    res = run(str(ftrun_run("streaming")), "--fragments", "3")
    assert res.exit_code == 2
    assert "--fragments 3 disagrees with" in res.output


def test_commit_failure_in_event_log_shifts_expectations(ftrun_run, tmp_path):
    # Claim the sync at step 30 failed to commit (cycle 2): torchft would then repeat fragment
    # 0 at steps 35/40; the trace shows fragment 1 there, so the check must now fail.
    root = tmp_path / "run"
    shutil.copytree(ftrun_run("streaming"), root)
    for log in (root / "events").glob("*.jsonl"):
        lines = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
        for rec in lines:
            if rec["step"] == 30:
                rec["commit"] = False
        log.write_text("".join(json.dumps(x) + "\n" for x in lines))
    res = run(str(root), "--json")
    assert res.exit_code == 1, res.output
    d = json.loads(res.output)
    assert all(w["failed_cycles"] == [2] for w in d["workers"])
    probs = [e["problem"] for e in d["events"] if not e["ok"]]
    assert "send at step 35: fragment 1, expected fragment 0" in probs, probs
    assert "sync at step 40: fragment 1, expected fragment 0" in probs, probs
    assert [(c["replica"], c["rank"], c["sync_step"], c["source"]) for c in d["failed_commits"]] == [
        (0, 0, 30, "event_log"),
        (1, 0, 30, "event_log"),
    ]
    assert (
        "replica 0 rank 0: 1 commit(s) failed (sync steps 30; event log: commit: false) and no injected fault "
        "explains it (--allow-failed-commits to accept)" in d["run_problems"]
    )
