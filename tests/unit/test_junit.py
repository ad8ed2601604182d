"""--junit FILE: well-formed JUnit (the schema's required elements and attributes), one case per
checked event class per worker, failures carrying the problem lines; sweep cells; never a pass
without evidence. Unit: on tests/data/cpu_run and its mutations, no process."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import msgspec
import pytest

from ftrun import layout
from ftrun.check.commits import FailedCommit
from ftrun.check.numerics_result import Numerics, unplaced_problem
from ftrun.check.result import numerics_of
from ftrun.report import junit as junit_view
from train_fixtures import drop_sync, inspect, junit_cases as cases, move_send, read, validate_junit as validate, write

DATA = Path(__file__).parent.parent / "data" / "cpu_run"


def test_a_passing_run(tmp_path):
    out = tmp_path / "ci.xml"
    res = inspect(str(DATA), "--junit", str(out))
    assert res.exit_code == 0, res.output
    root = validate(out)
    got = cases(root)
    assert set(got) == {(f"replica{r}.rank0", k) for r in (0, 1) for k in ("sends", "syncs", "commits")} | {
        ("run", "agreement")
    }
    assert root.get("tests") == "7" and root.get("failures") == "0"
    assert (
        "2 send(s) expected or observed, 2 observed, 0 not as expected"
        in got[("replica0.rank0", "sends")].find("system-out").text
    )
    assert not any(c.get("name") == "numerics" for c in root.iter("testcase"))  # no numeric check in this run: no case


def _mutated(tmp_path: Path, how) -> Path:
    run = tmp_path / "run"
    shutil.copytree(DATA, run)
    f = run / json.loads((run / "manifest.json").read_text())["traces"][0]["path"]
    d = read(f)
    how(d)
    write(f, d)
    return run


def test_a_moved_send_fails_its_cases_with_the_problem_lines(tmp_path):
    run = _mutated(tmp_path, lambda d: move_send(d, 25))
    out = tmp_path / "ci.xml"
    res = inspect(str(run), "--junit", str(out), "--json")
    assert res.exit_code == 1
    problems = json.loads(res.output)["problems"]
    root = validate(out)
    got = cases(root)
    failing = {k for k, c in got.items() if c.find("failure") is not None}
    assert failing == {("replica0.rank0", "sends"), ("run", "agreement")}
    sends = got[("replica0.rank0", "sends")].find("failure")
    assert sends.get("message") == "send of fragment 0 expected at step 25, observed at step 26"
    text = "\n".join(c.find("failure").text for c in got.values() if c.find("failure") is not None)
    for p in problems:  # every problem of the verdict is carried by a failing case
        assert p.split(": ", 1)[1] in text, p


def test_a_dropped_sync_and_every_problem_carried(tmp_path):
    run = _mutated(tmp_path, lambda d: drop_sync(d, 30))
    out = tmp_path / "ci.xml"
    assert inspect(str(run), "--junit", str(out)).exit_code == 1
    got = cases(validate(out))
    assert "sync of fragment 0 missing at step 30" in got[("replica0.rank0", "syncs")].find("failure").text
    assert got[("replica1.rank0", "syncs")].find("failure") is None


def _report(path=DATA):
    from ftrun.check.analyze import analyze

    return analyze([path])


def test_numerics_case_only_with_the_check():
    report = _report()
    assert numerics_of(report) is None
    assert "numerics" not in {c.name for c in junit_view.report_cases(report)}
    report.numerics = Numerics(status="checked").record()
    assert numerics_of(report) is None  # nothing checked is no evidence
    text = "sync step 30 (manager step 2, fragment 0) replica 1: average off"
    report.numerics = Numerics(status="checked", checked=4, problems=[unplaced_problem("average", "", text)]).record()
    got = {c.name: c for c in junit_view.report_cases(report)}
    assert got["numerics"].failures == ["sync step 30 (manager step 2, fragment 0) replica 1: average off"]
    assert "4 sync(s) checked" in got["numerics"].out


def test_failed_commits_fail_the_commits_case_unless_allowed(tmp_path):
    from ftrun.check.analyze import analyze

    run = tmp_path / "run"
    shutil.copytree(DATA, run)
    log = run / "events" / "replica1_rank0.jsonl"
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    for rec in lines:
        if rec.get("step") == 30 and "commit" in rec:
            rec["commit"] = False
    log.write_text("".join(json.dumps(x) + "\n" for x in lines))
    strict = {(c.classname, c.name): c for c in junit_view.report_cases(analyze([run]))}
    allowed = {(c.classname, c.name): c for c in junit_view.report_cases(analyze([run], allow_failed_commits=True))}
    assert strict[("replica1.rank0", "commits")].failures, strict
    assert "commit at sync step 30" in strict[("replica1.rank0", "commits")].failures[0]
    assert not allowed[("replica1.rank0", "commits")].failures
    assert "accepted" in allowed[("replica1.rank0", "commits")].out


def test_sweep_cells(tmp_path):
    result = {
        "name": "pgs",
        "cells": [
            {"name": "backend-gloo", "verdict": "pass", "wall_s": 10.5},
            {"name": "backend-baby-gloo", "verdict": "failed-commits", "problem": "4 commit(s) failed on 2 rank(s)"},
            {"name": "backend-x", "verdict": "fail", "problem": "replicas disagree on the synced parameters"},
            {"name": "backend-y", "verdict": "crashed", "problem": "exited 1"},
            {"name": "backend-nccl", "verdict": "unavailable", "problem": "no GPU visible on this host"},
            {"name": "tau-9", "verdict": "invalid", "problem": "--fragment-sync-delay 9: ..."},
        ],
    }
    out = tmp_path / "sweep.xml"
    out.write_text(junit_view.sweep_junit(msgspec.convert(result, layout.SweepResult)))
    root = validate(out)
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("6", "3", "2")
    got = cases(root)
    assert (
        got[("sweep", "backend-baby-gloo")].find("failure").get("message")
        == "failed-commits: 4 commit(s) failed on 2 rank(s)"
    )
    assert got[("sweep", "backend-nccl")].find("skipped").get("message") == "unavailable: no GPU visible on this host"
    assert got[("sweep", "backend-gloo")].get("time") == "10.500"


def test_xml_is_safe_for_any_text(tmp_path):
    c = junit_view.Case('a<b>&"', "x\x1by", ["bad \x00 text <tag> & more"])
    out = tmp_path / "x.xml"
    out.write_text(junit_view.to_xml([junit_view.Suite("s", [c])]))
    root = validate(out)
    (tc,) = root.iter("testcase")
    assert tc.get("classname") == 'a<b>&"' and tc.find("failure").text == "bad ? text <tag> & more"


@pytest.mark.parametrize("where", ["in-run-dir", "an-input"])
def test_junit_never_written_onto_what_is_read(tmp_path, where):
    run = tmp_path / "run"
    shutil.copytree(DATA, run)
    trace = run / json.loads((run / "manifest.json").read_text())["traces"][0]["path"]
    target = run / "ci.xml" if where == "in-run-dir" else trace
    before = trace.read_bytes()
    res = inspect(str(trace) if where == "an-input" else str(run), "--junit", str(target))
    assert res.exit_code == 2 and "--junit" in res.output, res.output
    assert trace.read_bytes() == before and not (run / "ci.xml").exists()


def test_sweep_refuses_junit_inside_its_dir(tmp_path):
    from train_fixtures import cli

    res = cli(
        "sweep",
        "--axis",
        "fragments=1,2",
        "--out",
        str(tmp_path),
        "--name",
        "s",
        "--junit",
        str(tmp_path / "s" / "j.xml"),
    )
    assert res.exit_code == 2 and "--junit" in res.output, res.output
    assert not (tmp_path / "s").exists()


def test_no_problem_is_lost():
    """A worker known only from its failed commits gets its failing case; a run problem of no
    known class lands in ``other``; a failing verdict never renders as all-pass."""
    import msgspec

    base = _report()
    lost = FailedCommit(replica=5, rank=0, sync_step=30, fragment=0, source="event_log", evidence="commit: false")
    line = "replica 5 rank 0: 1 commit(s) failed (...)"
    r = msgspec.structs.replace(
        base,
        verdict="fail",
        failed_commits=[lost],
        run_problems=[line, "something new"],
        run_problems_by_class={"traces": [], "agreement": [], "commits": [line]},
    )
    got = {(c.classname, c.name): c for c in junit_view.report_cases(r)}
    assert "commit at sync step 30" in got[("replica5.rank0", "commits")].failures[0]
    assert got[("run", "other")].failures == ["something new"]
    bare = msgspec.structs.replace(base, verdict="fail")
    assert {(c.classname, c.name): c.failures for c in junit_view.report_cases(bare)}[("run", "other")] == [
        "verdict fail"
    ]
