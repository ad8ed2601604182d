"""The one event-log reader: torn records (killed group, relaunched after it) are skipped."""

from __future__ import annotations

import json

import msgspec
import pytest

from ftrun.errors import BadInput
from ftrun.event_log import read_event_log, read_run_events, replica_stats
from ftrun.layout import EventRecord, Quorum
from train_fixtures import event_record


def _line(step, **kw) -> str:
    return json.dumps(event_record(step, **kw))


def test_torn_record_mid_file_and_at_end_are_skipped(tmp_path):
    """Skipped, and the mid-file one, which the same incarnation wrote past, named as damage
    (``test_event_log_damage``)."""
    p = tmp_path / "replica1_rank0.jsonl"
    p.write_text(f'{_line(1)}\n{{"step": 2, "los\n{_line(3)}\n{_line(4)[:-5]}')
    got = read_event_log(p, strict=True)
    assert all(isinstance(r, EventRecord) for r in got) and [r.step for r in got] == [1, 3]
    assert [d.split(": ")[0] for d in got.damage] == [f"{p}:2"]  # (the step it held: not named again)


@pytest.mark.parametrize("line, says", [("not json", "not a JSON line"), ('{"step": "two"}', "not an event record")])
def test_a_line_that_is_no_record_is_bad_input_only_when_strict(tmp_path, line, says):
    p = tmp_path / "e.jsonl"
    p.write_text(f"{_line(1)}\n{line}\n{_line(3)}\n")
    with pytest.raises(BadInput, match=rf"e\.jsonl:2: {says}"):
        read_event_log(p, strict=True)
    assert [r.step for r in read_event_log(p)] == [1, 3]


def test_a_sketch_with_another_count_of_projections_is_no_record(tmp_path):
    def with_proj(step, k):
        sketch = {"proj": [0.5] * k, "norm": 1.0, "numel": 8, "dtype": "float32"}
        part = {"phase": "send", "fragment": 0, "manager_step": 1, "quorum_id": 1, "contribution": sketch}
        rec = {**event_record(step), "numerics": [part]}
        return json.dumps(rec)

    p = tmp_path / "e.jsonl"
    p.write_text(f"{with_proj(1, 4)}\n{with_proj(2, 3)}\n{with_proj(3, 4)}\n")
    with pytest.raises(BadInput, match=r"e\.jsonl:2: not an event record .*proj"):
        read_event_log(p, strict=True)
    assert [r.step for r in read_event_log(p)] == [1, 3]


def test_missing_file(tmp_path):
    assert read_event_log(tmp_path / "nope.jsonl") == []
    with pytest.raises(BadInput, match="unreadable event log"):
        read_event_log(tmp_path / "nope.jsonl", strict=True)


def test_run_events_keep_only_the_fields_each_event_has(tmp_path):
    p = tmp_path / "run.jsonl"
    p.write_text('{"event": "restart", "t": 1.5, "replica": 1, "incarnation": 2}\n{"event": "stopped", "t"')
    (e,) = read_run_events(p)
    assert (e.event, e.replica, e.incarnation) == ("restart", 1, 2)
    assert msgspec.to_builtins(e) == {"event": "restart", "t": 1.5, "replica": 1, "incarnation": 2}


def _rec(step, t, **kw):
    return EventRecord(**event_record(step, step_time_s=t, loss=10.0 - step, manager_step_after=step // 2, **kw))


def _quorum(qid):
    return Quorum(quorum_id=qid, participants=[0, 1], replica_rank=0, max_step=0, heal=False, heal_source=None, t=0.0)


def test_replica_stats_of_a_restarted_group():
    """Records before the rejoin have no step; a step run twice counts as two records, one step."""
    recs = [
        _rec(1, 0.1, sent=0, quorums=[_quorum(1)], quorum_s=0.05),
        _rec(2, 0.2, synced=0, commit=True, exposed_s=0.03, quorum_s=0.0, commit_s=0.01),
        EventRecord(**event_record(None, step_time_s=9.0, restart=1)),
        _rec(2, 0.4, synced=1, commit=False, exposed_s=0.02, commit_s=0.02),
        _rec(3, 0.3),
        _rec(4, 0.5),
    ]
    s = replica_stats(recs)
    assert (s.records, s.steps, s.last_step) == (5, 4, 4)
    assert s.train_s == pytest.approx(1.5) and s.steps_per_s == pytest.approx(5 / 1.5)
    assert (s.syncs, s.commits, s.failed_commits) == (2, 1, 1)
    assert s.exposed_data_s == pytest.approx(0.05) and s.exposed_control_s == pytest.approx(0.08)
    assert s.median_plain_step_s == 0.5  # steps 3 and 4: sorted [0.3, 0.5], upper median
    assert (s.final_loss, s.final_manager_step) == (6.0, 2)
    assert s.losses == {1: 9.0, 2: 8.0, 3: 7.0, 4: 6.0}
    assert replica_stats([EventRecord(**event_record(None, step_time_s=1.0))]).steps_per_s is None
