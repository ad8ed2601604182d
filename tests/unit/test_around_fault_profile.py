"""A surviving group profiled around another group's fault (``ftrun.worker.profiling.AroundFault``):
when it starts and stops, around the step window (one torch profiler at a time), and what it
writes. Unit tests: the torch profiler in this process, the fault markers hand-made; no process."""

from __future__ import annotations

import gzip
import json

import pytest

pytest.importorskip("torch")

from ftrun import layout  # noqa: E402
from ftrun.worker.profiling import AroundFault  # noqa: E402


def _quorum(participants: list[int | None]) -> layout.Quorum:
    return layout.Quorum(
        quorum_id=1, participants=participants, replica_rank=0, max_step=0, heal=False, heal_source=None, t=0.0
    )


KILL = layout.FaultSpec(replica=1, step=10, action="kill")


def _watch(tmp_path, window=None, give_up=40, specs=(KILL,)):
    def busy(k: int) -> bool:
        return window is not None and window[0] - 1 <= k <= window[1]

    return AroundFault(list(specs), 0, 0, tmp_path, busy, give_up)


def _fire(tmp_path, f=KILL):
    p = layout.fault_marker(tmp_path, f.key)
    p.parent.mkdir(exist_ok=True)
    p.write_text("{}")


def _run(w, tmp_path, steps, fire_at, quorums, commits):
    """Steps ``steps``; the fault's marker appears before ``fire_at``; ``quorums[step]``: the
    participants of the quorum that step computed; ``commits``: the steps that committed."""
    started = {}
    for k in steps:
        if k == fire_at:
            _fire(tmp_path)
        w.at_step(k)
        started[k] = w.active
        w.after_step([_quorum(quorums[k])] if k in quorums else [], k in commits)
    return started


def test_armed_a_step_before_the_fault_and_done_at_the_first_commit_with_the_group_back(tmp_path) -> None:
    w = _watch(tmp_path)
    # step 12: the quorum without replica 1; step 14: with it again (but the commit comes at 15)
    started = _run(
        w,
        tmp_path,
        range(1, 18),
        fire_at=10,
        quorums={5: [0, 1, 2], 12: [0, 2], 14: [0, 1, 2]},
        commits={5, 13, 15, 17},
    )
    assert [k for k, on in started.items() if on] == list(range(9, 16))
    (p,) = w.written
    assert p == layout.recovery_trace_dir(tmp_path) / "replica0_rank0.kill-r1-s10.pt.trace.json.gz"
    assert "traceEvents" in json.loads(gzip.decompress(p.read_bytes()))
    assert layout.AROUND_FAULT_RE.search(p.name) and layout.parse_worker(p.name) == (0, 0)
    assert not w.todo and not w.active


def test_a_quorum_with_the_group_seen_before_the_fault_fired_is_not_its_return(tmp_path) -> None:
    w = _watch(tmp_path)
    started = _run(w, tmp_path, range(1, 16), fire_at=11, quorums={10: [0, 1, 2], 13: [0, 1, 2]}, commits={10, 14})
    assert started[10] and started[14] is True and not w.active  # 10's commit was before the fault: kept on until 14
    assert len(w.written) == 1


def test_the_step_window_records_the_middle_and_the_watch_both_sides(tmp_path) -> None:
    w = _watch(tmp_path, window=(8, 12), specs=(layout.FaultSpec(replica=1, step=6, action="hang", seconds=5.0),))
    # armed at 5; the window warms up at step 7: stopped after step 6 (part 1); again from 13 (part 2)
    started = {}
    for k in range(1, 18):
        if k == 6:
            p = layout.fault_marker(tmp_path, "hang-r1-s6")
            p.parent.mkdir(exist_ok=True)
            p.write_text("{}")
        w.at_step(k)
        started[k] = w.active
        w.after_step([_quorum([0, 1])] if k == 14 else [], k == 15)
    assert [k for k, on in started.items() if on] == [5, 13, 14, 15]
    assert [p.name for p in w.written] == [
        "replica0_rank0.hang-r1-s6.pt.trace.json.gz",
        "replica0_rank0.hang-r1-s6.2.pt.trace.json.gz",
    ]


def test_a_fault_that_never_fires_is_dropped_its_recording_discarded_and_own_faults_are_not_watched(tmp_path) -> None:
    w = _watch(tmp_path, give_up=4, specs=(KILL, layout.FaultSpec(replica=0, step=12, action="kill")))
    assert [f.replica for f in w.todo] == [1]  # its own fault: the relaunched group profiles that one
    started = _run(w, tmp_path, range(1, 20), fire_at=None, quorums={}, commits=set(range(1, 20)))
    assert [k for k, on in started.items() if on] == list(range(9, 15))
    assert w.written == [] and not w.todo
    assert not layout.recovery_trace_dir(tmp_path).exists() or not list(layout.recovery_trace_dir(tmp_path).iterdir())


def test_the_run_ending_first_writes_what_was_recorded(tmp_path) -> None:
    w = _watch(tmp_path)
    _run(w, tmp_path, range(1, 13), fire_at=10, quorums={12: [0, 2]}, commits=set())
    assert w.active
    w.finish()
    assert len(w.written) == 1 and not w.active


def test_a_recording_stops_for_good_after_max_steps_with_the_group_not_back(tmp_path) -> None:
    """A slow relaunch (the survivors train past --steps until it is back) does not grow one
    trace with every step: the recording stops once it holds max_steps steps, and is not taken
    up again for that fault; the next fault is recorded as usual."""
    second = layout.FaultSpec(replica=1, step=30, action="kill")
    w = AroundFault([KILL, second], 0, 0, tmp_path, lambda k: False, give_up=40, max_steps=4)
    started = _run(
        w,
        tmp_path,
        range(1, 22),
        fire_at=10,
        quorums={12: [0, 2], 19: [0, 1, 2]},
        commits={13, 20},
    )
    # steps 9..12 recorded (4 steps), stopped at step 13, never again for this fault; done at 20
    assert [k for k, on in started.items() if on] == [9, 10, 11, 12]
    (p,) = w.written
    assert p.name == "replica0_rank0.kill-r1-s10.pt.trace.json.gz"
    assert w.todo == [second]
    w.at_step(29)  # armed a step before the next fault
    assert w.active
    w.finish()


def test_a_fault_fired_before_the_first_step_is_not_watched(tmp_path) -> None:
    # a relaunched group or a warm spare taking over after replica 1's kill: not a survivor of it
    _fire(tmp_path)
    w = _watch(tmp_path)
    started = _run(w, tmp_path, range(30, 40), fire_at=-1, quorums={35: [0, 1, 2]}, commits={35, 36})
    assert not any(started.values()) and not w.todo and not w.written
