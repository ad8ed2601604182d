"""A folder's files read at once in forked children (``ftrun.trace.forked.map_forked``): the
results and the first error of reading them in turn. The children run in this process here
(unit tests start no process); the real fork is in the e2e tests that read folders."""

from __future__ import annotations

import pytest

from ftrun.errors import BadInput
from ftrun.trace import forked


class _Child:
    made: list[_Child] = []
    fail: set[int] = set()  # children (by order made) whose result is lost, as a killed one's

    def __init__(self, fn, max_bytes: int) -> None:
        self.fn, self.closed, self.k = fn, False, len(_Child.made)
        _Child.made.append(self)

    def result(self):
        if self.k in _Child.fail:
            return None
        try:
            return self.fn(lambda: None)
        except Exception:
            return None

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def pool(monkeypatch):
    _Child.made, _Child.fail = [], set()
    monkeypatch.setattr(forked, "Forked", _Child)
    monkeypatch.setattr(forked, "usable", lambda: True)
    monkeypatch.setattr(forked.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    return _Child


def test_the_results_come_back_in_order_from_the_children(pool):
    calls = []

    def square(x: int) -> int:
        calls.append(x)
        return x * x

    assert forked.map_forked(square, list(range(7)), workers=3) == [x * x for x in range(7)]
    assert len(pool.made) == 3 and all(c.closed for c in pool.made)  # every child reaped
    assert sorted(calls) == list(range(7))  # each item once: nothing read twice


def test_a_lost_child_is_read_here_again(pool):
    pool.fail = {1}
    assert forked.map_forked(lambda x: -x, list(range(5)), workers=2) == [0, -1, -2, -3, -4]


def test_the_first_error_is_the_plain_loops(pool):
    def read(x: int) -> int:
        if x in (2, 3):
            raise BadInput(f"file {x}: bad")
        return x

    with pytest.raises(BadInput, match="file 2: bad"):
        forked.map_forked(read, list(range(6)), workers=2)  # file 3's child fails first; file 2 is named
    assert all(c.closed for c in pool.made)


def test_one_item_one_worker_or_no_fork_run_here(pool, monkeypatch):
    assert forked.map_forked(str, [1], workers=4) == ["1"]
    assert forked.map_forked(str, [1, 2], workers=1) == ["1", "2"]
    monkeypatch.setattr(forked, "usable", lambda: False)
    assert forked.map_forked(str, [1, 2, 3], workers=4) == ["1", "2", "3"]
    assert pool.made == []
