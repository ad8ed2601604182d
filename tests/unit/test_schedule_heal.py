"""The heal model (``ftrun.schedule.rounds``/``stalled``, ``ftrun.check.commits.CommitModel``):
what torchft does after a failed ``should_commit``, on hand-made schedules and against torchft's
real ``DiLoCo`` step hook driven in-process by fake managers that heal at the quorum as
``Manager._async_quorum`` does. No process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st
from test_schedule import _Work  # what torchft's fragments use of a Work
from torch import nn
from torchft.local_sgd import DiLoCo

from ftrun.check import commits
from ftrun.check.analyze import analyze
from ftrun.check.fired_faults import FiredFaults
from ftrun.schedule import ReleaseBehaviour, Schedule, rounds, stalled
from ftrun.torchft_compat import TORCHFT_0_2_COMMITS, TORCHFT_NIGHTLY_COMMITS, release_behaviour

RELEASES = [TORCHFT_0_2_COMMITS, TORCHFT_NIGHTLY_COMMITS]
NO_HEAL = ReleaseBehaviour("a release that would not heal", heals_behind_groups=False)
SCH = Schedule(2, 20, 5)  # w = 10: sends at 5, 15, 25, ...; syncs at 10, 20, 30, ...


def _fragments(sch: Schedule, steps: int, group: int, played, behaviour) -> list[tuple[int, str, int]]:
    return [(e.step, e.kind, e.fragment) for e in sch.events(steps, failed_cycles=stalled(played, group, behaviour))]


@pytest.mark.parametrize("behaviour", RELEASES, ids=lambda b: b.name)
def test_a_group_that_fails_alone_heals_and_follows_its_peers(behaviour):
    """Group 1 fails cycle 0 (sync at 10); group 0 commits: at the quorum of the send at 15
    group 1 is behind max_step, heals to it and sends fragment 1, as group 0 does."""
    played = rounds(4, {0, 1}, {0: {1}}, behaviour)
    assert [r.healed for r in played] == [frozenset(), frozenset({1}), frozenset(), frozenset()]
    assert [dict(r.steps) for r in played[:2]] == [{0: 0, 1: 0}, {0: 1, 1: 1}]
    assert stalled(played, 1, behaviour) == [] == stalled(played, 0, behaviour)
    want = [(5, "send", 0), (10, "sync", 0), (15, "send", 1), (20, "sync", 1), (25, "send", 0)]
    assert _fragments(SCH, 25, 1, played, behaviour) == want == _fragments(SCH, 25, 0, played, behaviour)


@pytest.mark.parametrize("behaviour", RELEASES, ids=lambda b: b.name)
def test_only_a_cycle_no_group_committed_repeats_its_fragment(behaviour):
    played = rounds(3, {0, 1}, {0: {0, 1}}, behaviour)
    assert not played[0].advanced and stalled(played, 0, behaviour) == [0] == stalled(played, 1, behaviour)
    assert [f for _, k, f in _fragments(SCH, 30, 1, played, behaviour) if k == "send"] == [0, 0, 1]


@pytest.mark.parametrize("behaviour", RELEASES, ids=lambda b: b.name)
def test_a_group_that_always_votes_false_heals_every_round(behaviour):
    played = rounds(6, {0, 1}, {c: {1} for c in range(6)}, behaviour)
    assert [bool(r.healed) for r in played] == [False] + [True] * 5
    assert stalled(played, 1, behaviour) == []
    assert [f for _, k, f in _fragments(SCH, 60, 1, played, behaviour) if k == "sync"] == [0, 1, 0, 1, 0, 1]


def test_a_release_that_did_not_heal_would_retry_its_fragment():
    """The model is the behaviour's, not a constant: without heals the failing group keeps its
    step (its peers do not), which is what ftrun expected before the heal was modelled."""
    played = rounds(3, {0, 1}, {0: {1}}, NO_HEAL)
    assert stalled(played, 1, NO_HEAL) == [0] and stalled(played, 0, NO_HEAL) == []


def test_the_releases_share_the_heal_and_differ_in_baby_process_groups():
    assert release_behaviour("torchft") == TORCHFT_0_2_COMMITS and release_behaviour(None) == TORCHFT_0_2_COMMITS
    assert release_behaviour("torchft-nightly") == TORCHFT_NIGHTLY_COMMITS
    a, b = (rounds(5, {0, 1, 2}, {0: {1}, 2: {0, 2}, 3: {0, 1, 2}}, r) for r in RELEASES)
    assert [(dict(x.steps), x.healed) for x in a] == [(dict(x.steps), x.healed) for x in b]
    assert TORCHFT_0_2_COMMITS.commits_fail_always("baby-gloo")
    assert not TORCHFT_NIGHTLY_COMMITS.commits_fail_always("baby-gloo")
    assert not TORCHFT_0_2_COMMITS.commits_fail_always("gloo")
    # where every commit fails (0.2's Baby groups), every cycle stalls: fragment 0 forever
    played = rounds(4, {0, 1}, {c: {0, 1} for c in range(4)}, TORCHFT_0_2_COMMITS)
    assert stalled(played, 0, TORCHFT_0_2_COMMITS) == [0, 1, 2, 3]


def test_evidence_and_unseen_groups():
    beh = TORCHFT_0_2_COMMITS
    # group 1 alone, failed: with no peer known, the cycle stalls ...
    assert stalled(rounds(3, {1}, {0: {1}}, beh), 1, beh) == [0]
    # ... unless evidence (a heal, its next send) shows an unseen group committed: it heals to it
    played = rounds(3, {1}, {0: {1}}, beh, outcome={0: True})
    assert stalled(played, 1, beh) == [] and played[1].healed == frozenset({1})
    # evidence that nobody committed stalls the known committers too
    assert stalled(rounds(3, {0, 1}, {0: {1}}, beh, outcome={0: False}), 0, beh) == [0]


def test_a_group_away_is_not_in_the_quorum_and_heals_when_back():
    beh = TORCHFT_0_2_COMMITS
    # group 1 lost for cycles 1-2; group 0 fails cycle 1 alone (nobody else in the quorum): stall
    played = rounds(5, {0, 1}, {1: {0}, 2: {1}}, beh, away=lambda g, c: g == 1 and c in (1, 2))
    assert [r.advanced for r in played] == [True, False, True, True, True]
    assert played[3].healed == frozenset({1}) and played[3].steps == {0: 2, 1: 2}
    assert stalled(played, 0, beh) == [1]
    s1 = stalled(played, 1, beh)
    assert len(s1) == 1 and set(s1) <= {1, 2}  # one of the cycles it missed: nothing expected there


def test_commit_model_reads_logged_failures_heals_and_trace_outcomes():
    fc = [commits.FailedCommit(1, 0, 10, 0, "event_log")]
    model = commits.CommitModel(SCH, FiredFaults(), TORCHFT_0_2_COMMITS, groups={0, 1})
    assert model.stalled(1, fc) == [] == model.stalled(0, fc)
    alone = commits.CommitModel(SCH, FiredFaults(), TORCHFT_0_2_COMMITS)
    assert alone.stalled(1, fc) == [0]  # the only group known failed
    assert commits.CommitModel(SCH, FiredFaults(), TORCHFT_0_2_COMMITS, heals={1: [15]}).stalled(1, fc) == []
    assert alone.stalled(1, fc, {0: True}) == []
    # a next send that repeats the fragment says nobody committed, unless a commit was seen there
    assert model.stalled(0, fc, {0: False}) == [0]
    model.saw_commit(0, 10)
    assert model.stalled(1, fc, {0: False}) == []


def _seen(step, cls, nxt, committed):
    return commits.SyncSeen(step, cls, None, nxt, step + 5 if nxt is not None else None, committed)


def test_outcomes_from_the_next_send():
    got = commits.outcomes(
        [_seen(10, "a", "b", False), _seen(20, "b", "b", False), _seen(30, "a", "a", None), _seen(40, "b", "a", True)],
        SCH,
    )
    assert got == {1: False, 2: False}  # moving on after a failure proves no unseen group committed
    assert commits.outcomes([_seen(20, "b", "b", False)], SCH, classes_distinct=False) == {}
    assert commits.outcomes([_seen(10, "a", "a", False)], Schedule(1, 10, 5)) == {}
    # an inferred failure keys on the outer step; a next send of the same class is a stall too
    assert commits.infer([_seen(10, "a", "b", False), _seen(20, "b", "b", None)], SCH) == [
        (10, commits.NO_OUTER_STEP),
        (20, commits.SENT_AGAIN),
    ]


# --- against torchft's own DiLoCo: groups that heal at the quorum as torchft's Manager does ---


class _Job:
    """The lighthouse's part: each group's manager step, for the quorums' ``max_step``."""

    def __init__(self) -> None:
        self.managers: list[_HealingManager] = []
        self.tops: list[int] = []  # each quorum's max_step, taken when its first group asks

    def max_step(self, quorum: int) -> int:
        if quorum == len(self.tops):
            self.tops.append(max(m._step for m in self.managers))
        return self.tops[quorum]


