"""The searches over the what-if model (``ftrun.plan.model``): the smallest tau and F that reach
a compute utilisation, and the lowest bandwidth at which a schedule (or data-parallel training)
reaches it or hides all its data. Pure, torch-free; each search relies on the predicate being
monotone (docstrings say why)."""

from __future__ import annotations

import math
from collections.abc import Callable

from ftrun.plan.model import Workload, simulate, simulate_data_parallel
from ftrun.schedule import Schedule


def smallest_fragment_sync_delay(
    work: Workload,
    fragments: int,
    sync_every: int,
    bandwidth_bps: float,
    latency_s: float,
    target: float,
    steps: int | None = None,
) -> int | None:
    """The smallest tau (< H/F) whose utilisation reaches ``target`` with F = ``fragments``; None if none does.

    Utilisation never falls as tau grows (the send moves earlier, the sync stays), so: bisection.
    """

    def ok(tau: int) -> bool:
        return (
            simulate(work, Schedule(fragments, sync_every, tau), bandwidth_bps, latency_s, steps).utilisation >= target
        )

    lo, hi = 0, sync_every // fragments - 1
    if not ok(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid + 1, hi)
    return lo


def smallest_fragments(
    work: Workload, sync_every: int, bandwidth_bps: float, latency_s: float, target: float, steps: int | None = None
) -> tuple[int, int] | None:
    """The smallest F (a divisor of H) for which some tau reaches ``target``, with that tau."""
    for f in (f for f in range(1, sync_every + 1) if sync_every % f == 0):
        tau = smallest_fragment_sync_delay(work, f, sync_every, bandwidth_bps, latency_s, target, steps)
        if tau is not None:
            return f, tau
    return None


def lowest_bandwidth(ok: Callable[[float], bool], lo_bps: float, hi_bps: float) -> float | None:
    """The lowest bandwidth in [lo, hi] (to 1%) where the monotone predicate ``ok`` holds."""
    if ok(lo_bps):
        return lo_bps
    if not ok(hi_bps):
        return None
    lo, hi = math.log(lo_bps), math.log(hi_bps)
    while hi - lo > math.log(1.01):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if ok(math.exp(mid)) else (mid, hi)
    return math.exp(hi)


def hiding_bandwidth(
    work: Workload,
    schedule: Schedule,
    latency_s: float,
    target: float,
    lo_bps: float,
    hi_bps: float,
    steps: int | None = None,
) -> float | None:
    """The lowest bandwidth in [lo, hi] at which utilisation reaches ``target`` (to 1%).

    Utilisation never falls as bandwidth grows, so below the returned bandwidth the schedule
    stops hiding its communication. ``lo_bps`` when it already reaches the target there; None
    when not even ``hi_bps`` does.
    """
    return lowest_bandwidth(
        lambda bw: simulate(work, schedule, bw, latency_s, steps).utilisation >= target, lo_bps, hi_bps
    )


def data_hidden_bandwidth(
    work: Workload, schedule: Schedule, latency_s: float, lo_bps: float, hi_bps: float, steps: int | None = None
) -> float | None:
    """The lowest bandwidth in [lo, hi] (to 1%) at which no sync waits for its data: every
    allreduce done within tau steps (a sync's own ``sync_work_s`` is no wait). None when none is
    (always for tau = 0 with R > 1)."""

    def hidden(bw: float) -> bool:
        p = simulate(work, schedule, bw, latency_s, steps)
        own = p.syncs * work.sync_work_s if work.replicas > 1 else 0.0
        return p.exposed_data_s - own <= 1e-12

    return lowest_bandwidth(hidden, lo_bps, hi_bps)


def data_parallel_hiding_bandwidth(
    work: Workload, grad_bytes: int, latency_s: float, target: float, lo_bps: float, hi_bps: float
) -> float | None:
    """The lowest bandwidth in [lo, hi] (to 1%) at which data-parallel utilisation reaches ``target``."""
    return lowest_bandwidth(
        lambda bw: simulate_data_parallel(work, grad_bytes, bw, latency_s).utilisation >= target, lo_bps, hi_bps
    )


def data_parallel_hidden_bandwidth(
    work: Workload, grad_bytes: int, latency_s: float, lo_bps: float, hi_bps: float
) -> float | None:
    """The lowest bandwidth in [lo, hi] (to 1%) at which every gradient allreduce ends within its backward pass."""
    return lowest_bandwidth(
        lambda bw: simulate_data_parallel(work, grad_bytes, bw, latency_s).exposed_s == 0.0, lo_bps, hi_bps
    )
