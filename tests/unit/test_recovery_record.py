"""summary.json's ``recovery``: one typed record per fault (``layout.RecoveryRecord``), built from
a real kill run (tests/data/kill_run), written as train writes it and read back with one typed
decode; its JSON keys are the breakdown's published ones, in order. Unit tests: no process."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from ftrun import layout
from ftrun.check.recovery import recovery_of_run_dir
from train_fixtures import recovery_record, train_summary

KILL_RUN = Path(__file__).parent.parent / "data" / "kill_run"  # --replicas 3 --steps 60 --kill 1@25 (trimmed)
KEYS = [  # summary.json's ``recovery``: each fault's object, its keys in this order (as before it was typed)
    "fault",
    "replica",
    "fault_at",
    "phases",
    "unaccounted_s",
    "total_s",
    "heal_bytes",
    "heal_source",
    "heal_bytes_sent",
    "heal_rate_bps",
    "heal_link_hold_s",
    "largest_phase",
    "spans",
    "sources",
    "relaunch_detail",
    "reasons",
    "detect_bound",
    "detect_limits",
    "reconfigure_participants",
    "participant_sources",
    "heal_send_s",
    "heal_send_source",
    "survivors",
    "collective_hold",
    "text",
]


def test_a_real_kill_runs_breakdown_round_trips_through_summary_json(tmp_path: Path) -> None:
    (x,) = recovery_of_run_dir(KILL_RUN)
    rec = x.record()
    data = json.loads(msgspec.json.encode(rec))
    assert list(data) == KEYS
    assert data["detect_limits"] == {
        "heartbeat_timeout_ms": 2000,
        "join_timeout_ms": None,
        "quorum_tick_ms": None,
        "lighthouse": "ftrun",
    }
    assert list(data["survivors"]) == [
        "failed_commits",
        "steps_without_group",
        "steps_per_s_before",
        "steps_per_s_during",
        "goodput",
    ]
    assert data["spans"]["detect"] == [0.0, 1.933]  # seconds after the fault, a JSON pair
    # written as train writes summary.json, read back with the one typed decode: the same record
    s = msgspec.convert(train_summary(recovery=[data]), layout.TrainSummary)
    (tmp_path / layout.SUMMARY).write_text(layout.to_json(s, indent=1))
    got = layout.read_train_summary(tmp_path)
    assert got.recovery == [rec]
    (r,) = got.recovery
    assert r.fault == "kill 1@25" and r.largest_phase == "detect" and r.phase_s(r.largest_phase) == 1.933
    assert r.survivors is not None and r.survivors.steps_without_group == 32
    assert r.detect_limits == layout.DetectionBound(heartbeat_timeout_ms=2000)


def test_a_wrong_field_in_a_recovery_record_is_one_line_naming_it(tmp_path: Path) -> None:
    from ftrun.errors import BadInput

    bad = train_summary(recovery=[recovery_record(survivors={"failed_commits": "two"})])
    (tmp_path / layout.SUMMARY).write_text(json.dumps(bad))
    with pytest.raises(BadInput) as e:
        layout.read_train_summary(tmp_path)
    assert "$.recovery[0].survivors" in str(e.value) and "\n" not in str(e.value)


def test_the_public_api_still_reads_a_breakdown_like_its_dict_with_a_warning() -> None:
    (r,) = msgspec.convert(train_summary(recovery=[recovery_record()]), layout.TrainSummary).recovery
    with pytest.warns(DeprecationWarning, match=r"read recovery.FIELD, not recovery\['total_s'\]"):
        assert r["total_s"] == 7.6
    with pytest.warns(DeprecationWarning):
        assert r.get("phases") == {"relaunch": 3.25}


def test_a_real_kill_runs_fault_history_keeps_its_keys_and_round_trips(tmp_path: Path) -> None:
    from ftrun.event_log import read_event_log
    from ftrun.launch.results import fault_history

    m = layout.read_train_manifest(KILL_RUN)
    logs = {(e.replica, e.rank): read_event_log(KILL_RUN / e.path) for e in m.event_logs}
    h = fault_history(logs, m)
    data = json.loads(msgspec.json.encode(h))
    assert list(data) == [
        "faults",
        "extra_steps",
        "restarts",
        "heals",
        "quorum_changes",
        "commits_lost",
        "failed_commit_manager_steps",
    ]
    (f,) = data["faults"]  # the fault's marker, then what became of its group
    assert list(f)[:8] == ["replica", "step", "action", "seconds", "kind", "fired_at", "fired_step", "pid"]
    assert list(f)[8:] == ["recovered_s", "rejoined_after_end", "last_step", "cause"]
    assert f["recovered_s"] == 4.607 and f["cause"] is None  # the group's own first commit: the breakdown's total
    assert data["heals"] == [{"replica": 1, "step": 45, "source_replica": 0, "peer_step": 45, "manager_step": 4}]
    assert list(data["quorum_changes"][0]) == ["observer", "step", "quorum_id", "participants"]
    s = msgspec.convert(train_summary(faults=data), layout.TrainSummary)
    (tmp_path / layout.SUMMARY).write_text(layout.to_json(s, indent=1))
    assert layout.read_train_summary(tmp_path).faults == h
