"""summary.json is read by its type (``layout.read_train_summary`` -> ``TrainSummary``) in every
reader: ``ftrun.Run.summary``, compare's recovery row and timeline lanes, sweep's cell metrics.
A summary of an earlier format is refused in one line naming it; a broken or foreign one is one line naming the file
(exit 2 at the CLI). Unit tests: no process."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import msgspec
import pytest

import ftrun
from ftrun import layout
from ftrun.errors import BadInput
from train_fixtures import CPU_RUN, cli, one_line, recovery_record, train_summary, two_runs

STORY = {
    "faults": [{"action": "kill", "replica": 1, "step": 25, "recovered_s": 7.5}],
    "restarts": 1,
    "heals": [{"replica": 1, "step": 26, "source_replica": 0, "peer_step": 2, "manager_step": 2}],
    "commits_lost": 2,
}
BREAKDOWN = [recovery_record()]
RECORDS = msgspec.convert(BREAKDOWN, list[layout.RecoveryRecord])  # as summary.json decodes it


def _run_dir(tmp_path: Path, summary: object, name: str = "run") -> Path:
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    text = summary if isinstance(summary, str) else json.dumps(summary)
    (d / layout.SUMMARY).write_text(text)
    return d


def _without(d: dict, *keys: str) -> dict:
    return {k: v for k, v in d.items() if k not in keys}


def test_the_summary_train_writes_reads_back_as_the_same_record(tmp_path: Path) -> None:
    s = msgspec.convert(train_summary(faults=STORY, recovery=BREAKDOWN), layout.TrainSummary)
    d = tmp_path / "run"
    d.mkdir()
    (d / layout.SUMMARY).write_text(layout.to_json(s, indent=1))
    got = layout.read_train_summary(d)
    assert got == s and got.replicas[1].last_step == 60 and got.recovery == RECORDS


def test_summaries_of_earlier_formats_are_refused_in_one_line_naming_the_format(tmp_path: Path) -> None:
    """One rule for old run-dir files (``layout.refuse_format``): a summary without ``format``
    (format 1: the first ftrun's, the one with the breakdown inside ``recovery``) or of another
    format is refused, not converted."""
    first = _without(train_summary(), "devices", "numerics", "traces_note", "versions", "faults", "recovery", "format")
    earlier = _without(train_summary(recovery={**STORY, "breakdown": BREAKDOWN}), "faults", "format")
    for name, summary, got in [("first", first, 1), ("earlier", earlier, 1), ("later", train_summary(format=3), 3)]:
        d = _run_dir(tmp_path, summary, name)
        with pytest.raises(BadInput) as e:
            layout.read_train_summary(d)
        assert str(e.value) == (
            f"{d / layout.SUMMARY}: run dir format {got}, this ftrun reads format {layout.FORMAT} "
            "(read it with the ftrun that wrote it, or run it again with this one)"
        )
    # a key another ftrun of this format adds is ignored, never refused
    assert layout.read_train_summary(_run_dir(tmp_path, train_summary(later_key=1), "later-key")).ok


@pytest.mark.parametrize(
    "content, says",
    [
        (None, "unreadable summary (no such file)"),
        ("{not json", "unreadable summary (JSON is malformed"),
        ("[1, 2]", "not an ftrun summary (Expected `object`, got `array`)"),
        (
            _without(train_summary(), "replicas"),
            "not an ftrun train summary (Object missing required field `replicas`)",
        ),
        (train_summary(replicas=[{"replica": "zero"}]), "not an ftrun train summary (Expected `int`, got `str`"),
        (
            {"run_dir": "r", "script": "s.py", "seconds": 1.0, "groups": [], "ok": True, "format": layout.FORMAT},
            "an ftrun launch summary; this reads the summaries of ftrun train run dirs",
        ),
    ],
)
def test_a_broken_or_foreign_summary_is_one_line_naming_the_file(tmp_path: Path, content, says) -> None:
    d = tmp_path / "run"
    d.mkdir()
    if content is not None:
        _run_dir(tmp_path, content)
    with pytest.raises(BadInput) as e:
        layout.read_train_summary(d)
    assert str(e.value).startswith(f"{d / layout.SUMMARY}: {says}") and "\n" not in str(e.value)


def test_the_read_is_bounded_and_never_opens_a_fifo(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("ftrun.layout.summary.SUMMARY_LIMIT", 100)
    d = _run_dir(tmp_path, train_summary())
    with pytest.raises(BadInput, match=r"summary.json: unreadable summary \(more than 100 bytes\)"):
        layout.read_train_summary(d)
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    import os

    os.mkfifo(fifo / layout.SUMMARY)
    with pytest.raises(BadInput, match="unreadable summary .not a regular file"):
        layout.read_train_summary(fifo)  # (an open would wait for a writer)


def _stored_run(tmp_path: Path, summary: dict) -> Path:
    run = tmp_path / "stored"
    shutil.copytree(CPU_RUN, run)
    (run / layout.SUMMARY).write_text(json.dumps(summary))
    return run


def test_run_summary_is_the_typed_record_and_the_dict_spelling_still_reads_with_a_warning(tmp_path: Path) -> None:
    run = ftrun.Run(_stored_run(tmp_path, train_summary(faults=STORY)))
    s = run.summary
    assert isinstance(s, layout.TrainSummary) and [r.last_step for r in s.replicas] == [60, 60]
    assert s.faults.restarts == 1 and s.faults.faults[0].recovered_s == 7.5 and s.agreement.ok
    with pytest.warns(DeprecationWarning, match=r"Run.summary.faults is a FaultHistory .*not faults\['restarts'\]"):
        assert s.faults["restarts"] == 1  # the earlier dict's spelling
    with pytest.warns(DeprecationWarning, match=r"read summary.FIELD, not summary\['replicas'\]"):
        assert [r["last_step"] for r in s["replicas"]] == [60, 60]  # the earlier dict's values
    with pytest.warns(DeprecationWarning):
        assert s.get("agreement")["ok"] is True and s.get("nope", 5) == 5
    with pytest.warns(DeprecationWarning):
        assert "numerics" in s and "nope" not in s
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.warns(DeprecationWarning), pytest.raises(KeyError):
            s["nope"]  # noqa: B018
    broken = tmp_path / "broken"
    shutil.copytree(CPU_RUN, broken)
    (broken / layout.SUMMARY).write_text(f'{{"ok": true, "format": {layout.FORMAT}}}')
    with pytest.raises(ftrun.BadInput, match="summary.json: not an ftrun train summary"):
        ftrun.Run(broken).summary  # noqa: B018


def test_compares_readers_take_the_summary_and_leave_out_a_run_without_one(tmp_path: Path) -> None:
    from ftrun.check.metrics import recovery_of
    from ftrun.comparison.outputs import _breakdown

    new = _run_dir(tmp_path, train_summary(faults=STORY, recovery=BREAKDOWN), "new")
    none = tmp_path / "none"
    none.mkdir()
    for d in (new,):
        rec = recovery_of([d, none])
        assert rec is not None and rec.faults == ["kill 1@25"] and rec.recovery_s == [7.6]
        assert _breakdown([none, d]) == RECORDS
    assert recovery_of([none]) is None and _breakdown(none) == []


def test_compare_refuses_a_broken_summary_with_one_line(tmp_path: Path) -> None:
    a, b = two_runs(tmp_path)
    (b / layout.SUMMARY).write_text(f'{{"run_dir": 3, "format": {layout.FORMAT}}}')
    res = cli("compare", str(a), str(b), "--out", str(tmp_path / "out"))
    assert res.exit_code == 2, res.output
    line = one_line(res)
    assert f"{b / layout.SUMMARY}: not an ftrun train summary" in line


def test_a_sweep_cell_with_a_broken_summary_names_the_file_and_the_sweep_goes_on(tmp_path: Path) -> None:
    from ftrun import grid
    from ftrun.sweep.evaluate import evaluate, recovery_metrics

    cell = grid.product([grid.Axis("steps", (8,))])[0]
    run_dir = _run_dir(tmp_path, "[]", cell.name)
    got = evaluate(cell, run_dir, 0, "")
    assert got.verdict == "fail"
    assert got.problem == f"{run_dir / layout.SUMMARY}: not an ftrun summary (Expected `object`, got `array`)"
    s = msgspec.convert(train_summary(recovery=BREAKDOWN), layout.TrainSummary)
    assert recovery_metrics(s) == (7.6, "relaunch", 3.25) and recovery_metrics(None) == (None, None, None)
