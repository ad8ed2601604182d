"""A chaos run's figures as records (``TrainSummary.chaos``, ``ftrun compare``'s goodput rows,
``ftrun plan --check``): goodput, the faults and the recoveries. Records only; torch-free.
Made by ``ftrun.check.goodput`` (the arithmetic) and ``ftrun.check.chaos_run`` (from a run)."""

from __future__ import annotations

import msgspec


class GroupGoodput(msgspec.Struct, frozen=True):
    """One replica group's inner steps: useful (its next sync committed), lost (that commit
    failed, or its processes died first), tail (after its last sync: not judged)."""

    replica: int
    useful_steps: int
    lost_steps: int
    tail_steps: int


class Goodput(msgspec.Struct, frozen=True):
    """Useful, lost and tail steps of all groups, the training time they took (``train_s``: the
    first step's start to the last commit) and ``steps_per_s`` = useful steps / ``train_s``."""

    useful_steps: int
    lost_steps: int
    tail_steps: int
    train_s: float | None
    steps_per_s: float | None
    groups: list[GroupGoodput]


class RecoveryStats(msgspec.Struct, frozen=True):
    """The recoveries of a run's chaos faults (``ftrun.check.recovery``: fault -> the group's
    first commit): ``count`` back with a commit, ``never_back`` not, ``absorbed``: hangs no
    survivor made a quorum without (torchft waited: nothing to recover); ``median_s``/``p90_s``
    (nearest rank) of their ``total_s``; ``phases_median_s``: each phase's median over them."""

    count: int
    never_back: int
    absorbed: int
    median_s: float | None
    p90_s: float | None
    totals_s: list[float]
    phases_median_s: dict[str, float | None]


class ChaosSummary(msgspec.Struct, kw_only=True):
    """What a ``--chaos`` run did and what it cost. ``kinds``: as given; ``mtbf_s``: the drawn
    faults' combined mean time between faults; ``requested``: faults the supervisor asked for;
    ``fired``: those a group fired (its marker), by kind in ``by_kind``; ``chaos_s``: from the
    chaos clock's start (every group training) to the last commit; ``realized_mtbf_s`` =
    ``chaos_s`` / ``fired`` (faults wait while their target recovers, so it can exceed
    ``mtbf_s``); ``ended``: why no more faults fired, if they stopped; ``missed_steps_per_fault``:
    run steps the hit group was out, per kill or sigterm (``ftrun.check.fired_faults``);
    ``goodput``: of the whole run; ``twin``/``retained``: a fault-free twin's goodput and this
    run's share of it, where one was measured (``ftrun compare``), else None; ``timeline``: the
    whole-run picture ``ftrun train`` wrote (``ftrun.report.chaos_timeline``), relative to the run
    dir, None when it could not be written."""

    kinds: list[str]
    seed: int
    min_alive: int
    mtbf_s: float
    requested: int
    fired: int
    by_kind: dict[str, int]
    chaos_s: float | None
    realized_mtbf_s: float | None
    ended: str | None
    recoveries: RecoveryStats
    missed_steps_per_fault: float | None
    goodput: Goodput
    twin: Goodput | None = None
    retained: float | None = None
    timeline: str | None = None


class GoodputComparison(msgspec.Struct, kw_only=True):
    """``ftrun compare`` of a chaos run with its fault-free twin: each one's goodput (the median
    over repeats of ``steps_per_s``; ``chaos_goodput``/``twin_goodput``: the first repeat's
    record), ``retained`` = chaos / twin, and ``differs``: the settings (besides the chaos
    ones, the run name and the output root) in which the twin is not the chaos run's
    configuration — empty for a true twin.

    Over ``--repeat N`` (``repeats``: runs per side): ``chaos_repeats_steps_per_s`` and
    ``twin_repeats_steps_per_s``, each repeat's goodput in training order (None: no rate);
    ``retained_per_repeat``: repeat i's chaos run over repeat i's twin (trained next to each
    other), for each i where both have a rate; ``retained_spread``: the spread of ``retained``
    (``ftrun.check.noise.ratio_spread`` of the two sides' rates), None below two rates a side."""

    chaos: str
    twin: str
    chaos_steps_per_s: float | None
    twin_steps_per_s: float | None
    retained: float | None
    chaos_goodput: Goodput
    twin_goodput: Goodput
    differs: list[str]
    repeats: int = 1
    chaos_repeats_steps_per_s: list[float | None] = msgspec.field(default_factory=list)
    twin_repeats_steps_per_s: list[float | None] = msgspec.field(default_factory=list)
    retained_per_repeat: list[float] = msgspec.field(default_factory=list)
    retained_spread: float | None = None
