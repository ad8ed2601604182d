"""What ``ftrun plan --mtbf`` and ``plan --check`` of a chaos run show: the predicted goodput
retained, what each fault costs, and (a check) the measured figure and the verdict; and
``ftrun compare``'s line of a chaos run beside its twin. Renders only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ftrun.check.noise import NO_DIFFERENCE, Measured, says
from ftrun.console import console, line

if TYPE_CHECKING:  # the records it renders
    from ftrun.chaos_summary import GoodputComparison
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
            f"measured (ftrun compare): {result.measured_retained:.1%}"
            + ("" if result.measured_spread is None else f" ± {result.measured_spread:.1%}")
            + (f" (median of {result.measured_repeats} runs each)" if result.measured_repeats > 1 else "")
            + " · error "
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


def goodput_line(g: GoodputComparison) -> str:
    """A chaos run's goodput beside its fault-free twin's (``ftrun.chaos_summary.GoodputComparison``):
    over repeats, the medians, the share retained with its spread (said by ``ftrun.check.noise``:
    within its spread of 100%, no loss is claimed) and each repeat's own share (one above 100%:
    "≥ 100%", as a share is never printed above 100%)."""

    def rate(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    runs = f", median of {g.repeats} runs each" if g.repeats > 1 else ""
    out = (
        f"goodput (useful committed steps/s{runs}): {g.chaos} {rate(g.chaos_steps_per_s)} vs fault-free twin "
        f"{g.twin} {rate(g.twin_steps_per_s)}"
    )
    if g.retained is None:
        out += ": not measured"
    else:
        out += ": " + retained_clause(Measured(g.retained, g.retained_spread))
        if g.repeats > 1 and g.retained_per_repeat:
            out += "; each repeat: " + ", ".join(f"{x:.1%}" if x <= 1.0 else "≥ 100%" for x in g.retained_per_repeat)
    if g.differs:
        out += f" (not a true twin: differs in {', '.join(g.differs)})"
    return out


def retained_clause(share: Measured) -> str:
    """Goodput retained as ``ftrun.check.noise`` says a share: a loss is claimed only beyond the
    spread from 100% (a single pair, with no spread: as measured), never above 100%."""
    spread = "" if share.spread is None else f" ± {share.spread:.1%}"
    said = says(share, lambda v: f"{v:.1%}", null=1.0, at_most=1.0)
    if said != NO_DIFFERENCE:
        return f"{said}{spread} retained"
    if share.value > 1.0:
        return f"goodput lost: {NO_DIFFERENCE} (the chaos run's goodput was not below its twin's)"
    return f"goodput lost: {NO_DIFFERENCE} ({share.value:.1%}{spread} retained, within its spread)"
