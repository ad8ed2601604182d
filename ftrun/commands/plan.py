"""``ftrun plan``: predict streaming vs plain DiLoCo on links, goodput under faults, or check the
model against measured runs (``--check``). Parse -> call ``ftrun.plan`` -> render. Torch-free.

Exit 0 = a plan printed (or a check that passed), 1 = a check outside its tolerance (or with
nothing to compare), 2 = bad input (``BadInput``, in ``ftrun.cli``).
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from ftrun.errors import BadInput
from ftrun.json_out import strict_json
from ftrun.plan.check_result import GoodputCheck, GoodputPlan, PlanCheck, RecoveryCheck
from ftrun.plan.options import CHECK_TAKES, GOODPUT_TAKES, TOLERANCE, PlanRequest


def run(req: PlanRequest) -> int:
    """``ftrun plan``: with ``--check`` a check, with ``--mtbf``/``--recovery-s`` goodput, else a
    plan of links; a flag the chosen one does not take is refused, naming it."""
    if req.check is not None:
        if other := req.given(*CHECK_TAKES):
            raise BadInput(f"--check: predicts each run as it ran, on its own link; drop {', '.join(other)}")
        return check(req.check, req.tolerance, req.json_out)
    if req.tolerance != TOLERANCE:
        raise BadInput(f"--tolerance {req.tolerance}: applies only with --check")
    if req.mtbf is not None or req.recovery_s is not None:  # goodput under a rate of faults (ftrun.plan.goodput)
        if other := req.given(*GOODPUT_TAKES):
            raise BadInput(f"--mtbf/--recovery-s: the goodput model takes no {', '.join(other)}")
        window = (req.sync_every // req.fragments) if req.sync_every and req.fragments else None
        return goodput(req.from_dir, req.mtbf, req.recovery_s, req.replicas, req.step_ms, window, req.json_out)
    return plan(req)


def plan(req: PlanRequest) -> int:
    """``ftrun plan`` of links (``ftrun.plan.request``): the prediction, its ``--png``, printed."""
    from ftrun.plan.request import plan_result
    from ftrun.report.plan_view import draw_utilisation, print_plan

    result = plan_result(req)
    if req.png is not None:
        result = msgspec.structs.replace(result, png=str(draw_utilisation(result, Path(req.png))))
    if req.json_out:
        print(strict_json(msgspec.to_builtins(result)))
    else:
        print_plan(result)
    return 0


def goodput(
    from_dir: str | None,
    mtbf_s: float | None,
    recovery_s: float | None,
    replicas: int | None,
    step_ms: float | None,
    sync_window: int | None,
    json_out: bool,
) -> int:
    """``ftrun plan --mtbf/--recovery-s`` (``ftrun.plan.goodput_run``), printed."""
    from ftrun.plan.goodput_run import plan_goodput

    result = plan_goodput(from_dir, mtbf_s, recovery_s, replicas, step_ms, sync_window)
    _print(result, json_out)
    return 0


def check(dir_: str, tolerance: float, json_out: bool) -> int:
    """``ftrun plan --check DIR`` (``ftrun.plan.check``), printed; 0 when its verdict is pass."""
    from ftrun.plan.check import check as check_dir

    result = check_dir(dir_, tolerance)
    _print(result, json_out)
    return 0 if result.verdict == "pass" else 1


def _print(result: PlanCheck | GoodputPlan, json_out: bool) -> None:
    """A check's or goodput's result: JSON, or its view."""
    if json_out:
        print(strict_json(msgspec.to_builtins(result)))
    elif isinstance(result, (GoodputPlan, GoodputCheck)):
        from ftrun.report.goodput_view import print_goodput

        print_goodput(result)
    elif isinstance(result, RecoveryCheck):
        from ftrun.report.plan_view import print_recovery_check

        print_recovery_check(result)
    else:
        from ftrun.report.plan_view import print_check

        print_check(result)
