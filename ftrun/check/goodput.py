"""Goodput: useful committed steps per second, from a run's step logs. Torch-free.

A replica group's inner step is *useful* when the group's next sync in the same incarnation
commits (its work reached the global model); it is *lost* when that sync's commit fails or the
group's processes die first (a relaunch: the next record has another ``restart``); steps after
the group's last sync are the *tail* (neither: no sync judged them). Records without a step
(a relaunched group not yet realigned) trained nothing that counts.

``train_s``: from the start of the earliest first step of any group (its record's end minus its
``step_time_s``) to the latest commit of any group — start-up and the wait after the last
commit are not training. ``steps_per_s`` = useful steps of all groups / ``train_s``.

Goodput *retained* is a chaos run's ``steps_per_s`` over a fault-free twin's (``retained``;
over ``--repeat`` with its spread, ``retained_of``): the same configuration without
``--chaos``, trained separately (``ftrun compare``) — a run never measures its own twin.
"""

from __future__ import annotations

import math
import statistics

import msgspec

from ftrun.chaos_summary import Goodput, GroupGoodput
from ftrun.check.noise import ratio_spread
from ftrun.layout import EventRecord


def step_fates(records: list[EventRecord]) -> list[str | None]:
    """Each record's fate, in the order written (the module docstring's rule): ``"useful"``,
    ``"lost"`` or ``"tail"`` for a record with a step, None for one without (trained nothing)."""
    fates: list[str | None] = [None] * len(records)
    pending: list[int] = []
    incarnation: int | None = None
    for i, rec in enumerate(records):
        if incarnation is not None and rec.restart != incarnation:
            for j in pending:  # its processes died before those steps' sync
                fates[j] = "lost"
            pending = []
        incarnation = rec.restart
        if rec.step is None:
            continue
        pending.append(i)
        if rec.synced is not None:
            for j in pending:
                fates[j] = "useful" if rec.commit else "lost"
            pending = []
    for j in pending:
        fates[j] = "tail"
    return fates


def group_goodput(replica: int, records: list[EventRecord]) -> GroupGoodput:
    """One group's useful, lost and tail steps from its rank-0 records, in the order written."""
    fates = step_fates(records)
    return GroupGoodput(replica, fates.count("useful"), fates.count("lost"), fates.count("tail"))


def goodput_of(logs: dict[tuple[int, int], list[EventRecord]]) -> Goodput:
    """``logs``: (replica, rank) -> records; each group is read from its rank 0."""
    groups = [group_goodput(r, recs) for (r, g), recs in sorted(logs.items()) if g == 0]
    firsts = (next((x for x in recs if x.step is not None), None) for (_, g), recs in logs.items() if g == 0)
    starts = [rec.t - rec.step_time_s for rec in firsts if rec is not None]
    ends = [rec.t for (_, g), recs in logs.items() if g == 0 for rec in recs if rec.commit]
    useful = sum(x.useful_steps for x in groups)
    train_s = max(ends) - min(starts) if starts and ends and max(ends) > min(starts) else None
    return Goodput(
        useful_steps=useful,
        lost_steps=sum(x.lost_steps for x in groups),
        tail_steps=sum(x.tail_steps for x in groups),
        train_s=None if train_s is None else round(train_s, 3),
        steps_per_s=None if train_s is None else round(useful / train_s, 4),
        groups=groups,
    )


def retained(chaos: Goodput, twin: Goodput) -> float | None:
    """The chaos run's goodput as a share of its fault-free twin's (None: either has no rate)."""
    if not chaos.steps_per_s or not twin.steps_per_s:
        return None
    return chaos.steps_per_s / twin.steps_per_s


class Retained(msgspec.Struct, frozen=True):
    """Goodput retained over repeats (``retained_of``): each side's median rate, their ratio,
    each repeat pair's ratio and the ratio's spread."""

    chaos_rate: float | None
    twin_rate: float | None
    retained: float | None
    per_repeat: list[float]
    spread: float | None


def retained_of(chaos_rates: list[float | None], twin_rates: list[float | None]) -> Retained:
    """Goodput retained from each repeat's rate (useful steps/s; None: not measured): the median
    chaos rate over the median twin rate; repeat i's own ratio where both sides measured one
    (compare trains repeat i of each side one after the other); and the spread
    ``ftrun.check.noise.ratio_spread`` gives the ratio of the measured rates (None below two a
    side). A run without a rate counts in no figure; all rounded to 4 places."""
    cs, ts = [x for x in chaos_rates if x], [x for x in twin_rates if x]
    chaos_rate = statistics.median(cs) if cs else None
    twin_rate = statistics.median(ts) if ts else None
    spread = ratio_spread(cs, ts)
    return Retained(
        chaos_rate=chaos_rate,
        twin_rate=twin_rate,
        retained=round(chaos_rate / twin_rate, 4) if chaos_rate and twin_rate else None,
        per_repeat=[round(x / y, 4) for x, y in zip(chaos_rates, twin_rates, strict=False) if x and y],
        spread=None if spread is None else round(spread, 4),
    )


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank ``q``-quantile (0 < q <= 1) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]
