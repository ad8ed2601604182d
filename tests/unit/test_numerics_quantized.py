"""The numeric check on quantized rounds (``ftrun.check.numerics``): the fp8 e4m3 budget against a
simulated round of torchft's ``allreduce_quantized`` on CPU, and what a real quantized round (no
contribution or SUM sketch: the path bypasses the hooked allreduce) says. No process.

The simulation follows torchft 0.2's kernels: per row of each 2-D tensor (1-D: one element a
row) scale = 448 / max|row| in fp32, cast to float8_e4m3fn; the reducing rank dequantizes every
replica's rows, sums them in fp32, re-quantizes per row; the result is dequantized and torchft's
Manager divides by the participants.
"""

from __future__ import annotations

import torch

from ftrun.check.numerics import QUANTIZED_NOT_CHECKED, check_numerics
from ftrun.check.numerics_core import Z, quantized_average_tolerance, tolerance_rule
from ftrun.layout import EventRecord, RoundNumerics, Sketch
from ftrun.report.numerics_view import numerics_line

K = 16
FP8_MAX = 448.0


def quantize(x: torch.Tensor) -> torch.Tensor:
    """torchft's per-row fp8 round trip of one 2-D tensor (quantize, dequantize), fp32."""
    rows = x if x.dim() == 2 else x.unsqueeze(1)
    m = rows.abs().amax(dim=1, keepdim=True)
    scale = torch.where(m > 0, FP8_MAX / m, torch.ones_like(m))
    q = (rows * scale).to(torch.float8_e4m3fn)
    return (q.to(torch.float32) / scale).reshape(x.shape)


def quantized_average(contribs: list[list[torch.Tensor]], n: int) -> list[torch.Tensor]:
    out = []
    for parts in zip(*contribs, strict=True):
        total = sum(quantize(p) for p in parts)  # dequantized contributions summed in fp32
        out.append(quantize(total) / n)
    return out


def sketch(tensors: list[torch.Tensor], p: torch.Tensor) -> Sketch:
    flat = torch.cat([t.reshape(-1) for t in tensors]).to(torch.float64)
    return Sketch((p @ flat).tolist(), float(flat.norm()), flat.numel(), "float32")


def logs_of(
    contribs: list[Sketch | None],
    avgs: list[Sketch],
    n: int,
    sums: list[Sketch | None] | None = None,
    path: str = "quantized",
):
    logs = {}
    for r, (c, a) in enumerate(zip(contribs, avgs, strict=True)):
        world = len(contribs) if c is not None and c.numel else None
        head = dict(
            fragment=0,
            manager_step=0,
            quorum_id=1,
            sync_step=10,
            participants=n,
            participating=True,
            world=world,
            path=path,
        )
        send = RoundNumerics(phase="send", contribution=c, **head)
        sync = RoundNumerics(phase="sync", sum=(sums or [None] * len(avgs))[r], average=a, **head)
        base = dict(
            manager_step=0,
            participants=n,
            quorum_id=1,
            loss=0.0,
            step_time_s=0.0,
            restart=0,
            sent=None,
            fingerprint=None,
        )
        logs[(r, 0)] = [
            EventRecord(step=5, manager_step_after=0, synced=None, commit=None, t=5.0, numerics=[send], **base),
            EventRecord(step=10, manager_step_after=1, synced=0, commit=True, t=10.0, numerics=[sync], **base),
        ]
    return logs


def setup(seed: int = 0, replicas: int = 3):
    g = torch.Generator().manual_seed(seed)
    shapes = [(64, 96), (96,), (32, 64)]  # weights (rows scaled apart) and a bias
    contribs = [
        [torch.randn(s, generator=g) * (1 + torch.arange(s[0]).reshape(-1, *[1] * (len(s) - 1)) / 8) for s in shapes]
        for _ in range(replicas)
    ]
    numel = sum(t.numel() for t in contribs[0])
    p = torch.randint(0, 2, (K, numel), generator=g, dtype=torch.float64) * 2 - 1
    return contribs, p


