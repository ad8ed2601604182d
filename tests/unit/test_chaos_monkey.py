"""The supervisor's side of a chaos run (ftrun.launch.chaos.ChaosMonkey) on a hand-driven clock
and hand-made step records: the clock starts when every group trains, faults fire in the drawn
order, never below --chaos-min-alive, a blocked fault holds the ones after it, a fired request
is removed. Unit test: no process (the run dir is a temp dir)."""

from __future__ import annotations

import itertools

import msgspec

from ftrun import chaos_plan, layout
from ftrun.config import RunConfig
from ftrun.launch.chaos import ChaosMonkey
from ftrun.layout import EventRecord
from train_fixtures import event_record


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def rec(step, t, commit=None):
    return EventRecord(**event_record(step, t=t, commit=commit, synced=0 if commit is not None else None))


def monkey(tmp_path, replicas=4, min_alive=1, max_faults=0, steps=1000):
    cfg = RunConfig.from_keys(
        replicas=replicas,
        steps=steps,
        chaos=["kill:5"],
        chaos_seed=3,
        chaos_min_alive=min_alive,
        chaos_max_faults=max_faults,
    )
    events: list[tuple[str, dict]] = []
    clock = Clock()
    m = ChaosMonkey(cfg, tmp_path, lambda event, **kw: events.append((event, kw)), clock=clock)
    return m, clock, events, cfg


def requested(events):
    return [kw["replica"] for e, kw in events if e == "chaos"]


def test_nothing_fires_before_every_group_trained_then_faults_follow_the_draw(tmp_path):
    m, clock, events, cfg = monkey(tmp_path)
    drawn = list(itertools.islice(chaos_plan.draw(chaos_plan.parse_kinds(["kill:5"]), 4, 3), 3))
    for r in range(3):
        m.saw(r, [rec(1, clock.t)])
    clock.t += 1000
    m.tick([])
    assert m.clock is None and events == []  # group 3 has not trained yet
    m.saw(3, [rec(1, clock.t)])
    m.tick([])
    assert m.clock == clock.t and [e for e, _ in events] == ["chaos_start"]
    clock.t += drawn[0].at_s + 1e-6  # due now; the next one later
    m.tick([])
    assert requested(events) == [drawn[0].replica]
    req = chaos_plan.read_request(tmp_path, drawn[0].replica)
    assert req is not None and req[0] == chaos_plan.ChaosRequest(0, "kill")


def test_never_below_min_alive_and_a_blocked_fault_holds_the_next(tmp_path):
    m, clock, events, cfg = monkey(tmp_path, replicas=4, min_alive=2)
    for r in range(4):
        m.saw(r, [rec(1, clock.t)])
    m.tick([])
    for _ in range(50):  # a long time, no group recovers: faults fire until 2 groups would be left
        clock.t += 10
        m.tick([])
        assert len(m.up) >= 2
    hit = requested(events)
    assert len(hit) == len(set(hit)) == 2  # 4 groups, 2 must stay up: 2 faults fired, the rest wait
    waiting = m.next
    assert waiting is not None and any(e == "chaos_wait" for e, _ in events)
    # the groups hit come back (a commit after the fault): the waiting fault fires next, in order
    for r in hit:
        m.saw(r, [rec(5, clock.t + 1, commit=True)])
    clock.t += 2
    m.tick([])
    assert requested(events)[2] == waiting.replica


def test_a_group_is_up_again_only_at_its_first_commit_after_the_fault(tmp_path):
    m, clock, events, cfg = monkey(tmp_path, replicas=2)
    m.saw(0, [rec(1, clock.t)])
    m.saw(1, [rec(1, clock.t)])
    m.tick([])
    clock.t += 1000
    m.tick([])
    (r,) = requested(events)
    assert r not in m.up
    m.saw(r, [rec(7, clock.t - 5, commit=True)])  # a commit from before the fault (read late)
    m.saw(r, [rec(8, clock.t + 1)])  # a step without a commit
    assert r not in m.up
    m.saw(r, [rec(10, clock.t + 2, commit=True)])
    assert r in m.up


def test_a_fired_request_is_removed_and_faults_stop_at_the_cap_and_near_the_end(tmp_path):
    m, clock, events, cfg = monkey(tmp_path, replicas=3, max_faults=1)
    for r in range(3):
        m.saw(r, [rec(1, clock.t)])
    m.tick([])
    clock.t += 1000
    m.tick([])
    (r,) = requested(events)
    marker = layout.fault_marker(tmp_path, chaos_plan.marker_key(0, "kill", r, 12))
    marker.parent.mkdir()
    marker.write_text(msgspec.json.encode(layout.FaultMarker(r, 12, "kill", fired_at=clock.t)).decode())
    m.tick([])
    assert not chaos_plan.request_path(tmp_path, r).exists()
    assert m.restarts_granted(r) == 1 and m.restarts_granted((r + 1) % 3) == 0
    m.saw(r, [rec(20, clock.t + 1, commit=True)])
    clock.t += 1000
    m.tick([])
    assert requested(events) == [r] and m.ended == "--chaos-max-faults 1 reached"

    m, clock, events, cfg = monkey(tmp_path / "end", replicas=3, steps=100)
    for r in range(3):
        m.saw(r, [rec(80, clock.t)])  # --steps 100 - H 20: no fault from step 80 on
    m.tick([])
    clock.t += 1000
    m.tick([])
    assert requested(events) == [] and "the longest recovery so far = 80" in (m.ended or "")


def test_faults_stop_earlier_by_the_steps_of_the_longest_recovery_seen(tmp_path):
    # --steps 100, H 20; the leading group makes 1 step/s; a recovery took 10 s: no fault from step 70
    m, clock, events, cfg = monkey(tmp_path, replicas=3, steps=100)
    start = clock.t
    for r in range(3):
        m.saw(r, [rec(1, clock.t)])
    m.tick([])
    assert m.last_fault_step(clock.t) == 80  # no recovery seen yet
    clock.t += 40
    m.tick([])
    (r,) = requested(events)[:1]
    m.saw(r, [rec(41, clock.t + 10, commit=True)])  # back 10 s after the request
    assert m.longest_recovery_s == 10.0
    m.saw((r + 1) % 3, [rec(60, start + 60)])
    clock.t = start + 60
    assert m.last_fault_step(clock.t) == 100 - 20 - 10
