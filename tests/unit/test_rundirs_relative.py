"""A compare's report.json records its run dirs relative to itself (issue 42 item 9): ``plan
--check COMPARE_DIR`` finds them from any cwd and after the runs and the compare dir moved
together; a report of an earlier ftrun (run dirs as given: cwd-relative) still reads from the
cwd it was written in. No process is started (the CLI runs in process, nothing trains)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from test_plan_cli import invoke, make_run

from ftrun import layout
from ftrun.comparison.outputs import as_recorded
from ftrun.json_out import report_json


def _compare(profiles: Path, by_compare: bool, monkeypatch: pytest.MonkeyPatch) -> Path:
    """profiles/base1 (a run) and profiles/cmp/report.json naming it "profiles/base1" as the cwd
    compare ran in saw it: recorded by this compare (``by_compare``), or as an earlier one did."""
    make_run(profiles / "base1")
    cmp_dir = profiles / "cmp"
    cmp_dir.mkdir()
    given = "profiles/base1"
    row = {
        "name": "baseline",
        "run_dir": given,
        "run_dirs": [given],
        "repeat_runs": [{"run_dir": given, "verdict": "pass"}],
        "per_sync_exposed_ms": 1000.0,
        "per_sync_exposed_control_ms": 60.0,
        "steps_per_s": 2.7,
        "link": {"bandwidth_bps": 8e6, "latency_s": 0.01, "describe": "8 Mbit/s, 10 ms"},
    }
    monkeypatch.chdir(profiles.parent)  # where compare ran
    result = msgspec.convert({"runs": [row]}, layout.CompareReport)
    if by_compare:
        result = as_recorded(result, Path("profiles/cmp"))
    (cmp_dir / "report.json").write_text(report_json(result))
    return cmp_dir


def test_recorded_relative_to_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cmp_dir = _compare(tmp_path / "work" / "profiles", True, monkeypatch)
    rec = json.loads((cmp_dir / "report.json").read_text())["runs"][0]
    assert rec["run_dir"] == "../base1" and rec["run_dirs"] == ["../base1"]
    assert rec["repeat_runs"][0]["run_dir"] == "../base1"
    monkeypatch.chdir(tmp_path)  # elsewhere: was "run dir profiles/base1 is missing"
    res = invoke("--check", str(cmp_dir))
    assert res.exit_code == 0, res.output
    (tmp_path / "work").rename(tmp_path / "moved")  # the runs and the compare dir, together
    res = invoke("--check", str(tmp_path / "moved" / "profiles" / "cmp"))
    assert res.exit_code == 0, res.output


def test_an_earlier_cwd_relative_record_still_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compare(tmp_path / "profiles", False, monkeypatch)
    res = invoke("--check", "profiles/cmp")
    assert res.exit_code == 0, res.output
