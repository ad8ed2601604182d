"""A kill's recovery ends at the group's own first commit after its heal, in its heal's quorum or
a later one: not at a commit that still counted the dead incarnation (``ftrun.launch.results.back_with``)."""

from __future__ import annotations

import msgspec

from ftrun import layout
from ftrun.launch.results import back_with

FIRED = 100.0


def record(t: float, step: int, quorum_id: int, healed_at: int | None = None) -> layout.EventRecord:
    rec = {
        "step": step,
        "manager_step": step - 1,
        "manager_step_after": step,
        "participants": 3,
        "quorum_id": quorum_id,
        "loss": 1.0,
        "step_time_s": 0.1,
        "restart": 0,
        "sent": None,
        "synced": 1,
        "commit": True,
        "fingerprint": "f",
        "t": t,
    }
    if healed_at is not None:
        rec["healed"] = {"source_replica": 0, "peer_step": healed_at, "manager_step": healed_at}
    return msgspec.convert(rec, layout.EventRecord)


def test_a_commit_still_counting_the_dead_incarnation_is_not_back() -> None:
    heal = record(102.5, 5, quorum_id=4, healed_at=5)  # the relaunch joined quorum 4 and healed to step 5
    stale = record(100.1, 5, quorum_id=3)  # a commit of the old quorum, 3 participants
    assert not back_with(stale, heal, FIRED)
    assert back_with(record(102.6, 5, quorum_id=4), heal, FIRED)  # the same step, in the heal's quorum
    assert back_with(record(103.0, 6, quorum_id=5), heal, FIRED)  # any later quorum


def test_a_heal_before_the_fault_or_after_the_commits_step_does_not_count() -> None:
    assert not back_with(record(102.6, 5, quorum_id=4), record(99.0, 5, 4, healed_at=5), FIRED)
    assert not back_with(record(102.6, 5, quorum_id=4), record(102.5, 7, 4, healed_at=7), FIRED)
    assert not back_with(record(102.6, 5, quorum_id=4), record(102.5, 5, 4), FIRED)  # no heal in it
