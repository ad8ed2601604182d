"""Issue 24 items 7, 8, 9, 17: every verdict says what the evidence says. Unit tests: no process."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

from train_fixtures import cli

DATA = Path(__file__).parent / "data" / "cpu_run"


def _two_runs(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "runA", tmp_path / "runB"
    shutil.copytree(DATA, a)
    shutil.copytree(DATA, b)
    return a, b


# --- item 8: compare --expect-hidden never prints PASS with exit 1 ---------------------------

def test_expect_hidden_just_above_the_observed_share_fails_everywhere(tmp_path):
    a, b = _two_runs(tmp_path)
    res = cli("compare", str(a), str(b), "--out", str(tmp_path), "--name", "probe", "--json")
    assert res.exit_code == 0, res.output[-500:]
    share = json.loads(res.output)["runs"][0]["hidden_comm_share"]
    want = (math.floor(share * 100) + 1) / 100  # e.g. 0.985 hidden, --expect-hidden 0.99
    assert share < want
    res = cli("compare", str(a), str(b), "--out", str(tmp_path), "--name", "exp", "--expect-hidden", str(want))
    assert res.exit_code == 1, res.output
    last = [ln for ln in res.output.splitlines() if ln.strip()][-1]
    assert last.strip() == "FAIL", res.output[-600:]
    exp_line = next(ln for ln in res.output.splitlines() if ln.startswith("--expect-hidden"))
    shown = float(exp_line.split(" hid ")[1].split("%")[0])
    assert shown < want * 100 and "below" in exp_line and exp_line.rstrip().endswith("FAIL"), exp_line
    report = json.loads((tmp_path / "exp" / "report.json").read_text())
    assert report["verdict"] == "fail" and report["expect_hidden"]["ok"] is False
    assert report["expect_hidden"]["observed"] == share  # the exact value, not a rounded one
    assert "FAIL" in (tmp_path / "exp" / "report.md").read_text()


def test_expect_hidden_met_passes(tmp_path):
    a, b = _two_runs(tmp_path)
    res = cli("compare", str(a), str(b), "--out", str(tmp_path), "--name", "ok", "--expect-hidden", "0.01")
    assert res.exit_code == 0, res.output[-500:]
    assert [ln for ln in res.output.splitlines() if ln.strip()][-1].strip() == "PASS"


def test_pct_against_shows_the_side_of_the_threshold():
    from ftrun.report.compare_view import pct_against

    assert pct_against(0.9853, 0.99) == "98.5%"
    assert pct_against(0.98999, 0.99) == "98.999%"
    assert pct_against(0.995, 0.99) == "99.5%"
    assert pct_against(0.99, 0.99) == "99%"


# --- item 17: the cause a run dir really tells ---------------------------------------------

def one_line(res) -> str:
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    return lines[0]


def test_a_run_that_died_before_its_window_says_so(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(DATA, run)
    m = json.loads((run / "manifest.json").read_text())
    m["traces"] = []  # died at step 12 of 40: the window 21-40 never ended
    (run / "manifest.json").write_text(json.dumps(m))
    shutil.rmtree(run / "traces")
    for log in (run / "events").glob("replica*.jsonl"):
        lines = [ln for ln in log.read_text().splitlines() if ln.strip() and json.loads(ln).get("step", 0) <= 12]
        log.write_text("\n".join(lines) + "\n")
    res = cli("inspect-trace", str(run))
    line = one_line(res)
    assert res.exit_code == 2
    assert "ended at step 12, before the end of its profiled window (steps 21-40)" in line, line
    assert "was the run profiled" not in line


def test_an_unprofiled_run_says_so(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(DATA, run)
    m = json.loads((run / "manifest.json").read_text())
    m["traces"], m["profile_windows"] = [], []
    (run / "manifest.json").write_text(json.dumps(m))
    shutil.rmtree(run / "traces")
    line = one_line(cli("inspect-trace", str(run)))
    assert "not profiled (--profile none)" in line


def test_an_interrupted_run_says_interrupted_run_not_give_the_schedule(tmp_path):
    """No manifest (SIGTERM, scancel): the run marker and spec.json, and the traces it wrote."""
    run = tmp_path / "run"
    shutil.copytree(DATA, run)
    (run / "manifest.json").unlink()
    (run / ".ftrun-run").write_text(json.dumps({"pid": 1}))
    spec = {"config": {"fragments": 2, "sync_every": 20, "fragment_sync_delay": 5}, "run_dir": str(run), "job_id": "j",
            "profile_window": [21, 40], "threads": 1, "link": None, "faults": [], "quorum_timeout_s": 60.0,
            "start_barrier": 2, "hostname": "127.0.0.1"}
    (run / "spec.json").write_text(json.dumps(spec))
    res = cli("inspect-trace", str(run))
    line = one_line(res)
    assert res.exit_code == 2 and "interrupted run" in line and str(run) in line, line
    assert "--fragments 2 --sync-every 20 --fragment-sync-delay 5" in line
    res = cli("inspect-trace", str(run), "--fragments", "2", "--sync-every", "20", "--fragment-sync-delay", "5")
    assert res.exit_code in (0, 1) and "Traceback" not in res.output, res.output  # checked, as asked
