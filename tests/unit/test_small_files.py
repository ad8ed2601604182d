"""Every run-dir record, event log and --config file is read bounded (``ftrun.small_files``):
regular files only (a FIFO is never waited on, a device never read), at most a named limit,
and what is broken or too big is one ``BadInput`` line naming the file (exit 2 at the CLI).
``ftrun launch``'s summary.json has its typed reader (``layout.read_launch_summary``), which
refuses the summaries of an earlier format in one line. Unit tests: no process is started."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ftrun import event_log, layout, small_files
from ftrun.errors import BadInput
from train_fixtures import cli, event_record, one_line

pytestmark = pytest.mark.usefixtures("deadline")  # a read that blocks on a FIFO fails, not hangs


def _one_line(e: pytest.ExceptionInfo, path: Path, says: str) -> None:
    msg = str(e.value)
    assert msg.startswith(f"{path}: ") and says in msg and "\n" not in msg, msg


# --- the one bounded read -----------------------------------------------------------------


def test_read_file_reads_up_to_the_limit_and_refuses_one_byte_more(tmp_path: Path) -> None:
    p = tmp_path / "f.json"
    p.write_bytes(b"x" * 100)
    assert small_files.read_file(p, 100, "thing") == b"x" * 100
    with pytest.raises(BadInput) as e:
        small_files.read_file(p, 99, "thing")
    _one_line(e, p, "unreadable thing (more than 99 bytes)")
    assert small_files.describe_size(64 << 20) == "64 MB" and small_files.describe_size(64 << 10) == "64 KB"


def test_read_file_never_opens_a_fifo_a_device_or_a_directory_and_says_missing(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # (a blocking open would wait for a writer: the deadline fails the test)
    dev = tmp_path / "dev"
    dev.symlink_to("/dev/zero")  # (a read would never end)
    for path, kind in ((fifo, "a FIFO"), (dev, "a character device"), (tmp_path, "a directory")):
        with pytest.raises(BadInput) as e:
            small_files.read_file(path, 1 << 20, "thing")
        _one_line(e, path, f"unreadable thing (not a regular file: {kind})")
    with pytest.raises(small_files.Missing) as e:
        small_files.read_file(tmp_path / "nope", 10, "thing")
    _one_line(e, tmp_path / "nope", "unreadable thing (no such file)")


def test_read_head_and_last_byte_read_only_what_they_say(tmp_path: Path) -> None:
    p = tmp_path / "f"
    p.write_bytes(b"0123456789\n")
    assert small_files.read_head(p, 4, "thing") == b"0123"
    assert small_files.read_head(p, 400, "thing") == b"0123456789\n"
    assert small_files.last_byte(p) == b"\n"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(BadInput, match="not a regular file: a FIFO"):
        small_files.read_head(fifo, 8, "thing")
    (tmp_path / "empty").write_bytes(b"")
    assert small_files.last_byte(fifo) == small_files.last_byte(tmp_path / "empty") == b""
    assert small_files.last_byte(tmp_path / "nope") == b""


# --- run-dir records ----------------------------------------------------------------------


# the ftrun.layout module each limit is read from (the readers look it up there)
LIMIT_MODULE = {
    "SPEC_LIMIT": "spec",
    "MANIFEST_LIMIT": "manifest",
    "SUMMARY_LIMIT": "summary",
    "SWEEP_CELL_LIMIT": "sweep_cell",
    "FAULT_MARKER_LIMIT": "faults",
    "RANK_META_LIMIT": "meta",
    "MARKER_LIMIT": "marker",
}


def test_the_raising_readers_name_the_file_when_too_big_or_not_a_file(tmp_path: Path, monkeypatch) -> None:
    run = tmp_path / "run"
    (run / layout.FAULTS).mkdir(parents=True)
    cases = [
        ("SPEC_LIMIT", run / layout.SPEC, "spec", lambda: layout.read_spec(run / layout.SPEC)),
        ("MANIFEST_LIMIT", run / layout.MANIFEST, "manifest", lambda: layout.read_manifest(run)),
        ("SUMMARY_LIMIT", run / layout.SUMMARY, "summary", lambda: layout.read_launch_summary(run)),
        (
            "SWEEP_CELL_LIMIT",
            run / layout.SWEEP_CELL,
            "sweep cell result",
            lambda: layout.read_sweep_cell(run / layout.SWEEP_CELL),
        ),
        (
            "FAULT_MARKER_LIMIT",
            run / layout.FAULTS / "kill-r1-s5.json",
            "fault marker",
            lambda: layout.read_fault_markers(run),
        ),
    ]
    for limit, path, what, read in cases:
        path.write_text("{" + " " * 200 + "}")
        monkeypatch.setattr(f"ftrun.layout.{LIMIT_MODULE[limit]}.{limit}", 100)
        with pytest.raises(BadInput) as e:
            read()
        _one_line(e, path, f"unreadable {what} (more than 100 bytes)")
        path.unlink()
        os.mkfifo(path)
        with pytest.raises(BadInput) as e:
            read()
        _one_line(e, path, f"unreadable {what} (not a regular file: a FIFO)")
        path.unlink()


def test_a_malformed_fault_marker_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / layout.FAULTS).mkdir()
    bad = tmp_path / layout.FAULTS / "kill-r1-s5.json"
    bad.write_text('{"replica": "one"}')
    with pytest.raises(BadInput) as e:
        layout.read_fault_markers(tmp_path)
    _one_line(e, bad, "not an ftrun fault marker (Expected `int`, got `str`")


def test_the_readers_of_files_being_written_say_none_for_a_fifo_or_a_too_big_file(tmp_path: Path, monkeypatch) -> None:
    """A rank's meta, the run marker and a progress file are read while they may be written:
    None for anything that is not one, also a FIFO (never waited on) or a file over the limit."""
    from ftrun.output import is_ftrun_run_dir
    from ftrun.worker import whereabouts

    meta = layout.meta_file(tmp_path, 0, 0)
    meta.parent.mkdir()
    meta.write_text(layout.to_json(layout.RankMeta(replica=0, rank=0, pid=7)))
    assert layout.read_rank_meta(meta) == layout.RankMeta(replica=0, rank=0, pid=7)
    monkeypatch.setattr("ftrun.layout.meta.RANK_META_LIMIT", 10)
    assert layout.read_rank_meta(meta) is None
    (tmp_path / layout.RUN_MARKER).write_text(layout.to_json(layout.RunMarker(pid=7, started=1.0)))
    assert layout.read_run_marker(tmp_path) == layout.RunMarker(pid=7, started=1.0)
    monkeypatch.setattr("ftrun.layout.marker.MARKER_LIMIT", 10)
    assert layout.read_run_marker(tmp_path) is None
    progress = layout.progress_file(tmp_path, 0)
    progress.parent.mkdir()
    progress.write_text("12 sync".ljust(whereabouts.WIDTH))
    assert whereabouts.read(tmp_path, 0) == (12, "sync")
    for p in (meta, tmp_path / layout.RUN_MARKER, progress, tmp_path / layout.MANIFEST):
        p.unlink(missing_ok=True)
        os.mkfifo(p)
    assert layout.read_rank_meta(meta) is None and layout.read_run_marker(tmp_path) is None
    assert whereabouts.read(tmp_path, 0) is None and not is_ftrun_run_dir(tmp_path)


# --- ftrun launch's summary ---------------------------------------------------------------


def _launch_summary(**fields) -> dict:
    """A summary.json of ``ftrun launch`` as this ftrun writes it."""
    s = {
        "run_dir": "/runs/job",
        "script": "/s/train.py",
        "seconds": 12.5,
        "groups": [
            {"replica": 0, "state": "done", "exit_codes": [0], "restarts": 0, "quorums": 3, "last_line": "ok"},
            {"replica": 1, "state": "done", "exit_codes": [-9, 0], "restarts": 1, "quorums": 2, "last_line": "ok"},
        ],
        "quorums_seen": 4,
        "faults_fired": [
            {
                "replica": 1,
                "signal": "SIGKILL",
                "seconds": 3.0,
                "pattern": None,
                "at_s": 3.01,
                "trigger": "after 3 s",
                "incarnation": 0,
            }
        ],
        "traces": [
            {"replica": 0, "rank": 0, "path": "traces/replica0/a.json", "rank_source": "metadata", "checked": True},
            {"replica": 1, "rank": None, "path": "traces/replica1/b.json", "rank_source": "none", "checked": False},
        ],
        "trace_note": "1 trace(s) with no rank in their metadata or path are not checked (the group has 1 ranks)",
        "failures": [],
        "inspection": {"ok": True},
        "check": None,
        "ok": True,
        "format": layout.FORMAT,
    }
    return {**s, **fields}


def _write(tmp_path: Path, summary: object) -> Path:
    d = tmp_path / "job"
    d.mkdir(exist_ok=True)
    (d / layout.SUMMARY).write_text(summary if isinstance(summary, str) else json.dumps(summary))
    return d


def test_a_launch_summary_reads_as_its_struct(tmp_path: Path) -> None:
    s = layout.read_launch_summary(_write(tmp_path, _launch_summary()))
    assert isinstance(s, layout.LaunchSummary) and s.ok and s.quorums_seen == 4
    assert [g.quorums for g in s.groups] == [3, 2] and [t.checked for t in s.traces] == [True, False]
    assert s.faults_fired[0].incarnation == 0 and s.inspection == {"ok": True}
    assert json.loads(layout.to_json(s)) == _launch_summary()  # read back as written


def test_a_launch_summary_of_an_earlier_format_is_refused_in_one_line(tmp_path: Path) -> None:
    """ftrun launch's first summaries (93c291e: no ``quorums`` per group, no ``checked`` per trace,
    no ``format``) are format 1: refused by the one rule, not converted."""
    old = {k: v for k, v in _launch_summary().items() if k != "format"}
    d = _write(tmp_path, old)
    with pytest.raises(BadInput) as e:
        layout.read_launch_summary(d)
    _one_line(e, d / layout.SUMMARY, f"run dir format 1, this ftrun reads format {layout.FORMAT} (read it with")


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "unreadable summary (no such file)"),
        ("{not json", "unreadable summary (JSON is malformed"),
        ("[1]", "not an ftrun summary (Expected `object`, got `array`)"),
        (
            {"run_dir": "r", "mode": "local", "ok": True, "format": layout.FORMAT},
            "an ftrun train summary; this reads the summaries of ftrun launch",
        ),
        (
            {**_launch_summary(), "groups": [{"replica": 0}]},
            "not an ftrun launch summary (Object missing required field",
        ),
        ({**_launch_summary(), "seconds": "long"}, "not an ftrun launch summary (Expected `float`, got `str`"),
    ],
)
def test_a_broken_or_foreign_launch_summary_is_one_line_naming_the_file(tmp_path: Path, content, says) -> None:
    d = tmp_path / "job"
    d.mkdir()
    if content is not None:
        _write(tmp_path, content)
    with pytest.raises(BadInput) as e:
        layout.read_launch_summary(d)
    _one_line(e, d / layout.SUMMARY, says)


def test_the_train_reader_still_refuses_a_launch_summary(tmp_path: Path) -> None:
    d = _write(tmp_path, _launch_summary())
    with pytest.raises(BadInput, match="an ftrun launch summary; this reads the summaries of ftrun train"):
        layout.read_train_summary(d)


# --- event logs, --config, plan --check's results, log tails ------------------------------


def test_an_event_log_over_the_limit_or_a_fifo_is_one_line_even_when_not_strict(tmp_path: Path, monkeypatch) -> None:
    log = tmp_path / "replica0_rank0.jsonl"
    log.write_text("".join(json.dumps(event_record(s)) + "\n" for s in range(3)))
    assert [r.step for r in event_log.read_event_log(log)] == [0, 1, 2]
    monkeypatch.setattr(event_log, "EVENT_LOG_LIMIT", 100)
    for strict in (False, True):
        with pytest.raises(BadInput) as e:
            event_log.read_event_log(log, strict=strict)  # (skipping it would check a run without its evidence)
        _one_line(e, log, "unreadable event log (more than 100 bytes)")
    fifo = tmp_path / "run.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(BadInput) as e:
        event_log.read_run_events(fifo)
    _one_line(e, fifo, "unreadable run log (not a regular file: a FIFO)")
    assert event_log.read_lifecycle(tmp_path / "nope.jsonl") == []  # missing: nothing yet, unless strict
    with pytest.raises(BadInput, match="unreadable lifecycle log .no such file"):
        event_log.read_lifecycle(tmp_path / "nope.jsonl", strict=True)


def test_a_config_file_that_is_a_fifo_or_too_big_is_one_line(tmp_path: Path, monkeypatch) -> None:
    import importlib

    build = importlib.import_module("ftrun.config.build")  # (ftrun.config.build is also a function's name)

    fifo = tmp_path / "run.toml"
    os.mkfifo(fifo)
    res = cli("train", "--config", str(fifo), "--out", str(tmp_path / "out"))
    one_line(res, f"--config {fifo}: unreadable config file (not a regular file: a FIFO)")
    big = tmp_path / "big.toml"
    big.write_text("steps = 4\n" + "# padding\n" * 20)
    monkeypatch.setattr(build, "CONFIG_LIMIT", 100)
    with pytest.raises(BadInput) as e:
        build.load_toml(big)
    assert str(e.value) == f"--config {big}: unreadable config file (more than 100 bytes)"
    with pytest.raises(BadInput, match="not found"):
        build.load_toml(tmp_path / "nope.toml")


def test_plan_checks_results_are_bounded_and_an_object(tmp_path: Path, monkeypatch) -> None:
    from ftrun.layout import compare_report
    from ftrun.plan import check as plan_check

    (tmp_path / "report.json").write_text("[1, 2]")
    with pytest.raises(BadInput) as e:
        plan_check._measured_runs(tmp_path)
    _one_line(e, tmp_path / "report.json", "not an ftrun result (Expected `object`, got `array`)")
    (tmp_path / "report.json").write_text('{"runs": []}' + " " * 200)
    monkeypatch.setattr(compare_report, "RESULT_LIMIT", 100)
    with pytest.raises(BadInput) as e:
        plan_check._measured_runs(tmp_path)
    _one_line(e, tmp_path / "report.json", "unreadable result (more than 100 bytes)")


def test_a_log_tail_reads_a_bounded_chunk_per_call_and_catches_up(tmp_path: Path, monkeypatch) -> None:
    from ftrun.launch import tail

    monkeypatch.setattr(tail, "CHUNK_LIMIT", 16)
    log = tmp_path / "replica0.log"
    log.write_text("".join(f"line {i}\n" for i in range(10)))  # 7 bytes a line
    t = tail.LogTail(log)
    got: list[str] = []
    for _ in range(10):
        got += t.read_new()
    assert got == [f"line {i}" for i in range(10)] and t.last == "line 9"


def test_a_torn_event_log_gets_its_newline_from_the_last_byte_alone(tmp_path: Path) -> None:
    """A relaunched rank's recorder appends after its previous incarnation's cut line."""
    from ftrun.worker.recorder import StepRecorder

    log = tmp_path / "replica0_rank0.jsonl"
    log.write_text(json.dumps(event_record(0)) + "\n" + '{"step": 1, "manag')
    assert small_files.last_byte(log) == b"g"
    StepRecorder(log).close()
    assert log.read_text().endswith('"manag\n')
    StepRecorder(log).close()  # (a complete last line: nothing added)
    assert log.read_text().endswith('"manag\n') and [r.step for r in event_log.read_event_log(log)] == [0]


def test_a_data_file_over_the_limit_is_refused_before_launch(tmp_path: Path, monkeypatch) -> None:
    """Every rank holds ``--data`` whole (as int64 tokens): one over ``DATA_LIMIT`` is one line."""
    from ftrun import api
    from ftrun.config import RunConfig, parts

    text = tmp_path / "corpus.txt"
    text.write_text("abc " * 200)
    assert api.config_of(RunConfig.from_keys(data=str(text))).data.data == str(text)
    monkeypatch.setattr(parts, "DATA_LIMIT", 100)
    with pytest.raises(BadInput) as e:
        api.config_of(RunConfig.from_keys(data=str(text)))
    assert str(e.value).endswith("more than 100 bytes (each rank holds it whole)") and str(text) in str(e.value)


def test_a_fault_marker_being_written_is_not_read(tmp_path: Path) -> None:
    """The parent reads faults/ while a rank writes a marker (``output.atomic_write``'s temporary
    name): only whole markers are read, so a half-written one never stops the run."""
    (tmp_path / layout.FAULTS).mkdir()
    whole = layout.FaultMarker(1, 5, "kill", fired_step=5)
    layout.fault_marker(tmp_path, whole.key).write_text(layout.to_json(whole))
    (tmp_path / layout.FAULTS / f"{layout.TMP_PREFIX}77-kill-r2-s9.json").write_text('{"replica": 2, "st')
    assert layout.read_fault_markers(tmp_path) == [whole]


def test_read_ends_never_waits_on_a_fifo_and_reads_at_most_its_limit(tmp_path: Path) -> None:
    """A log read for a failure's cause (``launch.diagnose.read_log``): a FIFO planted where a log
    belongs is not opened for a writer that never comes, a directory is not read, and a long log
    gives its head and tail only."""
    fifo = tmp_path / "g.log"
    os.mkfifo(fifo)
    assert small_files.read_ends(fifo, 0, 1 << 20) is None  # (a blocking open would hang here)
    assert small_files.read_ends(tmp_path, 0, 1 << 20) is None
    assert small_files.read_ends(tmp_path / "missing.log", 0, 1 << 20) is None
    log = tmp_path / "long.log"
    log.write_bytes(b"first\n" + b"x" * 100 + b"\nlast\n")
    assert small_files.read_ends(log, 6, 1000) == b"x" * 100 + b"\nlast\n"
    assert small_files.read_ends(log, 0, 12) == b"first\n" + b"\n" + b"\nlast\n"  # 6 + a newline + 6
    assert small_files.read_ends(log, 500, 12) == b""
