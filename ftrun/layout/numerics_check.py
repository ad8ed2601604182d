"""The numeric check's record (``ftrun.check.numerics`` fills it): in summary.json's ``numerics``,
report.json's ``numerics`` and ``inspect-trace --json``. Torch-free.

``NumericsCheck``: what was checked, what was not and why, every problem with its line, each heal
and each outer stage's tally, and the tolerances used."""

from __future__ import annotations

from typing import ClassVar

import msgspec
from msgspec import UNSET, UnsetType

from ftrun.layout.codec import ReadAsDict


class NumericsProblem(msgspec.Struct):
    """One problem: where (None: not of one round), what was compared, the likely cause, its line."""

    sync_step: int | None
    manager_step: int | None
    fragment: int | None
    replica: int | None
    rank: int | None
    check: str
    expected: float | None
    observed: float | None
    error: float | None
    tolerance: float | None
    cause: str
    text: str


class LargestError(msgspec.Struct):
    """The check closest to its tolerance: which, where, its error, the tolerance, their ratio."""

    check: str
    where: str
    error: float
    tolerance: float
    ratio: float


class StageError(msgspec.Struct):
    """An outer stage's largest error: where, the error, its tolerance, their ratio."""

    where: str
    error: float
    tolerance: float
    ratio: float


class StageTally(msgspec.Struct):
    """One outer stage (``ftrun.check.numerics_outer``): rounds checked, the largest error against
    its tolerance, why the others were not checked (reason -> how many)."""

    checked: int = 0
    largest_error: StageError | None = None
    not_checked: dict[str, int] = msgspec.field(default_factory=dict)


class FirstContribution(msgspec.Struct):
    """A healed replica's first contribution after the heal, against the rule (a non-participant
    contributes zeros; a participant's values are in the SUM)."""

    fragment: int
    manager_step: int
    participating: bool | None
    zero: bool
    follows_rule: bool


class HealCheck(msgspec.Struct):
    """One heal (``ftrun.check.numerics_heal``): its global parameters against the source's last
    commit of each fragment (``params_match``: None when none could be compared), and its first
    contribution (absent: not sketched)."""

    replica: int
    rank: int
    source_replica: int | None
    manager_step: int
    step: int | None
    fragments_checked: int = 0
    fragments_not_checked: list[int] = msgspec.field(default_factory=list)
    params_match: bool | None = None
    first_contribution: FirstContribution | UnsetType = UNSET


class FailedRounds(msgspec.Struct):
    """Rounds whose commit failed everywhere: their SUM checked all the same."""

    rounds: int = 0
    sum_right: int = 0
    sum_wrong: int = 0
    sum_not_sketched: int = 0


class Tolerance(msgspec.Struct):
    """The tolerances the check used: the collective's rule, its Z, the largest error, the outer step's rule."""

    rule: str
    z: float
    largest_error: LargestError | None
    outer: str


class NumericsCheck(ReadAsDict, msgspec.Struct):
    """The numeric check of a run's syncs. ``status``: "checked" or "not checked" (``why``)."""

    _READ_AS: ClassVar[tuple[str, str]] = ("Run.summary.numerics", "summary.numerics")  # (was a dict)

    status: str
    why: str | None
    checked: int  # collective rounds (committed syncs) whose every check ran
    replica_syncs_checked: int
    committed: int  # committed syncs (replica, rank, sync step) in the logs
    not_checked: dict[str, int]  # why -> how many committed replica-syncs
    paths: list[str]
    quantized_checked: int  # of ``checked``: rounds of torchft's quantized allreduce (the fp8 budget)
    quantized_without_sum: int  # of ``quantized_checked``: no SUM sketched, the average checked
    tolerance: Tolerance
    stages: dict[str, StageTally]
    problems: list[NumericsProblem]
    heals: list[HealCheck]
    failed_rounds: FailedRounds

    @property
    def ok(self) -> bool:
        return not self.problems

    def counts(self) -> bool:
        """Whether the check is evidence: it checked a sync or found a problem (else numerics were
        not checked, and nothing may say they passed)."""
        return bool(self.checked or self.problems)
