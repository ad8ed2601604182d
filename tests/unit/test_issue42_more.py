"""Issue 42, the rest: a sweep's dir lock (item 1), SIGHUP as a stop signal (item 2's and the
SIGHUP-to-train finding), ... Unit tests: no process, no timing."""

from __future__ import annotations

import os
import signal
import types

import pytest

from ftrun.dir_lock import LOCK_FILE, DirLock
from ftrun.errors import BadInput, Stopped, Stopping, raise_on_signal, signal_words, stop_signals


def _opts(out) -> types.SimpleNamespace:
    return types.SimpleNamespace(out=str(out))  # all sweep() reads of its Overrides before the lock


def test_resume_of_a_live_sweep_is_refused_naming_the_holder(tmp_path):
    """Item 1: ``sweep --resume`` while the same sweep still ran retrained (and removed) cells the
    live one had trained but not recorded yet. Now the live sweep holds its dir's lock for its
    life and the resume is refused in one line naming the holder's pid, before any work."""
    from ftrun.commands import sweep as sw

    sweep_dir = tmp_path / "s1"
    (sweep_dir / sw.CELLS).mkdir(parents=True)
    with DirLock() as live:  # the sweep still running (this process: flock is per open file)
        live.take(sweep_dir, "sweep")
        with pytest.raises(BadInput, match=rf"^--resume: .*s1 is in use by pid {os.getpid()} "):
            sw.sweep(None, ["steps=8"], _opts(tmp_path), None, "s1", 1, True, "steps_per_s", False)
    assert (sweep_dir / LOCK_FILE).read_text().strip() == str(os.getpid())


def test_a_resumed_sweep_holds_the_lock_for_its_life_then_drops_it(tmp_path, monkeypatch):
    from ftrun.commands import sweep as sw

    sweep_dir = tmp_path / "s1"
    (sweep_dir / sw.CELLS).mkdir(parents=True)
    seen = []

    def body(*args):
        with pytest.raises(BadInput, match="in use by pid"):
            DirLock().take(sweep_dir, "--resume")  # a second resume meanwhile
        seen.append(args[-1].fd >= 0)
        return 0

    monkeypatch.setattr(sw, "_sweep", body)
    assert sw.sweep(None, ["steps=8"], _opts(tmp_path), None, "s1", 1, True, "steps_per_s", False) == 0
    assert seen == [True]
    with DirLock() as again:  # released when the sweep returned
        again.take(sweep_dir, "--resume")


def test_a_stale_lock_file_blocks_nobody(tmp_path):
    """A sweep that was SIGKILLed leaves the file; the kernel dropped its lock."""
    (tmp_path / LOCK_FILE).write_text("999999999\n")
    with DirLock() as lock:
        lock.take(tmp_path, "--resume")
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"


def test_sighup_stops_a_command_as_sigterm_does_and_is_named():
    """A closed terminal's SIGHUP ended ``train`` (exit 129, no line, no stopped record) and left
    ``view``'s TensorBoard running: it is now one of the stop signals, so each command's clean-up
    runs and its line says it was hung up."""
    outer = signal.signal(signal.SIGHUP, signal.SIG_DFL)  # as from a terminal (not the suite's nohup)
    try:
        _sighup_stops()
    finally:
        signal.signal(signal.SIGHUP, outer)


def _sighup_stops() -> None:
    before = signal.getsignal(signal.SIGHUP)
    with Stopping() as stop:
        with pytest.raises(Stopped, match="SIGHUP"):
            os.kill(os.getpid(), signal.SIGHUP)
        assert stop.signal == "SIGHUP"
    assert signal.getsignal(signal.SIGHUP) == before
    old = raise_on_signal()
    try:
        with pytest.raises(KeyboardInterrupt, match="SIGHUP"):
            os.kill(os.getpid(), signal.SIGHUP)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    assert signal_words("SIGHUP") == "SIGHUP (hung up: its terminal was closed)"
    assert signal_words("SIGINT") == "SIGINT"


def test_nohup_keeps_sighup_ignored():
    """``nohup ftrun train ...``: the user asked it to outlive the terminal."""
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        assert signal.SIGHUP not in stop_signals()
        with Stopping():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)


