"""The numeric check's result (``ftrun.check.numerics`` fills it): what was checked, what was
not and why, every problem with its line, the tolerances it used. Torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ftrun.check.numerics_core import Z, tolerance_rule
from ftrun.check.numerics_outer import OUTER_RULE

QUANTIZED_NOT_CHECKED_PREFIX = "quantized rounds: not checked"
# an ftrun before the quantized wrapper: no ``unsketched`` reason recorded
QUANTIZED_NOT_CHECKED = (
    f"{QUANTIZED_NOT_CHECKED_PREFIX} (torchft's quantized allreduce calls the process group's "
    "alltoall + allgather, not the allreduce the sketches hook)"
)


def quantized_not_checked(why: str | None) -> str:
    """The not-checked reason of quantized rounds without contribution sketches."""
    return f"{QUANTIZED_NOT_CHECKED_PREFIX} ({why})" if why else QUANTIZED_NOT_CHECKED


# every problem's keys (``Numerics.problems``): where, what was compared, the likely cause, its line
PROBLEM_KEYS = tuple(
    "sync_step manager_step fragment replica rank check expected observed error tolerance cause text".split()
)


@dataclass
class Numerics:
    """The check's result. ``status``: "checked" or "not checked" (``why``)."""

    status: str = "not checked"
    why: str | None = None
    checked: int = 0  # collective rounds (committed syncs) whose every check ran
    replica_syncs_checked: int = 0
    committed: int = 0  # committed syncs (replica, rank, sync step) in the logs
    not_checked: dict[str, int] = field(default_factory=dict)  # why -> how many committed replica-syncs
    problems: list[dict[str, Any]] = field(default_factory=list)
    largest_error: dict[str, Any] | None = None  # the check closest to its tolerance
    heals: list[dict[str, Any]] = field(default_factory=list)
    stages: dict[str, Any] = field(default_factory=dict)  # the outer step's (``numerics_outer.OuterChecker``)
    paths: list[str] = field(default_factory=list)
    quantized_checked: int = 0  # of ``checked``: rounds of torchft's quantized allreduce (the fp8 budget)
    quantized_without_sum: int = 0  # of ``quantized_checked``: no SUM sketched, the average checked (``_quantized``)
    # rounds whose commit failed everywhere: their SUM checked all the same (``_Checker.failed_round``)
    failed_rounds: dict[str, int] = field(
        default_factory=lambda: {"rounds": 0, "sum_right": 0, "sum_wrong": 0, "sum_not_sketched": 0}
    )

    @property
    def ok(self) -> bool:
        return not self.problems

    def texts(self) -> list[str]:
        return [p["text"] for p in self.problems]

    def evidence(self, lines: list[str]) -> None:
        """Problems with the evidence itself (``ftrun.check.log_evidence``): each a problem, so
        a damaged or missing record fails the check instead of making a count smaller."""
        for text in lines:
            self.problems.append(
                {**dict.fromkeys(PROBLEM_KEYS), "check": "event log", "cause": "evidence", "text": text}
            )
        if lines:
            self.status = "checked"  # (a check that found problems; ``why`` keeps what it could not check)

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "why": self.why,
            "checked": self.checked,
            "replica_syncs_checked": self.replica_syncs_checked,
            "committed": self.committed,
            "not_checked": self.not_checked,
            "paths": self.paths,
            "quantized_checked": self.quantized_checked,
            "quantized_without_sum": self.quantized_without_sum,
            "tolerance": {"rule": tolerance_rule(), "z": Z, "largest_error": self.largest_error, "outer": OUTER_RULE},
            "stages": self.stages,
            "problems": self.problems,
            "heals": self.heals,
            "failed_rounds": self.failed_rounds,
        }
