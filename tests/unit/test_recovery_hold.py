"""Survivors held in a sync with a dead group until torchft's process-group timeout
(``ftrun.check.recovery_hold``) from hand-made step records: said with the timeout and its
config key only when a survivor's failed sync of a round the group was in lasted about that
long. Unit tests: no process."""

from __future__ import annotations

import msgspec
import pytest

from ftrun import layout
from ftrun.check.recovery import breakdown
from ftrun.check.recovery_hold import collective_hold, hold_text, survivor_hold
from ftrun.layout import EventRecord, Quorum
from ftrun.report.recovery_view import recovery_lines
from train_fixtures import event_record

T0 = 1000.0  # the fault
TIMEOUT = 60.0
ERR = "RuntimeError: Application timeout caused pair closure"


def q(qid: int, participants: list[int | None], t: float) -> Quorum:
    return Quorum(
        quorum_id=qid, participants=participants, replica_rank=0, max_step=1, heal=False, heal_source=None, t=t
    )


def rec(step: int, t: float, **fields) -> EventRecord:
    return EventRecord(**event_record(step, t=t, **fields))


def survivor(sync_end: float, *, commit: bool = False, quorum_t: float = T0 - 0.3, members=(0, 1, 2, 3, 4), error=ERR):
    """A survivor's round: quorum + send at step 5 (quorum at ``quorum_t``), sync at step 10
    ending at ``sync_end`` with ``commit``; then the next round's quorum without group 2."""
    return [
        rec(4, T0 - 0.5),
        rec(5, quorum_t + 0.05, sent=0, quorums=[q(1, list(members), quorum_t)]),
        rec(10, sync_end, synced=0, commit=commit, **({"commit_error": error} if not commit and error else {})),
        rec(15, sync_end + 1.0, sent=1, quorums=[q(2, [0, 1, 3, 4], sync_end + 0.9)]),
    ]


def logs(ends: dict[int, float], **kw) -> dict[tuple[int, int], list[EventRecord]]:
    return {(s, 0): survivor(end, **kw) for s, end in ends.items()}


def test_survivors_whose_failed_sync_ran_to_the_timeout_are_held_with_the_key() -> None:
    # ring neighbours 1 and 3 failed at once; 0 and 4 waited for the timeout
    h = collective_hold(logs({0: T0 + 60.05, 1: T0 + 0.4, 3: T0 + 0.4, 4: T0 + 59.9}), [0, 1, 3, 4], 2, T0, TIMEOUT)
    assert h is not None
    assert h.replicas == [0, 4] and h.timeout_s == TIMEOUT and h.error == ERR
    assert h.held_s == round(60.05 + 0.3, 3) and h.released_s == 60.05  # from the round's quorum; after the fault
    text = hold_text(h)
    assert "replica(s) 0, 4 waited 60.35 s" in text and "timeout_s = 60 s, a --config key" in text
    assert "process-group timeout" in text and ERR in text


def test_a_failed_sync_shorter_than_the_timeout_is_not_a_hold() -> None:
    # released by a neighbour's reconfigure after the lighthouse's join timeout: not the timeout
    assert collective_hold(logs({0: T0 + 11.8, 4: T0 + 13.0}), [0, 4], 2, T0, TIMEOUT) is None
    assert survivor_hold(survivor(T0 + 11.8), 2, T0) is not None  # a failed sync, only not long enough


def test_a_committed_sync_a_round_without_the_group_or_sent_after_the_fault_is_not_a_hold() -> None:
    assert survivor_hold(survivor(T0 + 60.0, commit=True), 2, T0) is None
    assert survivor_hold(survivor(T0 + 60.0, members=(0, 1, 3, 4)), 2, T0) is None  # the group was not in it
    assert survivor_hold(survivor(T0 + 60.0, quorum_t=T0 + 1.0), 2, T0) is None  # the round began after


def test_only_the_first_sync_after_the_fault_counts() -> None:
    # an earlier round synced (committed) before the fault; the one in flight at the fault is judged
    early = [
        rec(5, T0 - 20.0, sent=0, quorums=[q(1, [0, 1, 2], T0 - 20.1)]),
        rec(10, T0 - 18.0, synced=0, commit=True),
    ]
    records = early + survivor(T0 + 60.0)
    got = survivor_hold(records, 2, T0)
    assert got is not None and got[0] == pytest.approx(60.3) and got[2] == ERR
    assert survivor_hold(early, 2, T0) is None  # no sync after the fault


def test_a_timeout_error_is_kept_only_when_it_names_one() -> None:
    h = collective_hold(logs({0: T0 + 60.0}, error="RuntimeError: something else"), [0], 2, T0, TIMEOUT)
    assert h is not None and h.error is None and "commit error" not in hold_text(h)
    h = collective_hold(logs({0: T0 + 60.0}, error="Timed out waiting 60000ms for recv"), [0], 2, T0, TIMEOUT)
    assert h is not None and h.error == "Timed out waiting 60000ms for recv"


def _manifest(timeout_s: float) -> layout.Manifest:
    return msgspec.convert(
        {
            "ftrun_version": "x",
            "job_id": "j",
            "run_name": "r",
            "config": {"timeouts": {"timeout_s": timeout_s, "heartbeat_timeout_ms": 2000}},
            "versions": {},
            "backend": "gloo",
            "replicas": 5,
            "schedule": {"fragments": 2, "sync_every": 20, "fragment_sync_delay": 5, "steps": 60},
            "traces": [],
            "run_events": [{"event": "group_exit", "t": T0 + 0.1, "replica": 2, "code": -9}],
            "faults": {
                "planned": [],
                "fired": [{"replica": 2, "step": 6, "action": "kill", "fired_at": T0, "fired_step": 6}],
                "max_restarts": 0,
            },
        },
        layout.Manifest,
    )


def test_the_breakdown_says_the_hold_with_the_runs_own_timeout_and_the_record_keeps_it() -> None:
    ends = {0: T0 + 30.05, 1: T0 + 0.4, 3: T0 + 0.4, 4: T0 + 30.0}
    (x,) = breakdown(_manifest(30.0), logs(ends), {r: [] for r in range(5)})
    assert x.collective_hold is not None and x.collective_hold.replicas == [0, 4]
    assert "held: replica(s) 0, 4 waited" in x.text and "timeout_s = 30 s" in x.text
    r = x.record()
    assert r.collective_hold == x.collective_hold
    assert any(line.startswith("held: ") and "timeout_s = 30 s" in line for line in recovery_lines(r))
    back = msgspec.json.decode(msgspec.json.encode(r), type=layout.RecoveryRecord)
    assert back.collective_hold == x.collective_hold
    # the same records under the default 60 s timeout: 30 s is not a hold, nothing is said
    (y,) = breakdown(_manifest(60.0), logs(ends), {r: [] for r in range(5)})
    assert y.collective_hold is None and "held:" not in y.text
    assert not any(line.startswith("held: ") for line in recovery_lines(y.record()))
