"""The parent's live progress keeps counters and latest values, never the records (issue 42 item 15)."""

from __future__ import annotations

import pickle

from ftrun.launch.progress import GroupProgress, update
from ftrun.layout import EventRecord
from train_fixtures import event_record


def _records(n: int, start: int = 0) -> list[EventRecord]:
    return [
        EventRecord(**event_record(s, loss=1.0, manager_step_after=s, synced=s % 3, commit=True))
        for s in range(start, start + n)
    ]


def _held(p: GroupProgress) -> int:
    """Bytes of everything the progress object holds (its whole pickled state)."""
    return len(pickle.dumps(p))


def test_held_state_does_not_grow_with_the_records_fed():
    few, many = GroupProgress(0), GroupProgress(0)
    update(few, _records(10, start=90_000))
    for chunk in range(100):
        update(many, _records(100, start=chunk * 100 + 80_000))
    assert many.records == 10_000 and few.records == 10
    assert _held(many) <= _held(few) + 8  # an int grows by a byte or two; no list of records
    assert not any(isinstance(v, (list, dict, tuple)) for v in vars(many).values())


def test_latest_values_and_counters():
    p = GroupProgress(1)
    update(p, _records(4))
    assert (p.step, p.manager_step, p.commits, p.failed_commits) == (3, 3, 4, 0)
    assert p.last_sync == "frag 0 @ 3 ok"