def test_a_simulated_fp8_round_is_within_the_budget_and_the_budget_is_not_vacuous() -> None:
    contribs, p = setup()
    n = len(contribs)
    avg = quantized_average(contribs, n)
    cs = [sketch(c, p) for c in contribs]
    a = sketch(avg, p)
    out = check_numerics(logs_of(cs, [a] * n, n))
    assert out.status == "checked" and out.checked == 1 and not out.problems, out.record()
    le = out.largest_error
    assert le.check.startswith("quantized average")
    # the real fp8 error is a visible share of the budget (not 1e-9 of it) and inside it
    assert 1.0 / (Z * Z) < le.ratio < 1.0, le
    exact = sketch([sum(ts) / n for ts in zip(*contribs, strict=True)], p)
    err = max(abs(x - y) for x, y in zip(a.proj, exact.proj, strict=True))
    assert err > 1e-3 * quantized_average_tolerance(cs, a, n)  # fp8 really rounded (fp32 alone would be ~1e-7)
    assert "2^-4" in tolerance_rule() and "2^-10/448" in tolerance_rule()


def test_gross_errors_are_caught_and_the_budget_is_about_the_average_itself() -> None:
    # Z x two worst-case e4m3 roundings (2^-4 each) is about the size of the average: an
    # undivided SUM or a wrong tensor is caught, a count off by one (25% here) is within the budget
    contribs, p = setup(1, replicas=4)
    n = len(contribs)
    cs = [sketch(c, p) for c in contribs]
    undivided = sketch(quantized_average(contribs, 1), p)
    out = check_numerics(logs_of(cs, [undivided] * n, n))
    assert out.problems and "not the sum of the contributions / 4" in out.problems[0].text
    other = sketch(quantized_average(setup(9, replicas=4)[0], n), p)  # another round's average
    assert check_numerics(logs_of(cs, [other] * n, n)).problems
    off_by_one = sketch(quantized_average(contribs, n + 1), p)
    assert not check_numerics(logs_of(cs, [off_by_one] * n, n)).problems
    right = sketch(quantized_average(contribs, n), p)
    size = right.norm
    assert 0.3 * size < quantized_average_tolerance(cs, right, n) < 3.0 * size


def test_a_real_quantized_round_is_not_checked_and_says_so_once() -> None:
    contribs, p = setup(2)
    n = len(contribs)
    a = sketch(quantized_average(contribs, n), p)
    empty = Sketch([0.0] * K, 0.0, 0, "float32")  # what the worker records: the hooked allreduce never ran
    out = check_numerics(logs_of([empty] * n, [a] * n, n))
    assert out.status == "not checked" and out.why == QUANTIZED_NOT_CHECKED
    line = numerics_line(out.record())
    assert line.count("quantized rounds: not checked") == 1 and " ok" not in line


def test_a_quantize_run_torchft_ran_through_the_plain_allreduce_is_checked_by_the_plain_rule() -> None:
    # torchft without triton runs pg.allreduce: the worker records the plain path (the hooks saw
    # SketchPG.allreduce), the SUM is exact to fp32 and checked by the plain rule
    contribs, p = setup(3)
    n = len(contribs)
    cs = [sketch(c, p) for c in contribs]
    total = [sum(ts) for ts in zip(*contribs, strict=True)]
    s = sketch(total, p)
    a = sketch([t / n for t in total], p)
    logs = logs_of(cs, [a] * n, n, sums=[s] * n, path="per-param")
    out = check_numerics(logs)
    assert out.status == "checked" and not out.problems and out.checked == 1 and out.quantized_checked == 0
    assert not out.largest_error.check.startswith("quantized")
    # the same records as a quantized round's: the fp8 budget on the SUM, the plain one on the divide
    out = check_numerics(logs_of(cs, [a] * n, n, sums=[s] * n))
    assert out.quantized_checked == 1 and not out.problems and out.largest_error.check.startswith("average")
