"""``ftrun.schedule`` against torchft's real ``DiLoCo`` step hook, driven in-process.

A fake manager stands in for ``torchft.Manager`` (no processes, no network); the fragments'
``prepare_sync``/``perform_sync`` are wrapped to record what torchft actually ran, step by
step, and compared with ``Schedule.events``. Commit failures are injected per cycle.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st
from torch import nn
from torchft.local_sgd import DiLoCo

from ftrun.schedule import Schedule, ScheduleError, validate


class _Work:
    """What torchft's fragments use of a ``Work``: ``wait()`` and ``get_future()``."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self._fut: torch.futures.Future = torch.futures.Future()
        self._fut.set_result([tensor])

    def wait(self, timeout=None) -> bool:
        return True

    def get_future(self) -> torch.futures.Future:
        return self._fut


class FakeManager:
    """Just enough of ``torchft.Manager`` for ``DiLoCo`` (sync quorum, one replica).

    ``should_commit`` is called once per cycle (at the sync); it returns False for the cycles
    in ``failed_cycles`` and, like the real manager, advances the step only on success.
    """

    _use_async_quorum = False

    def __init__(self, failed_cycles=()) -> None:
        self.failed_cycles = set(failed_cycles)
        self._step = 0
        self.cycle = 0
        self.quorums = 0
        self.allreduces = 0
        self.state_dict_fns: dict[str, tuple] = {}
        self.state_dict_readable = True

    def register_state_dict_fn(self, key, load_fn, save_fn) -> None:
        assert key not in self.state_dict_fns
        self.state_dict_fns[key] = (load_fn, save_fn)

    def allow_state_dict_read(self) -> None:
        self.state_dict_readable = True

    def disallow_state_dict_read(self) -> None:
        self.state_dict_readable = False

    def start_quorum(self, allow_heal: bool = True, shrink_only: bool = False, timeout=None) -> None:
        self.quorums += 1

    def current_step(self) -> int:
        return self._step

    def num_participants(self) -> int:
        return 1

    def allreduce(self, tensor: torch.Tensor, should_quantize: bool = False, reduce_op=None) -> _Work:
        self.allreduces += 1
        return _Work(tensor)  # the average over one participant is the tensor itself

    def should_commit(self, timeout=None) -> bool:
        ok = self.cycle not in self.failed_cycles
        self.cycle += 1
        if ok:
            self._step += 1
        return ok


def drive(fragments: int, sync_every: int, delay: int, steps: int, failed_cycles=(), bucketize: bool = False):
    """Run ``steps`` inner steps through the real DiLoCo; returns [(step, kind, fragment, manager_step)]."""
    torch.manual_seed(0)
    frags = [nn.Linear(2, 2) for _ in range(fragments)]
    params = [p for f in frags for p in f.parameters()]
    inner = torch.optim.SGD(params, lr=0.1)
    outer = [torch.optim.SGD(f.parameters(), lr=0.7, momentum=0.9, nesterov=True) for f in frags]
    manager = FakeManager(failed_cycles)
    seen: list[tuple[int, str, int, int]] = []
    current = {"step": 0}
    with DiLoCo(
        manager,
        frags,
        inner,
        outer,
        sync_every=sync_every,
        fragment_sync_delay=delay,
        use_bucketization=bucketize,
        pin_memory=False,
    ) as diloco:
        assert len(manager.state_dict_fns) == fragments
        for i, frag in enumerate(diloco._fragments):

            def wrap(kind, fn, i=i):
                def hooked():
                    seen.append((current["step"], kind, i, manager.current_step()))
                    return fn()

                return hooked

            frag.prepare_sync = wrap("send", frag.prepare_sync)
            frag.perform_sync = wrap("sync", frag.perform_sync)
        x = torch.ones(1, 2)
        for step in range(1, steps + 1):
            current["step"] = step
            inner.zero_grad()
            sum(f(x).sum() for f in frags).backward()
            inner.step()
            assert manager.state_dict_readable
    return seen, manager


def expected(fragments, sync_every, delay, steps, failed_cycles=()):
    return [
        (e.step, e.kind, e.fragment, e.manager_step)
        for e in Schedule(fragments, sync_every, delay).events(steps, failed_cycles=failed_cycles)
    ]


@st.composite
def schedules(draw, max_fragments: int = 4, max_window: int = 6):
    f = draw(st.integers(1, max_fragments))
    w = draw(st.integers(1, max_window))
    tau = draw(st.integers(0, w - 1))
    return f, f * w, tau


