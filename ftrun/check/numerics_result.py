"""The numeric check's result (``ftrun.check.numerics`` fills it): what was checked, what was
not and why, every problem with its line, the tolerances it used. Torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field

from ftrun.check.numerics_core import Z, tolerance_rule
from ftrun.check.numerics_outer import OUTER_RULE
from ftrun.layout import FailedRounds, HealCheck, LargestError, NumericsCheck, NumericsProblem, StageTally, Tolerance

QUANTIZED_NOT_CHECKED_PREFIX = "quantized rounds: not checked"
# an ftrun before the quantized wrapper: no ``unsketched`` reason recorded
QUANTIZED_NOT_CHECKED = (
    f"{QUANTIZED_NOT_CHECKED_PREFIX} (torchft's quantized allreduce calls the process group's "
    "alltoall + allgather, not the allreduce the sketches hook)"
)


def quantized_not_checked(why: str | None) -> str:
    """The not-checked reason of quantized rounds without contribution sketches."""
    return f"{QUANTIZED_NOT_CHECKED_PREFIX} ({why})" if why else QUANTIZED_NOT_CHECKED


@dataclass
class Numerics:
    """The check's result as it is filled; ``record()`` is what the reports hold
    (``layout.NumericsCheck``). ``status``: "checked" or "not checked" (``why``)."""

    status: str = "not checked"
    why: str | None = None
    checked: int = 0  # collective rounds (committed syncs) whose every check ran
    replica_syncs_checked: int = 0
    committed: int = 0  # committed syncs (replica, rank, sync step) in the logs
    not_checked: dict[str, int] = field(default_factory=dict)  # why -> how many committed replica-syncs
    problems: list[NumericsProblem] = field(default_factory=list)
    largest_error: LargestError | None = None  # the check closest to its tolerance
    heals: list[HealCheck] = field(default_factory=list)
    stages: dict[str, StageTally] = field(default_factory=dict)  # the outer step's (``numerics_outer.OuterChecker``)
    paths: list[str] = field(default_factory=list)
    quantized_checked: int = 0  # of ``checked``: rounds of torchft's quantized allreduce (the fp8 budget)
    quantized_without_sum: int = 0  # of ``quantized_checked``: no SUM sketched, the average checked (``_quantized``)
    # rounds whose commit failed everywhere: their SUM checked all the same (``_Checker.failed_round``)
    failed_rounds: FailedRounds = field(default_factory=FailedRounds)

    @property
    def ok(self) -> bool:
        return not self.problems

    def texts(self) -> list[str]:
        return [p.text for p in self.problems]

    def evidence(self, lines: list[str]) -> None:
        """Problems with the evidence itself (``ftrun.check.log_evidence``): each a problem, so
        a damaged or missing record fails the check instead of making a count smaller."""
        for text in lines:
            self.problems.append(unplaced_problem("event log", "evidence", text))
        if lines:
            self.status = "checked"  # (a check that found problems; ``why`` keeps what it could not check)

    def record(self) -> NumericsCheck:
        return NumericsCheck(
            status=self.status,
            why=self.why,
            checked=self.checked,
            replica_syncs_checked=self.replica_syncs_checked,
            committed=self.committed,
            not_checked=self.not_checked,
            paths=self.paths,
            quantized_checked=self.quantized_checked,
            quantized_without_sum=self.quantized_without_sum,
            tolerance=Tolerance(tolerance_rule(), Z, self.largest_error, OUTER_RULE),
            stages=self.stages,
            problems=self.problems,
            heals=self.heals,
            failed_rounds=self.failed_rounds,
        )


def unplaced_problem(check: str, cause: str, text: str) -> NumericsProblem:
    """A problem of no one round (the evidence, a sketch missing everywhere): its place and figures null."""
    return NumericsProblem(None, None, None, None, None, check, None, None, None, None, cause, text)
