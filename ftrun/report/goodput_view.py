"""What ``ftrun plan --mtbf`` and ``plan --check`` of a chaos run show: the predicted goodput
retained, what each fault costs, and (a check) the measured figure and the verdict. Renders only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ftrun.console import console, line

if TYPE_CHECKING:  # the records it renders
    from ftrun.plan.check_result import GoodputCheck, GoodputPlan


def goodput_lines(result: GoodputPlan | GoodputCheck) -> list[str]:
    x, p, src = result.inputs, result.prediction, result.sources

    def where(key: str) -> str:
        return f" ({src[key]})" if src.get(key) else ""

    out = [
        f"goodput under faults: {x.replicas} groups, MTBF {x.mtbf_s:g} s{where('mtbf_s')}"
        f", recovery {x.recovery_s:g} s{where('recovery_s')}"
        f", step {x.step_s * 1000:.1f} ms{where('step_s')}"
        f", a commit every {x.sync_window} steps, survivors' stall {x.stall_s:g} s{where('stall_s')}",
        f"each fault costs {p.cost_s:.2f} group-seconds: recovery {p.recovery_s:.2f} + uncommitted work "
        f"{p.uncommitted_s:.2f} + survivors' stall {p.stall_s:.2f}",
        f"predicted goodput retained: {p.retained:.1%} of the fault-free twin's",
    ]
    from ftrun.plan.check_result import GoodputCheck

    if isinstance(result, GoodputCheck):
        err = result.relative_error
        out.append(
            f"measured (ftrun compare): {result.measured_retained:.1%} · error "
            + ("-" if err is None else f"{err:.1%}")
            + f" (tolerance {result.tolerance:.0%})"
        )
        if result.twin_differs:
            out.append(f"the twin differs from the chaos run in: {', '.join(result.twin_differs)}")
    return out


def print_goodput(result: GoodputPlan | GoodputCheck) -> None:
    c = console()
    for text in goodput_lines(result):
        c.print(text)
    from ftrun.plan.check_result import GoodputCheck

    if isinstance(result, GoodputCheck):
        ok = result.verdict == "pass"
        c.print(line(("PASS" if ok else "FAIL", "bold green" if ok else "bold red"), " goodput prediction"))
