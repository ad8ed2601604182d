"""What ``ftrun plan --mtbf`` and ``plan --check`` of a chaos run show: the predicted goodput
retained, what each fault costs, and (a check) the measured figure and the verdict. Renders only."""

from __future__ import annotations

from typing import Any

from ftrun.console import console, line


def goodput_lines(result: dict[str, Any]) -> list[str]:
    x, p = result["inputs"], result["prediction"]
    src = result.get("sources") or {}
    out = [
        f"goodput under faults: {x['replicas']} groups, MTBF {x['mtbf_s']:g} s"
        + (f" ({src['mtbf_s']})" if src.get("mtbf_s") else "")
        + f", recovery {x['recovery_s']:g} s"
        + (f" ({src['recovery_s']})" if src.get("recovery_s") else "")
        + f", step {x['step_s'] * 1000:.1f} ms"
        + (f" ({src['step_s']})" if src.get("step_s") else "")
        + f", a commit every {x['sync_window']} steps, survivors' stall {x['stall_s']:g} s"
        + (f" ({src['stall_s']})" if src.get("stall_s") else ""),
        f"each fault costs {p['cost_s']:.2f} group-seconds: recovery {p['recovery_s']:.2f} + uncommitted work "
        f"{p['uncommitted_s']:.2f} + survivors' stall {p['stall_s']:.2f}",
        f"predicted goodput retained: {p['retained']:.1%} of the fault-free twin's",
    ]
    if "measured_retained" in result:
        err = result["relative_error"]
        out.append(
            f"measured (ftrun compare): {result['measured_retained']:.1%} · error "
            + ("-" if err is None else f"{err:.1%}")
            + f" (tolerance {result['tolerance']:.0%})"
        )
        if result.get("twin_differs"):
            out.append(f"the twin differs from the chaos run in: {', '.join(result['twin_differs'])}")
    return out


def print_goodput(result: dict[str, Any]) -> None:
    c = console()
    for text in goodput_lines(result):
        c.print(text)
    if "verdict" in result:
        ok = result["verdict"] == "pass"
        c.print(line(("PASS" if ok else "FAIL", "bold green" if ok else "bold red"), " goodput prediction"))
