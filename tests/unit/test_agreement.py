"""check_agreement: one commit is (quorum id, manager step); same commit, different numbers fails."""

from ftrun.check.agreement import check_agreement
from ftrun.check.problems import disagreements
from ftrun.layout import EventRecord


def rec(manager_step_after: int, quorum_id: int | None, fingerprint: str, fragment: int = 0) -> EventRecord:
    return EventRecord(
        step=manager_step_after,
        manager_step=manager_step_after - 1,
        manager_step_after=manager_step_after,
        participants=None,
        quorum_id=quorum_id,
        loss=0.0,
        step_time_s=0.1,
        restart=0,
        sent=None,
        synced=fragment,
        commit=True,
        fingerprint=fingerprint,
        t=0.0,
    )


def test_same_quorum_same_step_different_parameters_disagree():
    ag = check_agreement({(0, 0): [rec(5, 3, "aa")], (1, 0): [rec(5, 3, "bb")]})
    assert ag.commits_checked == 1 and not ag.ok
    (d,) = ag.disagreements
    assert d.quorum_id == 3 and d.manager_step == 5
    (line,) = disagreements(ag)
    assert "after manager step 5 in quorum 3 (rank 0)" in line


def test_same_step_in_different_quorums_is_not_one_commit():
    # replica 2 left behind commits manager step 16 alone (quorum 5) after replicas 0 and 1
    # committed their own step 16 together (quorum 4): two averages, nothing to compare across
    logs = {
        (0, 0): [rec(16, 4, "aa")],
        (1, 0): [rec(16, 4, "aa")],
        (2, 0): [rec(16, 5, "cc")],
    }
    ag = check_agreement(logs)
    assert ag.ok and ag.commits_checked == 1


def test_a_commit_seen_by_one_replica_checks_nothing():
    ag = check_agreement({(0, 0): [rec(16, 4, "aa")], (1, 0): [rec(17, 4, "bb")]})
    assert ag.ok and ag.commits_checked == 0