def test_a_fault_that_stops_no_process_has_no_recovery_breakdown():
    """Item 10: a ``--corrupt-allreduce`` run got a recovery breakdown saying the group "never came
    back up", "not relaunched", unaccounted 100%: no process had stopped. Only kill, sigterm and
    hang (``STOPS``) have a recovery; the commit and numerics checks judge the others."""
    import msgspec

    from ftrun import layout
    from ftrun.check.recovery import STOPS, breakdown

    def manifest(*fired):
        return msgspec.convert(
            {
                "ftrun_version": "x",
                "job_id": "j",
                "run_name": "r",
                "config": {},
                "versions": {},
                "backend": "gloo",
                "replicas": 2,
                "schedule": {"fragments": 2, "sync_every": 10, "fragment_sync_delay": 1, "steps": 40},
                "traces": [],
                "faults": {"planned": [], "fired": list(fired), "max_restarts": 1},
            },
            layout.Manifest,
        )

    corrupt = {"replica": 1, "step": 10, "action": "corrupt", "kind": "nan", "fired_at": 1000.0, "fired_step": 10}
    fail = {"replica": 0, "step": 20, "action": "fail-commit", "fired_at": 1001.0, "fired_step": 20}
    kill = {"replica": 1, "step": 30, "action": "kill", "fired_at": 1002.0, "fired_step": 30}
    assert breakdown(manifest(corrupt, fail), {}, {}) == []
    [only] = breakdown(manifest(corrupt, kill), {(0, 0): [], (1, 0): []}, {})
    assert only.fault == "kill 1@30" and set(STOPS) == {"kill", "sigterm", "hang"}


@pytest.mark.parametrize("key, flag", [("replicas", "--replicas"), ("nproc_per_replica", "--nproc-per-replica")])
def test_train_refuses_more_groups_or_ranks_than_plan_walks(key, flag):
    """``train --replicas 100000000000`` ended in a ``MemoryError`` traceback (the list of the
    groups to launch); now one line, as plan's bound (``ftrun.plan.bounds.MAX_REPLICAS``)."""
    from ftrun.config import build
    from ftrun.plan.bounds import MAX_REPLICAS

    with pytest.raises(BadInput, match=rf"^{flag} 100000000000: must be at most {MAX_REPLICAS:,}$"):
        build(**{key: 100_000_000_000})
    build(**{key: 4})


@pytest.mark.parametrize("digits", ["", "12345678901234567890"])  # the second: the int64 walk's path too
def test_a_deeply_nested_line_of_an_event_log_is_damage_not_a_traceback(tmp_path, digits):
    """An event log line nested 3,000 deep (a few KB) ended every reader of it in a
    ``RecursionError`` traceback; now it is a damaged record (step logs), a skipped line, or with
    ``strict`` one line naming file and line, as ``small_files.decode_json`` bounds ftrun's JSON."""
    import json

    from ftrun.event_log import read_event_log, read_lifecycle, read_run_events
    from train_fixtures import event_record

    deep = "[" * 3000 + digits + "]" * 3000
    line = json.dumps(event_record(1, t=1.0))[:-1] + f', "x": {deep}}}'
    p = tmp_path / "replica0_rank0.jsonl"
    p.write_text("\n".join([json.dumps(event_record(0)), line, json.dumps(event_record(2))]) + "\n")
    log = read_event_log(p)
    assert [r.step for r in log] == [0, 2]
    assert log.damage == [f"{p}:2: a damaged record (nested too deeply)"]
    assert read_event_log(p, strict=True).damage == log.damage
    assert read_lifecycle(p) == [] and read_run_events(p) == []
    p.write_text(line + "\n")
    with pytest.raises(BadInput, match=rf"^{p}:1: not an event record \(nested too deeply\)$"):
        read_lifecycle(p, strict=True)


def test_report_json_is_strict_and_names_each_value_it_could_not_write():
    """compare's report.json and sweep's sweep.json (and their --json) held ``NaN`` when a figure
    was not finite (a diverged loss): not JSON. Now ``null``, each named in the report's notes."""
    import math

    import msgspec

    from ftrun import layout
    from ftrun.json_out import report_json

    cells = [
        layout.SweepRow(name="a", verdict="pass", final_loss=math.nan, steps_per_s=2.5),
        layout.SweepRow(name="b", verdict="pass", steps_per_s=1.0, hidden_share=-math.inf),
    ]
    result = layout.SweepResult(cells=cells, notes=["x"])
    got = msgspec.json.decode(report_json(result))  # strict: msgspec refuses NaN/Infinity tokens
    assert got["cells"][0]["final_loss"] is None and got["cells"][0]["steps_per_s"] == 2.5
    assert got["cells"][1]["hidden_share"] is None and got["cells"][1]["steps_per_s"] == 1.0
    assert got["notes"] == [
        "x",
        "cells[0].final_loss was nan (not a JSON number): written as null",
        "cells[1].hidden_share was -inf (not a JSON number): written as null",
    ]
    assert result.notes == ["x"]  # the caller's result is not changed
    runs = [layout.CompareRun(name="a", steps_per_s=math.inf)]
    assert msgspec.json.decode(report_json(layout.CompareReport(runs=runs)))["notes"] == [
        "runs[0].steps_per_s was inf (not a JSON number): written as null"
    ]
    assert "notes" not in msgspec.json.decode(report_json(layout.CompareReport()))
