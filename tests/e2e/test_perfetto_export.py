"""``inspect-trace --export-perfetto``: the original trace events, one process per worker, and a
``ftrun verdicts`` track with one event per send/sync carrying expected vs observed."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from ftrun.report.perfetto import VERDICT_THREAD
from train_fixtures import FOREIGN_FLAGS, inspect, move_send, read, write

pytestmark = pytest.mark.e2e  # every test here starts processes (or uses a fixture that trains)


def export(tmp_path: Path, *paths: Path, name: str = "out.json") -> tuple[int, dict, dict]:
    out = tmp_path / name
    res = inspect(*map(str, paths), "--json", "--export-perfetto", str(out))
    assert res.exit_code in (0, 1), res.output
    report = json.loads(res.output)
    raw = out.read_bytes()
    trace = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return res.exit_code, report, trace


def processes(trace: dict) -> dict[int, str]:
    return {
        e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("ph") == "M" and e["name"] == "process_name"
    }


def verdicts(trace: dict) -> dict[int, list[dict]]:
    vt = {
        (e["pid"], e["tid"])
        for e in trace["traceEvents"]
        if e.get("ph") == "M" and e["name"] == "thread_name" and e["args"]["name"] == VERDICT_THREAD
    }
    out: dict[int, list[dict]] = {}
    for e in trace["traceEvents"]:
        if (e.get("pid"), e.get("tid")) in vt and e.get("ph") != "M":
            out.setdefault(e["pid"], []).append(e)
    return out


def test_export_keeps_events_and_adds_a_verdict_per_send_and_sync(ftrun_run, tmp_path):
    run_dir = ftrun_run("streaming")
    code, report, trace = export(tmp_path, run_dir)
    assert code == 0 and report["perfetto"]["path"] == str(tmp_path / "out.json")
    procs = processes(trace)
    assert sorted(procs.values()) == ["replica 0 rank 0", "replica 1 rank 0"]
    pid_of = {name: pid for pid, name in procs.items()}
    by_pid = verdicts(trace)
    for w in report["workers"]:
        pid = pid_of[f"replica {w['replica']} rank {w['rank']}"]
        mine = [e for e in report["events"] if e["replica"] == w["replica"] and e["rank"] == w["rank"]]
        got = sorted(by_pid[pid], key=lambda e: e["ts"])
        assert len(got) == len(mine) > 0
        for e, v in zip(sorted(mine, key=lambda e: e["ts_us"]), got, strict=False):
            assert v["name"] == f"{e['kind']} frag {e['fragment']} ok"
            assert v["ph"] in ("i", "X")
            # an instant at the event; a sync's span from its first wait (ftrun's wait right
            # before perform_sync, when the numeric check waited there: ftrun.check.comm)
            assert v["ts"] == e["ts_us"] if v["ph"] == "i" else e["ts_us"] - 1e6 < v["ts"] <= e["ts_us"]
            a = v["args"]
            assert (a["expected_step"], a["observed_step"], a["fragment"], a["verdict"]) == (
                e["expected_step"],
                e["observed_step"],
                e["fragment"],
                "ok",
            )
            if e["kind"] == "sync":
                assert a["exposed_comm_ms"] == e["exposed_comm_ms"] and a["hidden_comm_ms"] == e["hidden_comm_ms"]
                assert "serialized" in a
                if v["ph"] == "X":
                    assert abs(v["dur"] - e["exposed_comm_ms"] * 1000) < 1.0
            else:
                assert a["bytes"] == e["bytes"]
        # every original event of the worker's trace is there, in its own process
        (f,) = w["files"]
        orig = [e for e in read(Path(f))["traceEvents"] if e.get("ph") == "X"]
        kept = [
            e
            for e in trace["traceEvents"]
            if e.get("pid") == pid and e.get("ph") == "X" and e.get("cat") != "ftrun,verdict"
        ]
        assert len(kept) == len(orig)
        assert sorted((e["name"], e["ts"]) for e in kept) == sorted((e["name"], e["ts"]) for e in orig)
    assert trace["otherData"]["ftrun_verdict"] == "pass"


def test_export_of_a_failing_trace_names_the_failures(ftrun_run, tmp_path):
    root = tmp_path / "run"
    shutil.copytree(ftrun_run("streaming"), root)
    m = json.loads((root / "manifest.json").read_text())
    f0 = root / next(t["path"] for t in m["traces"] if t["replica"] == 0)
    d = read(f0)
    first_send = min(
        e["step"] for e in m["expected"] if e["kind"] == "send" and e["step"] >= m["profile_windows"][0][0]
    )
    move_send(d, first_send)
    write(f0, d)
    code, report, trace = export(tmp_path, root, name="fail.json.gz")
    assert code == 1 and report["verdict"] == "fail"
    procs = {name: pid for pid, name in processes(trace).items()}
    v0 = verdicts(trace)[procs["replica 0 rank 0"]]
    frag = next(
        e["expected_fragment"] for e in report["events"] if e["replica"] == 0 and e["expected_step"] == first_send
    )
    want = f"send frag {frag} FAIL: expected step {first_send}, observed {first_send + 1}"
    hit = [v for v in v0 if v["name"] == want]
    assert hit, sorted(v["name"] for v in v0)
    assert hit[0]["args"]["verdict"] == "FAIL" and hit[0]["args"]["expected_step"] == first_send
    assert hit[0]["args"]["observed_step"] == first_send + 1 and "expected at step" in hit[0]["args"]["problem"]
    assert any(v["name"].startswith("cross-replica FAIL: send at step") for v in v0)
    # the untouched replica's verdicts stay ok
    assert all(
        v["name"].endswith(" ok")
        for v in verdicts(trace)[procs["replica 1 rank 0"]]
        if "cross-replica" not in v["name"]
    )
    assert trace["otherData"]["ftrun_verdict"] == "fail"


def test_export_to_an_unwritable_path_is_exit_2(ftrun_run, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    res = inspect(str(ftrun_run("streaming")), "--export-perfetto", str(blocker / "out.json"))
    assert res.exit_code == 2 and "--export-perfetto" in res.output


def test_export_of_foreign_traces_with_two_windows_per_worker(foreign_traces, tmp_path):
    out = tmp_path / "foreign.json"
    res = inspect(str(foreign_traces), *FOREIGN_FLAGS, "--json", "--export-perfetto", str(out))
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    trace = json.loads(out.read_text())
    procs = processes(trace)
    assert sorted(procs.values()) == [f"replica {w['replica']} rank {w['rank']}" for w in report["workers"]]
    by_pid = verdicts(trace)
    assert sum(len(v) for v in by_pid.values()) == len(report["events"])
    assert all(v["name"].endswith(" ok") for vs in by_pid.values() for v in vs)
    # both windows of a worker land in its one process; flow ids never join two workers
    for w in report["workers"]:
        assert len(w["files"]) == 2
    flows: dict[int, set[int]] = {}
    for e in trace["traceEvents"]:
        if e.get("ph") in ("s", "f") and isinstance(e.get("id"), int):
            flows.setdefault(e["id"], set()).add(e["pid"])
    assert all(len(p) == 1 for p in flows.values())