class _HealingManager:
    """``torchft.Manager`` as ``DiLoCo`` sees it (synchronous quorum): ``start_quorum`` heals a
    group behind the job's ``max_step`` to it (``_async_quorum`` -> ``load_state_dict``, applied
    before returning); ``should_commit`` returns False in the cycles of ``fails`` and adds 1 to
    the step only on True."""

    _use_async_quorum = False

    def __init__(self, job: _Job, fails) -> None:
        self.job, self.fails = job, set(fails)
        self._step, self.cycle, self.healed = 0, 0, []
        job.managers.append(self)

    def register_state_dict_fn(self, key, load_fn, save_fn) -> None:
        pass

    def allow_state_dict_read(self) -> None:
        pass

    def disallow_state_dict_read(self) -> None:
        pass

    def start_quorum(self, allow_heal: bool = True, shrink_only: bool = False, timeout=None) -> None:
        top = self.job.max_step(self.cycle)  # one quorum per cycle, at its send
        if self._step < top:
            self.healed.append(self.cycle)
            self._step = top

    def current_step(self) -> int:
        return self._step

    def num_participants(self) -> int:
        return len(self.job.managers)

    def allreduce(self, tensor: torch.Tensor, should_quantize: bool = False, reduce_op=None) -> _Work:
        return _Work(tensor)

    def should_commit(self, timeout=None) -> bool:
        ok = self.cycle not in self.fails
        self.cycle += 1
        self._step += ok
        return ok


