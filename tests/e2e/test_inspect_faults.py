"""inspect-trace and faults, on a copy of a real run dir whose manifest and event logs are edited
to tell a fault's story (the real kill + restart run is in test_faults.py): a replica without a
trace fails unless a fired fault explains it, and the steps it lost are reported."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from train_fixtures import inspect

pytestmark = pytest.mark.e2e  # every test here starts processes (or uses a fixture that trains)


def without_replica1_trace(ftrun_run, tmp_path: Path) -> tuple[Path, dict]:
    root = tmp_path / "run"
    shutil.copytree(ftrun_run("streaming"), root)
    m = json.loads((root / "manifest.json").read_text())
    for t in [t for t in m["traces"] if t["replica"] == 1]:
        (root / t["path"]).unlink()
        m["traces"].remove(t)
    (root / "manifest.json").write_text(json.dumps(m))
    return root, m


def fire(root: Path, m: dict, step: int, rejoin: int | None) -> None:
    """Record a SIGKILL of replica 1 at ``step``; its log continues at ``rejoin`` after a heal."""
    log = root / "events" / "replica1_rank0.jsonl"
    recs = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    before = [r for r in recs if r["step"] < step]
    t = before[-1]["t"]
    m["faults"] = {
        "planned": [{"replica": 1, "step": step, "action": "kill", "seconds": 0.0}],
        "fired": [
            {
                "replica": 1,
                "step": step,
                "action": "kill",
                "seconds": 0.0,
                "fired_at": t + 0.001,
                "fired_step": step,
                "pid": 1,
            }
        ],
        "max_restarts": 1,
    }
    (root / "manifest.json").write_text(json.dumps(m))
    out = list(before)
    if rejoin is not None:
        out.append({**before[-1], "step": None, "t": t + 1, "commit": None, "fingerprint": None, "restart": 1})
        after = [dict(r) for r in recs if r["step"] >= rejoin]
        after[0].update(
            rejoined={"local_step": 2, "aligned_step": rejoin},
            healed={"source_replica": 0, "peer_step": rejoin, "manager_step": after[0]["manager_step"]},
        )
        out += [{**r, "t": t + 2 + i} for i, r in enumerate(after)]
    log.write_text("".join(json.dumps(r) + "\n" for r in out))
    # the real run's sketches say both groups took part in every round, which the doctored kill
    # contradicts (the numeric check would rightly find replica 1's missing): this fault story
    # is told without them, as by a run with --no-sketches
    for path in (root / "events").glob("replica*_rank*.jsonl"):
        kept = [
            {k: v for k, v in json.loads(x).items() if k not in ("numerics", "heal_numerics")}
            for x in path.read_text().splitlines()
            if x.strip()
        ]
        path.write_text("".join(json.dumps(r) + "\n" for r in kept))
    m = json.loads((root / "manifest.json").read_text())
    m["config"]["profiling"]["sketches"] = False
    (root / "manifest.json").write_text(json.dumps(m))


def test_replica_without_trace_and_without_fault_fails(ftrun_run, tmp_path):
    root, _ = without_replica1_trace(ftrun_run, tmp_path)
    res = inspect(str(root), "--json")
    assert res.exit_code == 1, res.output
    d = json.loads(res.output)
    assert "no trace for replica 1 (no fault explains it)" in d["problems"] and d["replicas"] == [0]


def test_fault_explains_missing_trace_and_marks_lost_steps(ftrun_run, tmp_path):
    root, m = without_replica1_trace(ftrun_run, tmp_path)
    fire(root, m, 25, 32)
    res = inspect(str(root), "--json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    (f,) = d["faults"]
    assert (f["replica"], f["action"], f["step"], f["lost_steps"], f["rejoined_step"]) == (1, "kill", 25, [25, 31], 32)
    assert not f["never_rejoined"] and not f["has_trace"]
    assert f["heal"]["source_replica"] == 0 and f["heal"]["step"] == 32
    assert "replica 1: SIGKILL at step 25, lost steps 25-31, rejoined at step 32, healed from replica 0" in f["text"]
    assert d["verdict"] == "pass" and not d["problems"]
    res = inspect(str(root))
    assert res.exit_code == 0 and "lost steps 25-31" in res.output.replace("\n", " ")


def test_fault_never_rejoined(ftrun_run, tmp_path):
    root, m = without_replica1_trace(ftrun_run, tmp_path)
    fire(root, m, 25, None)
    d = json.loads(inspect(str(root), "--json").output)
    (f,) = d["faults"]
    assert f["lost_steps"] == [25, 40] and f["never_rejoined"] and f["rejoined_step"] is None
    assert "never rejoined" in f["text"] and d["verdict"] == "pass"


def test_fault_of_another_replica_does_not_excuse_a_missing_trace(ftrun_run, tmp_path):
    root, m = without_replica1_trace(ftrun_run, tmp_path)
    fire(root, m, 25, 32)
    m = json.loads((root / "manifest.json").read_text())
    for f in m["faults"]["fired"]:
        f["replica"] = 0
    (root / "manifest.json").write_text(json.dumps(m))
    d = json.loads(inspect(str(root), "--json").output)
    assert d["verdict"] == "fail" and "no trace for replica 1 (no fault explains it)" in d["problems"]
