"""Warm spares' assignment logic (``ftrun.launch.spares``, ``ftrun.worker.spare``) on hand-made
records: which spare takes a restart, the assignment written once and read whole, the group
record taking over the spare's processes. No process is started (stand-in ``Popen`` objects)."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest

from ftrun import layout
from ftrun.config import RunConfig
from ftrun.config.build import validate_config
from ftrun.errors import BadInput
from ftrun.launch.groups import Group
from ftrun.launch.spares import SparePool, assign, spare_log
from ftrun.worker import spare as worker_spare
from ftrun.worker.spare import SpareAssignment, read_assignment, ready_ranks, wait_for_assignment, write_assignment


class FakeProc:
    """A launcher's ``Popen`` as the supervisor reads it: ``poll()`` None while it runs."""

    def __init__(self, pid: int, code: int | None = None) -> None:
        self.pid, self.returncode = pid, code

    def poll(self) -> int | None:
        return self.returncode


def _spare(tmp: Path, slot: int, code: int | None = None) -> Group:
    g = Group(slot, ["worker"], {worker_spare.ENV_SPARE: str(slot)}, spare_log(tmp, slot))
    g.proc = FakeProc(1000 + slot, code)  # type: ignore[assignment]
    g.log_offset = 7 * slot
    return g


def _pool(tmp: Path, *spares: Group, ranks: int = 1) -> SparePool:
    return SparePool(tmp, ranks, waiting=list(spares), next_slot=len(spares))


def test_a_ready_spare_is_chosen_before_one_still_starting(tmp_path):
    pool = _pool(tmp_path, _spare(tmp_path, 0), _spare(tmp_path, 1), _spare(tmp_path, 2))
    chosen = pool.choose(ready=lambda slot: slot == 2)
    assert chosen is not None and chosen.replica == 2
    # none ready: the lowest live slot (further along than a fresh relaunch)
    chosen = pool.choose(ready=lambda slot: False)
    assert chosen is not None and chosen.replica == 0


def test_a_dead_spare_is_never_chosen_and_leaves_the_pool(tmp_path):
    dead, live = _spare(tmp_path, 0, code=1), _spare(tmp_path, 1)
    pool = _pool(tmp_path, dead, live)
    chosen = pool.choose(ready=lambda slot: True)
    assert chosen is live
    assert pool.exited() == [dead] and pool.waiting == [live]
    assert _pool(tmp_path, _spare(tmp_path, 0, code=-9)).choose(ready=lambda slot: True) is None
    assert _pool(tmp_path).choose() is None


def test_readiness_is_every_rank_of_the_spare(tmp_path):
    (tmp_path / worker_spare.SPARES).mkdir()
    worker_spare.ready_path(tmp_path, 3, 0).touch()
    assert not ready_ranks(tmp_path, 3, 2)
    worker_spare.ready_path(tmp_path, 3, 1).touch()
    assert ready_ranks(tmp_path, 3, 2)
    pool = _pool(tmp_path, _spare(tmp_path, 0), ranks=2)
    pool.waiting.append(_spare(tmp_path, 3))
    assert pool.choose() is pool.waiting[1]  # the default readiness reads the marks


def test_assign_hands_the_replica_id_once_and_the_group_watches_the_spare(tmp_path):
    group = Group(1, ["worker"], {layout.ENV_REPLICA: "1"}, layout.group_log(tmp_path, 1), restarts=2)
    group.proc = FakeProc(42, code=-9)  # type: ignore[assignment]
    spare = _spare(tmp_path, 5)
    pool = _pool(tmp_path, _spare(tmp_path, 4), spare)
    a = assign(pool, spare, group, now=123.5)
    assert a == SpareAssignment(slot=5, replica=1, incarnation=3, t=123.5)
    assert read_assignment(tmp_path, 5) == a
    assert [s.replica for s in pool.waiting] == [4]  # taken out: never chosen twice
    assert group.proc is spare.proc and group.log == spare.log and group.log_offset == spare.log_offset
    assert group.restarts == 3 and group.env[layout.ENV_RESTART] == "3"
    with pytest.raises(BadInput):  # a slot is assigned once, never overwritten
        write_assignment(tmp_path, SpareAssignment(slot=5, replica=0, incarnation=1, t=124.0))
    assert read_assignment(tmp_path, 5) == a


def test_no_assignment_yet_and_a_bad_one(tmp_path):
    assert read_assignment(tmp_path, 0) is None
    path = worker_spare.assignment_path(tmp_path, 0)
    path.parent.mkdir()
    path.write_bytes(b"x" * (worker_spare.MAX_ASSIGNMENT_BYTES + 1))
    with pytest.raises(ValueError, match="larger than"):
        read_assignment(tmp_path, 0)
    path.write_bytes(b'{"slot": 0}')
    with pytest.raises(msgspec.ValidationError):
        read_assignment(tmp_path, 0)


def test_an_assigned_rank_runs_as_the_relaunched_group(tmp_path, monkeypatch):
    for var in (layout.ENV_REPLICA, layout.ENV_RESTART):  # set, then unset: both restored after the test
        monkeypatch.setenv(var, "unset")
        monkeypatch.delenv(var)
    write_assignment(tmp_path, SpareAssignment(slot=2, replica=4, incarnation=1, t=1.0))
    a = wait_for_assignment(tmp_path, 2, rank=1)  # already there: returns without waiting
    assert (a.replica, a.incarnation) == (4, 1)
    assert os.environ[layout.ENV_REPLICA] == "4" and os.environ[layout.ENV_RESTART] == "1"
    assert worker_spare.ready_path(tmp_path, 2, 1).exists()


def test_spares_flag_bounds():
    validate_config(RunConfig.from_keys(spares=2))
    for bad in (-1, 65):
        with pytest.raises(BadInput, match="spares"):
            validate_config(RunConfig.from_keys(spares=bad))
    with pytest.raises(BadInput, match="every replica group on this host"):
        validate_config(RunConfig.from_keys(spares=1, replicas=2, replica_group_id=0, lighthouse="http://h:1"))