def _drive(sch: Schedule, steps: int, fails: list[set[int]]) -> list[list[tuple[int, str, int]]]:
    """The groups' DiLoCos stepped in lockstep; each group's (step, kind, fragment) as torchft ran them."""
    torch.manual_seed(0)
    job = _Job()
    runs = []
    for mine in fails:
        frags = [nn.Linear(2, 2) for _ in range(sch.fragments)]
        inner = torch.optim.SGD([p for f in frags for p in f.parameters()], lr=0.1)
        outer = [torch.optim.SGD(f.parameters(), lr=0.7) for f in frags]
        manager = _HealingManager(job, mine)
        diloco = DiLoCo(
            manager, frags, inner, outer, sync_every=sch.sync_every, fragment_sync_delay=sch.fragment_sync_delay
        )
        diloco.__enter__()
        seen: list[tuple[int, str, int]] = []
        for i, frag in enumerate(diloco._fragments):
            for kind, name in (("send", "prepare_sync"), ("sync", "perform_sync")):
                fn = getattr(frag, name)
                setattr(frag, name, lambda fn=fn, kind=kind, i=i, seen=seen: (seen.append((-1, kind, i)), fn())[1])
        runs.append((frags, inner, diloco, seen))
    x = torch.ones(1, 2)
    for step in range(1, steps + 1):
        for frags, inner, _, seen in runs:
            n = len(seen)
            inner.zero_grad()
            sum(f(x).sum() for f in frags).backward()
            inner.step()
            seen[n:] = [(step, k, f) for _, k, f in seen[n:]]
    for _, _, diloco, _ in runs:
        diloco.__exit__(None, None, None)
    return [seen for *_, seen in runs]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    f=st.integers(1, 3),
    w=st.integers(1, 3),
    data=st.data(),
)
def test_the_model_is_what_torchft_runs(f, w, data):
    """Random failures of 2-3 groups: every group's sends and syncs, fragment by fragment, are
    ``Schedule.events`` with ``stalled`` of the model's rounds, for both releases."""
    tau = data.draw(st.integers(0, w - 1))
    sch = Schedule(f, f * w, tau)
    groups = data.draw(st.integers(2, 3))
    cycles = 6
    fails = [data.draw(st.sets(st.integers(0, cycles - 1))) for _ in range(groups)]
    ran = _drive(sch, cycles * w, fails)
    failed = {c: {g for g in range(groups) if c in fails[g]} for c in range(cycles)}
    for behaviour in RELEASES:
        played = rounds(cycles + 1, set(range(groups)), failed, behaviour)
        for g in range(groups):
            assert ran[g] == _fragments(sch, cycles * w, g, played, behaviour), (g, fails)


# --- the whole check, on hand-made traces of two groups (F=2 H=4 tau=1: w=2) ---

LS = "torchft::local_sgd::"


