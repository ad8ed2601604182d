"""The stop decision of a rank's loop (ftrun.worker.stop): no process, no clock (times are given)."""

from ftrun.layout import Quorum, RunEvent
from ftrun.worker.stop import StopRule, left_behind, relaunched_pending

RESTART_1 = RunEvent(event="restart", t=100.0, replica=1, incarnation=1, after_step=25)


def quorum(t, *members):
    """One new quorum, formed at time ``t`` (what QuorumProbe.take hands over)."""
    q = Quorum(quorum_id=1, participants=list(members), replica_rank=0, max_step=0, heal=False, heal_source=None, t=t)
    return [q]


def test_stops_at_the_last_step_when_nothing_was_relaunched():
    rule = StopRule(steps=60, bound_s=30.0)
    assert not rule.decide(59, [], now=0.0).stop
    assert rule.decide(60, [], now=0.0).stop


def test_survivors_go_on_past_the_last_step_until_the_relaunched_group_commits_with_them():
    rule = StopRule(steps=60, bound_s=30.0)
    rule.saw(quorum(50.0, 0, 1, 2), committed=True)  # before the kill: group 1 committed
    rule.saw(quorum(120.0, 0, 2), committed=True)  # after its relaunch, without it
    d = rule.decide(60, [RESTART_1], now=121.0)
    assert (d.stop, d.waiting, d.gave_up) == (False, (1,), False)
    rule.saw(quorum(125.0, 0, 1, 2), committed=False)  # back in the quorum, no commit yet
    assert not rule.decide(61, [RESTART_1], now=125.0).stop
    rule.saw([], committed=True)  # the commit of that quorum
    d = rule.decide(62, [RESTART_1], now=126.0)
    assert d.stop and not d.gave_up


def test_a_failed_commit_with_the_relaunched_group_ends_the_wait():
    """Every commit failing (Baby-NCCL on torchft 0.2): the group is back once a round with it was
    decided; waiting for a successful commit would only run to the bound."""
    rule = StopRule(steps=60, bound_s=30.0)
    rule.saw(quorum(120.0, 0, 2), committed=False, failed=True)  # after its relaunch, without it
    assert rule.decide(60, [RESTART_1], now=121.0).waiting == (1,)
    rule.saw(quorum(125.0, 0, 1, 2), committed=False)  # back in the quorum, the round not decided yet
    assert not rule.decide(61, [RESTART_1], now=125.0).stop
    rule.saw([], committed=False, failed=True)  # that round's commit failed
    d = rule.decide(62, [RESTART_1], now=126.0)
    assert d.stop and not d.gave_up
    old = StopRule(steps=60, bound_s=30.0)  # a failed round in a quorum formed before the relaunch
    old.saw(quorum(99.0, 0, 1, 2), committed=False)
    old.saw([], committed=False, failed=True)
    assert old.decide(60, [RESTART_1], now=101.0).waiting == (1,)


def test_a_commit_in_a_quorum_formed_before_the_relaunch_does_not_count():
    # the kill lands between a quorum and its commit: the commit still lists the old incarnation
    rule = StopRule(steps=60, bound_s=30.0)
    rule.saw(quorum(99.0, 0, 1, 2), committed=False)
    rule.saw([], committed=True)  # committed after the restart (t=100), in the quorum of t=99
    assert rule.decide(60, [RESTART_1], now=101.0).waiting == (1,)


def test_a_group_back_before_the_last_step_adds_no_step():
    rule = StopRule(steps=60, bound_s=30.0)
    rule.saw(quorum(110.0, 0, 1, 2), committed=True)
    assert rule.decide(60, [RESTART_1], now=200.0).stop


def test_the_wait_is_bounded_and_says_whom_it_gave_up_on():
    rule = StopRule(steps=60, bound_s=30.0)
    rule.saw(quorum(120.0, 0, 2), committed=True)
    assert not rule.decide(60, [RESTART_1], now=200.0).stop
    assert not rule.decide(70, [RESTART_1], now=230.0).stop  # exactly the bound: still within it
    d = rule.decide(71, [RESTART_1], now=230.5)
    assert d.stop and d.gave_up and d.waiting == (1,)


def test_a_group_lost_for_good_or_done_is_not_waited_for():
    lost = RunEvent(event="group_lost", t=101.0, replica=1)
    assert relaunched_pending([RESTART_1, lost], {}) == ()
    rule = StopRule(steps=60, bound_s=30.0)
    assert rule.decide(60, [RESTART_1, RunEvent(event="group_done", t=150.0, replica=1)], now=0.0).stop


def test_a_second_relaunch_needs_a_commit_after_it():
    again = RunEvent(event="restart", t=130.0, replica=1, incarnation=2, after_step=40)
    assert relaunched_pending([RESTART_1], {1: 120.0}) == ()
    assert relaunched_pending([RESTART_1, again], {1: 120.0}) == (1,)


def test_the_relaunched_group_stops_after_its_own_first_commit_past_the_last_step():
    rule = StopRule(steps=60, bound_s=30.0)  # the relaunched group's own rule (it aligned to step 64)
    rule.saw(quorum(140.0, 0, 1, 2), committed=False)
    assert not rule.decide(64, [RESTART_1], now=140.0).stop
    rule.saw([], committed=True)
    assert rule.decide(65, [RESTART_1], now=141.0).stop


def test_left_behind_only_when_nobody_else_is_in_its_quorum():
    assert left_behind(64, 60, quorum(0.0, 1), replica=1)
    assert not left_behind(64, 60, quorum(0.0, 0, 1, 2), replica=1)  # the others wait for it
    assert not left_behind(40, 60, quorum(0.0, 1), replica=1)
    assert not left_behind(None, 60, quorum(0.0, 1), replica=1)


def test_one_cause_when_it_never_came_back():
    from ftrun.worker.stop import never_back_cause

    waited = never_back_cause(30, 74, 5.0)
    assert waited == (
        "not back within --quorum-timeout 5 s: "
        "the others trained 44 step(s) past --steps 30 waiting for it, then stopped"
    )
    assert never_back_cause(30, 30, 5.0) == "the other groups finished before it rejoined"  # nothing waited