@given(
    sched=schedules(),
    extra=st.integers(0, 30),
    failed=st.sets(st.integers(0, 40), max_size=10),
    bucketize=st.booleans(),
)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_schedule_matches_real_diloco(sched, extra, failed, bucketize):
    f, h, tau = sched
    steps = min(h * 3, 40) + extra
    seen, manager = drive(f, h, tau, steps, failed, bucketize)
    assert seen == expected(f, h, tau, steps, failed)
    # every send started a quorum; every sync asked for a commit
    assert manager.quorums == sum(1 for s in seen if s[1] == "send")
    assert manager.cycle == sum(1 for s in seen if s[1] == "sync")


@pytest.mark.parametrize(
    "f,h,tau,steps,failed",
    [
        (1, 4, 0, 12, ()),  # plain DiLoCo: send and sync in the same step
        (2, 20, 5, 60, ()),  # the streaming preset
        (2, 20, 5, 60, {1}),  # fragment 1's commit fails once: it is retried next cycle
        (3, 12, 2, 40, {0, 4}),
        (3, 6, 0, 18, {0, 1, 2}),
        (4, 4, 0, 9, ()),  # w = 1: a sync every step
    ],
)
def test_schedule_matches_real_diloco_examples(f, h, tau, steps, failed):
    seen, _ = drive(f, h, tau, steps, failed)
    assert seen == expected(f, h, tau, steps, failed)


def test_failed_commit_repeats_fragment():
    ev = Schedule(2, 8, 1).events(16, failed_cycles={0})
    syncs = [(e.step, e.fragment, e.manager_step) for e in ev if e.kind == "sync"]
    assert syncs == [(4, 0, 0), (8, 0, 0), (12, 1, 1), (16, 0, 2)]


@given(
    f=st.integers(1, 8),
    h=st.integers(1, 24),
    tau=st.integers(0, 24),
    alpha=st.sampled_from([0.0, 0.5, 1.0, -0.1, 1.1]),
)
@settings(max_examples=200, deadline=None)
def test_validate_agrees_with_diloco_constructor(f, h, tau, alpha):
    """``validate`` rejects exactly what ``DiLoCo.__init__`` rejects."""
    try:
        validate(f, h, tau, alpha)
        ours = None
    except ScheduleError as e:
        ours = e
    frags = [nn.Linear(1, 1) for _ in range(f)]
    inner = torch.optim.SGD([p for m in frags for p in m.parameters()], lr=0.1)
    outer = [torch.optim.SGD(m.parameters(), lr=0.1) for m in frags]
    try:
        DiLoCo(
            FakeManager(),
            frags,
            inner,
            outer,
            sync_every=h,
            fragment_sync_delay=tau,
            fragment_update_alpha=alpha,
            pin_memory=False,
        )
        theirs = None
    except ValueError as e:
        theirs = e
    assert (ours is None) == (theirs is None), (ours, theirs)


@given(sched=schedules(max_fragments=5, max_window=8), steps=st.integers(0, 120))
@settings(max_examples=200, deadline=None)
def test_schedule_invariants(sched, steps):
    f, h, tau = sched
    s = Schedule(f, h, tau)
    ev = s.events(steps)
    w = h // f
    sends = [e for e in ev if e.kind == "send"]
    syncs = [e for e in ev if e.kind == "sync"]
    # a sync every w steps, a send tau steps before each
    assert [e.step for e in syncs] == list(range(w, steps + 1, w))
    for e in sends:
        assert e.step + tau == s.sync_step(e.cycle)
    # all commits succeed: fragments rotate 0..F-1, each synced once per H steps
    assert [e.fragment for e in syncs] == [c % f for c in range(len(syncs))]
    for e in ev:
        assert s.cycle_of(e.step) == e.cycle
    assert len({(e.step, e.kind) for e in ev}) == len(ev)  # one send and one sync per step at most


@given(sched=schedules(), steps=st.integers(1, 200))
def test_auto_window_holds_every_fragment(sched, steps):
    f, h, tau = sched
    s = Schedule(f, h, tau)
    if steps < h:
        with pytest.raises(ScheduleError):
            s.auto_window(steps)
        return
    a, b = s.auto_window(steps)
    assert 1 <= a <= b <= steps and b - a + 1 == h
    inside = [e for e in s.events(steps) if a <= e.step <= b]
    assert {e.fragment for e in inside if e.kind == "sync"} == set(range(f))
    assert {e.fragment for e in inside if e.kind == "send"} == set(range(f))