def _x(name: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def _trace(path: Path, frags: list[int], failed: set[int], skew: float = 0.0) -> None:
    """Steps 1-8 (``ProfilerStep#0`` holds no optimizer step: numbering 'top'); cycle c sends and
    syncs fragment ``frags[c]`` (told apart by 2 or 3 allreduces); the cycles in ``failed`` have
    ``should_commit`` without the outer optimizer's step after it."""
    ev = []
    for k in range(9):
        t0 = k * 1000.0 + skew
        ev.append(_x(f"ProfilerStep#{k}", t0, 999))
        if k == 0:
            continue
        ev.append(_x("Optimizer.step#SGD.step", t0 + 100, 300))
        c = (k - 1) // 2
        if k % 2:  # local step 1 = w - tau: the send
            ev.append(_x(LS + "prepare_sync", t0 + 150, 200))
            ev += [_x("torchft::manager::allreduce", t0 + 160 + 20 * i, 10) for i in range(2 + frags[c])]
        else:  # local step 2 = w: the sync
            ev += [_x(LS + "perform_sync", t0 + 420, 400), _x(LS + "wait", t0 + 430, 20)]
            ev += [_x(LS + "restore_parameters", t0 + 460, 20), _x("torchft::manager::should_commit", t0 + 500, 50)]
            if c not in failed:
                ev += [_x("Optimizer.step#SGD.step", t0 + 600, 50), _x(LS + "save_parameters", t0 + 700, 50)]
    path.write_text(json.dumps({"traceEvents": ev}))


def _check(tmp_path: Path, one: tuple[list[int], set[int]], allow: bool = True):
    """Group 0 commits every cycle, sending 0, 1, 0, 1; group 1 as ``one`` says."""
    _trace(tmp_path / "replica0_rank0.pt.trace.json", [0, 1, 0, 1], set())
    _trace(tmp_path / "replica1_rank0.pt.trace.json", *one, skew=37.0)
    return analyze([tmp_path], fragments=2, sync_every=4, fragment_sync_delay=1, allow_failed_commits=allow)


def test_traces_alone_a_group_that_failed_alone_and_healed_passes(tmp_path):
    report = _check(tmp_path, ([0, 1, 0, 1], {1}))
    assert report.verdict == "pass" and report.problems() == []
    assert [(c.replica, c.sync_step, c.source) for c in report.failed_commits] == [(1, 4, "inferred")]
    assert [w.failed_cycles for w in report.workers] == [[], []]
    refused = _check(tmp_path, ([0, 1, 0, 1], {1}), allow=False)
    assert refused.verdict == "fail" and len(refused.problems()) == 1
    assert refused.problems()[0].startswith("replica 1 rank 0: 1 commit(s) failed (sync steps 4; inferred")


def test_traces_alone_a_group_that_retried_while_its_peer_committed_is_named(tmp_path):
    """The bug the old expectation would have passed: group 1 sends its fragment again although
    group 0 committed (its outer step is in the trace): group 1's events are the wrong ones."""
    report = _check(tmp_path, ([0, 1, 1, 0], {1}))
    assert report.verdict == "fail"
    mine = [p for p in report.problems() if p.startswith("replica 1 rank 0:")]
    assert mine[0] == "replica 1 rank 0: send at step 5: fragment 1, expected fragment 0"
    assert not [p for p in report.problems() if p.startswith("replica 0 rank 0:")]


def test_traces_alone_a_cycle_no_group_committed_repeats_for_both(tmp_path):
    _trace(tmp_path / "replica0_rank0.pt.trace.json", [0, 1, 1, 0], {1})
    _trace(tmp_path / "replica1_rank0.pt.trace.json", [0, 1, 1, 0], {1}, skew=37.0)
    report = analyze([tmp_path], fragments=2, sync_every=4, fragment_sync_delay=1, allow_failed_commits=True)
    assert report.verdict == "pass" and [w.failed_cycles for w in report.workers] == [[1], [1]]


def test_traces_alone_groups_that_all_failed_and_moved_on_are_named(tmp_path):
    """A release that moved on after a failed commit (the manager step advanced on False): every
    known group failed, so nobody could be healed from; moving on is no proof of an unseen peer."""
    _trace(tmp_path / "replica0_rank0.pt.trace.json", [0, 1, 0, 1], {1})
    _trace(tmp_path / "replica1_rank0.pt.trace.json", [0, 1, 0, 1], {1}, skew=37.0)
    report = analyze([tmp_path], fragments=2, sync_every=4, fragment_sync_delay=1, allow_failed_commits=True)
    assert report.verdict == "fail"
    for r in (0, 1):
        assert f"replica {r} rank 0: send at step 5: fragment 0, expected fragment 1" in report.problems()
