"""The fault specs (--kill, --hang, --fail-commit) as parsed, and the worker's fail-commit hook
against a stand-in for torchft's Manager: no process."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from ftrun.errors import BadInput
from ftrun.fault_flags import parse_fail_commit, parse_faults, parse_hang, parse_kill


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.text(max_size=12), max_size=3),
    st.lists(st.text(max_size=12), max_size=3),
    st.integers(-3, 5),
    st.integers(-5, 200),
    st.lists(st.text(max_size=12) | st.from_regex(r"\d@\d{1,3}", fullmatch=True), max_size=2),
    st.integers(1, 30),
)
def test_fault_parser_never_raises_anything_but_bad_input(kills, hangs, replicas, steps, fail_commits, window):
    try:
        faults = parse_faults(kills, hangs, replicas, steps, fail_commits, window)
    except BadInput as e:
        assert "\n" not in str(e)
        return
    for f in faults:
        assert 0 <= f.replica < replicas and 1 <= f.step <= steps


def test_fault_parser_examples():
    assert parse_kill("1@25").action == "kill"
    assert parse_kill("1@25:sigterm").action == "sigterm"
    h = parse_hang("0@12:2.5")
    assert (h.replica, h.step, h.seconds, h.action) == (0, 12, 2.5, "hang")
    c = parse_fail_commit(" 1@5 ")
    assert (c.replica, c.step, c.action, c.key) == (1, 5, "fail-commit", "fail-commit-r1-s5")
    # the last sync of 40 steps at w = 10 is step 40; at w = 7, step 35
    assert parse_faults([], [], 2, 40, ["1@40"], 10)[0].step == 40
    with pytest.raises(BadInput, match="no sync at or after step 36 .*at step 35"):
        parse_faults([], [], 2, 40, ["1@36"], 7)
    with pytest.raises(BadInput, match="same fault"):
        parse_faults([], [], 2, 40, ["1@5", "1@5"], 10)


class _Manager:
    """What the worker's fault hook touches of torchft's Manager: ``should_commit``, ``report_error``."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.votes: list[bool] = []

    def report_error(self, e: Exception) -> None:
        self.errors.append(str(e))

    def should_commit(self) -> bool:
        ok = not self.errors
        self.votes.append(ok)
        self.errors = []  # torchft clears the error at the next quorum
        return ok


def test_fail_commit_hook_votes_once_at_the_first_sync_from_its_step(tmp_path):
    from ftrun import layout
    from ftrun.worker.fault_injection import FaultInjector

    specs = [layout.FaultSpec(1, 5, "fail-commit"), layout.FaultSpec(0, 3, "fail-commit")]
    m = _Manager()
    f = FaultInjector(specs, replica=1, rank=0, run_dir=tmp_path)
    f.wrap_commit(m)
    for step in range(1, 13):
        f.before_step(step)
        if step % 2 == 0:  # a sync every 2 steps
            m.should_commit()
    assert m.votes == [True, True, False, True, True, True]  # steps 2, 4, 6 (first sync from 5), 8, ...
    marker = layout.read_fault_markers(tmp_path)
    assert [(x.replica, x.step, x.action, x.fired_step) for x in marker] == [(1, 5, "fail-commit", 6)]
    # a restarted group (marker present) does not fire it again; other ranks never vote against
    for rank in (0, 1):
        m2 = _Manager()
        f2 = FaultInjector(specs, replica=1, rank=rank, run_dir=tmp_path)
        f2.wrap_commit(m2)
        f2.before_step(6)
        assert m2.should_commit() is True


def test_fail_commit_explains_only_its_groups_commit_at_its_sync():
    from ftrun.check.commits import FailedCommit, explain
    from ftrun.check.fired_faults import CommitVote, FiredFaults
    from ftrun.schedule import Schedule

    commits = [
        FailedCommit(1, 0, 6, 0, "event_log"),
        FailedCommit(1, 1, 6, 0, "event_log"),
        FailedCommit(0, 0, 6, 0, "event_log"),
        FailedCommit(1, 0, 8, 1, "event_log"),
    ]
    explain(commits, FiredFaults(votes=[CommitVote(1, 5, 6)]), Schedule(2, 4, 1))
    assert [c.explained for c in commits] == [True, True, False, False]
