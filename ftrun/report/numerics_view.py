"""The numeric check (``ftrun.check.numerics``) as text: one line, shared by every report."""

from __future__ import annotations

from ftrun.check.numerics_outer import stages_text
from ftrun.layout import FirstContribution, NumericsBrief, NumericsCheck


def numerics_line(num: NumericsCheck) -> str:
    """The numeric check in one line (``layout.NumericsCheck``), for every report."""
    if num.status != "checked":
        return f"numerics not checked: {num.why}{failed_rounds(num)}"
    if num.problems:
        return f"numerics: {len(num.problems)} problem(s); first: {num.problems[0].text}"
    le = num.tolerance.largest_error
    worst = f"; largest error {le.error:.3g} = {le.ratio:.2g} of its tolerance ({le.check})" if le else ""
    rest = num.not_checked
    skipped = f"; {sum(rest.values())} not checked ({', '.join(rest)})" if rest else ""
    healed = "".join(
        f"; heal of replica {h.replica} from {h.source_replica} at manager step {h.manager_step}: params "
        + ("match" if h.params_match else "not checked" if h.params_match is None else "DIFFER")
        + _first(h.first_contribution if isinstance(h.first_contribution, FirstContribution) else None)
        for h in num.heals
    )
    q = num.quantized_checked
    q_avg = num.quantized_without_sum  # of q: no SUM sketched, the average against the contributions
    quantized = f"; {q - q_avg} quantized sync(s) checked (SUM within the fp8 e4m3 budget)" if q - q_avg else ""
    if q_avg:
        quantized += f"; {q_avg} quantized sync(s) without a SUM sketch (average = contributions / n, fp8 budget)"
    return (
        f"numerics: average = SUM/participants and SUM = sum of contributions held for {num.checked} sync(s) "
        f"({num.replica_syncs_checked} replica-syncs){quantized}{stages_text(num.stages)}{healed}{skipped}"
        f"{worst}{failed_rounds(num)}"
    )


def failed_rounds(num: NumericsCheck) -> str:
    """What the sketches say about rounds whose commit failed everywhere (their SUM)."""
    fr = num.failed_rounds
    if not fr.rounds:
        return ""
    return (
        f"; {fr.rounds} failed round(s): SUM = sum of contributions on {fr.sum_right}, "
        f"wrong on {fr.sum_wrong}, not sketched on {fr.sum_not_sketched}"
    )


def _first(fc: FirstContribution | None) -> str:
    if fc is None:
        return ""
    what = "participating, in the SUM" if fc.participating else "not participating, zeros"
    return f", first contribution {what} ({'ok' if fc.follows_rule else 'WRONG'})"


def numerics_cell(brief: NumericsBrief | None) -> str:
    """A table cell (compare, sweep) for ``ftrun.check.metrics.numerics_brief``."""
    if not brief:
        return "-"
    if brief.problems:
        return f"FAIL ({brief.problems} problem(s))"
    if brief.status != "checked":
        return f"not checked ({brief.why})"
    return f"ok ({brief.checked} syncs)"
