"""The numerics line never says a quantized round's SUM was checked when no SUM was sketched:
a quantized round with every contribution but no SUM (its collective did not complete) has its
average checked against the contributions / n, and says that, not "SUM within the fp8 budget"."""

from __future__ import annotations

from test_numerics_quantized import logs_of, quantized_average, setup, sketch

from ftrun.check.numerics import check_numerics
from ftrun.report.numerics_view import numerics_line


def test_a_quantized_round_without_its_sum_does_not_claim_a_sum_check() -> None:
    contribs, p = setup()
    n = len(contribs)
    cs = [sketch(c, p) for c in contribs]
    a = sketch(quantized_average(contribs, n), p)
    out = check_numerics(logs_of(cs, [a] * n, n))  # no SUM sketched
    assert out.checked == 1 and out.quantized_checked == 1 and not out.problems
    line = numerics_line(out.record())
    assert "SUM within the fp8 e4m3 budget" not in line, line
    assert "1 quantized sync(s) without a SUM sketch" in line, line


def test_a_wrapped_quantized_round_missing_a_contribution_says_so_not_the_old_reason() -> None:
    """This ftrun wraps the quantized allreduce: a round whose other replica's send sketch is missing
    is not checked for that reason, not for "the sketches hook only the allreduce" (an earlier ftrun's)."""
    from ftrun.check.numerics import QUANTIZED_NOT_CHECKED, QUANTIZED_NOT_CHECKED_PREFIX

    contribs, p = setup(replicas=2)
    cs = [sketch(c, p) for c in contribs]
    a = sketch(quantized_average(contribs, 2), p)
    logs = logs_of(cs, [a, a], 2)
    logs[(1, 0)][0].numerics = []  # replica 1's send: not in its log
    out = check_numerics(logs)
    (why,) = [w for w in out.not_checked if w.startswith(QUANTIZED_NOT_CHECKED_PREFIX)]
    assert why != QUANTIZED_NOT_CHECKED and "contribution sketches from replica(s) [0] only" in why, why
    assert out.status == "not checked" and out.why == why
