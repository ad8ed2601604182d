"""The likely cause of a wrong SUM or average, named from the sketches (a contribution missing,
a stale buffer, a wrong divisor). Torch-free."""

from __future__ import annotations

import math

from ftrun.check.numerics_core import NO_FINITE_BUDGET, add as _add, diff as _diff, near as _near, scale as _scale
from ftrun.check.numerics_rounds import ReplicaRound
from ftrun.layout import Sketch


def sum_cause(
    s: Sketch,
    total: list[float],
    sends: list[ReplicaRound],
    prev: ReplicaRound | None,
    tol: float,
    bound: float,
) -> str:
    """The likely cause when a SUM is not the sum of the contributions."""
    if not math.isfinite(tol):
        return NO_FINITE_BUDGET
    for q in sends:
        if (
            q.sent.participating
            and q.contribution.norm != 0.0
            and _near(s.proj, _add(total, q.contribution.proj, -1.0), tol)
        ):
            return f"a contribution missing (replica {q.replica}'s is not in the SUM)"
    if prev is not None and prev.synced.sum is not None and _near(s.proj, prev.synced.sum.proj, 2 * tol):
        return (
            "a stale buffer (the SUM equals this replica's previous round of the fragment, "
            f"manager step {prev.head.manager_step})"
        )
    rel = _diff(s.proj, total)[0] / max(s.norm if s.norm is not None else bound, 1e-300)
    return f"values changed in the collective (the SUM is off by {rel:.3g} of its norm)"


def average_cause(s: Sketch, a: Sketch, n: int, world: int, prev: ReplicaRound | None, tol: float) -> str:
    """The likely cause when an average is not SUM / participants (a wrong divisor, none, a stale buffer)."""
    if not math.isfinite(tol):
        return NO_FINITE_BUDGET
    if n > 1 and _near(a.proj, s.proj, n * tol):
        return "not divided at all: the average is the SUM (torchft's divide-by-participants callback did not run)"
    if _near(a.proj, _scale(s.proj, 1.0 / (n + 1)), tol):
        return (
            f"divided by participants + 1 = {n + 1} instead of {n} participants "
            "(the world size instead of the participants?)"
        )
    if world != n and world > 0 and _near(a.proj, _scale(s.proj, 1.0 / world), tol):
        return f"divided by the world size {world} instead of {n} participants"
    if prev is not None and prev.synced.average is not None and _near(a.proj, prev.synced.average.proj, 2 * tol):
        return (
            f"a stale buffer (the average equals this replica's previous round, manager step {prev.head.manager_step})"
        )
    return "values changed after the collective (between torchft's divide and the outer step)"
