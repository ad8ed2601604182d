"""A damaged or deleted event-log record fails the check, naming what is missing (never a
smaller count); and the API's assert_numerics / assert_schedule agree with the CLI: fail on any
problem, with the problems' text lines. On a copy of tests/data/cpu_run (profiled steps 21-40,
syncs at 30 and 40 on both replicas), edited by hand; no process started."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest

import ftrun
from ftrun.check.log_evidence import evidence_problems
from ftrun.event_log import EventLog
from ftrun.layout import EventRecord
from ftrun.pytest_plugin import NotChecked, assert_numerics, assert_schedule
from train_fixtures import event_record

DATA = Path(__file__).parent.parent / "data" / "cpu_run"


def _run(tmp_path: Path, edit) -> tuple[Path, Path]:
    run = tmp_path / "run"
    shutil.copytree(DATA, run)
    log = run / "events" / "replica1_rank0.jsonl"
    lines = log.read_text().splitlines()
    i = next(i for i, x in enumerate(lines) if json.loads(x)["step"] == 30)
    assert json.loads(lines[i])["synced"] == 0
    log.write_text("".join(x + "\n" for x in edit(lines, i)))
    return run, log


def _numerics_lines(report) -> list[str]:
    return [p for p in report.problems if p.startswith("numerics: ")]


def test_the_stored_run_has_nothing_missing():
    r = ftrun.check_traces(DATA)
    assert r.ok and not _numerics_lines(r)


def test_a_deleted_sync_record_fails_naming_it(tmp_path):
    run, log = _run(tmp_path, lambda lines, i: lines[:i] + lines[i + 1 :])
    r = ftrun.check_traces(run)
    assert not r.ok
    assert _numerics_lines(r) == [
        f"numerics: {log}:30: step 31 follows step 29 of the same incarnation (line 29): "
        "the record of step 30 is missing",
        "numerics: replica 1 rank 0's record of the sync at step 30 is missing (its trace shows the sync)",
    ]


def test_a_sync_record_cut_in_half_fails_naming_file_and_line(tmp_path):
    run, log = _run(tmp_path, lambda lines, i: [*lines[:i], lines[i][: len(lines[i]) // 2], *lines[i + 1 :]])
    r = ftrun.check_traces(run)
    assert not r.ok
    got = _numerics_lines(r)
    assert got[0].startswith(f"numerics: {log}:30: a cut record, not where its writer ended"), got
    assert got[1] == "numerics: replica 1 rank 0's record of the sync at step 30 is missing (its trace shows the sync)"


def test_a_nan_in_a_record_fails(tmp_path):
    run, log = _run(
        tmp_path, lambda lines, i: [*lines[:i], lines[i].replace('"loss": 3.', '"loss": NaN, "x": 3.'), *lines[i + 1 :]]
    )
    r = ftrun.check_traces(run)
    assert not r.ok and _numerics_lines(r)[0].startswith(f"numerics: {log}:30: a damaged record (JSON is malformed")


def test_a_traced_worker_without_its_log_is_named():
    logs = {(0, 0): EventLog([EventRecord(**event_record(10, synced=0, commit=True))])}
    assert evidence_problems(logs, {(0, 0): [10], (1, 0): [10, 20]}) == [
        "replica 1 rank 0 has no event log: its trace shows syncs at step(s) 10, 20"
    ]
    assert evidence_problems({}, {(1, 0): [10]}) == []  # no logs: nothing counts them


# --- the API agrees with the CLI ---------------------------------------------------------


def test_assert_numerics_fails_on_a_problem_even_when_no_sync_counted(tmp_path):
    run, _ = _run(tmp_path, lambda lines, i: lines[:i] + lines[i + 1 :])
    r = ftrun.check_traces(run)
    assert r.numerics is not None and r.numerics["checked"] == 0  # (nothing counted: the run has no sketches)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NotChecked)
        with pytest.raises(AssertionError) as e:
            assert_numerics(r)
    msg = str(e.value)
    assert msg.splitlines()[1:] == _numerics_lines(r), msg
    assert "{" not in msg and "tolerance" not in msg, msg  # text lines, not dict reprs
    with pytest.raises(AssertionError) as e:
        assert_schedule(r)
    assert "numerics: replica 1 rank 0's record of the sync at step 30 is missing" in str(e.value)


def test_assert_numerics_warns_only_when_nothing_was_there_to_check():
    with pytest.warns(NotChecked, match="numerics not checked"):
        assert_numerics(ftrun.check_traces(DATA))


def test_norms_too_large_for_a_finite_tolerance_are_no_pass():
    """Norms near the double's limit make the budget infinite: every error would fit it."""
    from ftrun.check.numerics import check_numerics
    from ftrun.layout import RoundNumerics, Sketch

    def part(phase, **sketch):
        return RoundNumerics(phase, 0, 0, 1, sync_step=10, participants=2, participating=True, world=2, **sketch)

    big = [Sketch([1.0, 2.0, 3.0, 4.0], 1e308, 8, "float32") for _ in range(2)]
    total = Sketch([2.0, 4.0, 6.0, 8.0], None, 8, "float32")
    wrong = Sketch([9.0, 9.0, 9.0, 9.0], None, 8, "float32")  # not SUM / 2
    logs = {
        (r, 0): EventLog(
            [
                EventRecord(
                    **event_record(5, quorum_id=1, participants=2, numerics=[part("send", contribution=big[r])])
                ),
                EventRecord(
                    **event_record(
                        10,
                        synced=0,
                        commit=True,
                        quorum_id=1,
                        participants=2,
                        numerics=[part("sync", sum=total, average=wrong)],
                    )
                ),
            ]
        )
        for r in range(2)
    }
    out = check_numerics(logs, sketches_on=True)
    assert not out.ok and {p.check for p in out.problems} == {"sum", "average"}, out.problems
    assert all(p.cause.startswith("norms too large for a finite tolerance") for p in out.problems)
