"""The numeric check's primitives: unit roundoffs, a sketch's own error budget, arithmetic on
projections (``ftrun.check.numerics``, ``ftrun.check.numerics_outer``). Torch-free.

Tolerance (``tolerance_rule``): per check, Z = 8 times a rounding budget. u_d = the unit
roundoff of the tensors' dtype; n = participants; W = replicas in the collective; c_q the
contributions; ||·|| the recorded L2 norms.

* SUM: Z·u_d·(W−1)·Σ||c_q|| (each element of a W-term sum is rounded W−1 times by at most
  u_d·Σ|c_q,i|; with ±1 projections the errors add like a random walk, bounded by the norms);
* average: Z·u_d·||SUM||/n (the divide rounds each element once);
* every sketch's own error: Z·u32·sqrt(rows·(rows−1))·||x|| when its float32 first stage ran
  (``Sketch.stage_rows``: the most values it summed per column; runs of adjacent tensors below
  SKETCH_STAGE elements go to float64 directly) + Z·u64·sqrt(numel)·||x||. The float32 stage's
  term holds for any summation order (a CPU gemv adds the rows one after another) and any signs:
  a column's m = rows values summed in float32 carry m−1 roundings, each δ·s with |δ| <= u32 and
  s a partial sum, |s| <= Σ|x_col| <= sqrt(m)·||x_col||; rounding errors modelled as independent
  and zero-mean (Higham & Mary's probabilistic analysis), the column's error has standard
  deviation <= u32·sqrt((m−1)·m)·||x_col||, and the ±1 projection of all columns' errors
  <= u32·sqrt(m(m−1))·||x||;
* quantized allreduce (``--quantize``; torchft 0.2's ``collectives.allreduce_quantized``, taken
  only when triton imports, i.e. CUDA — without it torchft silently runs the plain allreduce).
  What it quantizes: every row of each 2-D tensor (a 1-D tensor becomes n rows of one element)
  is scaled by its own fp32 scale FP8_MAX / max|row| and cast to fp8 e4m3 (``float8e4nv``,
  FP8_MAX = 448) on compute capability >= 9.0, to int8 (max 127) before; an alltoall gives each
  rank one block of rows from every replica, which it dequantizes, sums in fp32 (torchft passes
  SUM: the Manager divides by the participants afterwards), and re-quantizes per row; an
  allgather returns the blocks, dequantized into the tensor. So each element is rounded twice
  in e4m3 — each contribution, then the reduced sum — each time by at most u8·|x_i| + a8·m_row
  (u8 = 2^-4: 3 mantissa bits, round to nearest; a8 = 2^-10/448: half the subnormal spacing,
  relative to the row's max m_row = the value mapped to 448). With ±1 projections independent
  of the errors, P·e has standard deviation ||e||₂, and ||e||₂ <= (u8 + a8·sqrt(numel))·||x||
  (m_row <= ||row||). The average's budget when no SUM was sketched (``quantized_average_tolerance``):
  Z·(u8 + a8·sqrt(N))·(Σ||c_q|| + ||SUM||)/n + Z·u_d·||SUM||/n (the divide) + the sketches'
  own errors, with ||SUM|| <= (1 + u8 + a8·sqrt(N))²·Σ||c_q|| (two roundings; not recorded);
  N = the fragment's elements, n = participants. That budget is about the size of the average
  itself (Z x 2 x 2^-4 = 1 of the contributions' norms, over n): on a quantized round the check
  can catch gross errors (an undivided SUM, another tensor) but not a count off by one. The
  int8 fallback (before sm90) is not budgeted.
  What a quantized round is checked against (``path`` "quantized"): ftrun wraps torchft's
  ``allreduce_quantized`` (``ftrun.worker.sketch_quantized``), sketching the tensor handed to it
  (the contribution) and its dequantized result before the Manager's divide (the SUM). So: SUM vs
  Σ contributions within ``quantized_sum_tolerance`` = Z·(u8 + a8·sqrt(N))·(Σ||c_q|| + ||SUM||)
  + the fp32 sum's Z·u32·(W−1)·Σ||c_q|| + the sketches' own errors (the fp8 budget, about the size
  of the SUM: it catches gross errors only); average = SUM / participants within the plain
  divide's budget (exact to the dtype: a wrong count or a late change is caught as on any
  round); the same average on every participant. A quantized round with contributions but no
  SUM: the average against Σ contributions / n within ``quantized_average_tolerance``. A
  quantized round with no contribution sketched is not checked: "quantized rounds: not checked
  (why)", once, with the count — the why the rank recorded (``RoundNumerics.unsketched``: a
  torchft whose function or signature ftrun does not know), else, where the wrapper sketched some
  replicas' contributions only, which ones, else that of an ftrun before the wrapper (it hooked
  only the process group's allreduce, which the quantized path never calls).
  A ``--quantize`` round torchft ran through the plain allreduce (its fallback without triton)
  carries the plain ``path`` and is checked by the plain rules.
"""

from __future__ import annotations

import math

from ftrun.layout import SKETCH_STAGE, Sketch

Z = 8.0
UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "bfloat16": 2.0**-8, "float16": 2.0**-11}
U32, U64 = UNIT_ROUNDOFF["float32"], UNIT_ROUNDOFF["float64"]


def roundoff(dtype: str) -> float:
    return UNIT_ROUNDOFF.get(dtype, U32)


def sketch_error(s: Sketch, norm: float | None = None) -> float:
    """Budget for the sketch's own rounding (its float32 first stage and float64 rest); ``norm``
    stands in for a sketch recorded without its norm."""
    size = s.norm if s.norm is not None else (norm or 0.0)
    # the float32 stage's rows as recorded (a sketch from before the field: bounded by the
    # fragment's size; below SKETCH_STAGE elements no float32 stage runs)
    rows = (
        s.stage_rows
        if s.stage_rows is not None
        else (math.ceil(s.numel / SKETCH_STAGE) if s.numel > SKETCH_STAGE else 0)
    )
    # rows values per column summed in float32, any order and signs (module docstring); one row: no addition
    stage = math.sqrt(rows * (rows - 1))
    return Z * (U32 * stage + U64 * math.sqrt(max(s.numel, 1))) * size


def diff(a: list[float], b: list[float]) -> tuple[float, int]:
    """Largest |a_j - b_j| and its j."""
    d = [abs(x - y) for x, y in zip(a, b, strict=True)]  # two sketches: SKETCH_K projections each
    j = max(range(len(d)), key=d.__getitem__) if d else 0
    return (d[j] if d else 0.0), j


def near(a: list[float], b: list[float], tol: float) -> bool:
    return len(a) == len(b) and diff(a, b)[0] <= tol


def scale(a: list[float], k: float) -> list[float]:
    return [x * k for x in a]


def add(a: list[float], b: list[float], k: float = 1.0) -> list[float]:
    return [x + k * y for x, y in zip(a, b, strict=True)]


FP8_E4M3_ROUNDOFF = 2.0**-4  # e4m3: 3 mantissa bits, round to nearest (module docstring)
FP8_E4M3_SUBNORMAL = 2.0**-10 / 448.0  # half of e4m3's subnormal spacing 2^-9, relative to a row's max (scaled to 448)

# a budget that overflowed (norms near the double's limit) would hold any error: never a pass
NO_FINITE_BUDGET = (
    "norms too large for a finite tolerance (no error can be bounded: a diverged run or a damaged record)"
)


def tolerance_rule() -> str:
    return (
        f"Z={Z:g} x rounding: SUM Z*u*(W-1)*sum||c||, average Z*u*||SUM||/n, plus each sketch's own "
        f"Z*u32*sqrt(rows*(rows-1))*||x|| when its float32 stage ran (rows: values per column, {SKETCH_STAGE} columns) "
        f"and Z*u64*sqrt(numel)*||x|| (u = the dtype's unit roundoff: float32 2^-24, bfloat16 2^-8; "
        f"W replicas in the collective, n participants; quantized rounds (fp8 e4m3, torchft's "
        f"allreduce_quantized sketched at its boundary): SUM Z*(2^-4 + 2^-10/448*sqrt(N))*(sum||c||+||SUM||) "
        f"+ Z*u32*(W-1)*sum||c||, average = SUM/n as above, without a SUM sketch the average "
        f"Z*(2^-4 + 2^-10/448*sqrt(N))*(sum||c||+||SUM||)/n, N elements)"
    )


def sum_tolerance(contributions: list[Sketch], observed: Sketch, world: int, path: str = "per-param") -> float:
    """The SUM's norm, when not recorded, is bounded by Σ||c|| (triangle inequality). ``path``
    "quantized": torchft's fp8 allreduce (``quantized_sum_tolerance``)."""
    if path == "quantized":
        return quantized_sum_tolerance(contributions, observed, world)
    total = sum(c.norm or 0.0 for c in contributions)
    data = Z * roundoff(observed.dtype) * max(world - 1, 0) * total
    return data + sketch_error(observed, total) + sum(sketch_error(c) for c in contributions)


def quantized_unit(numel: int) -> float:
    """One e4m3 per-row quantization's error, relative to the L2 norm of what it quantizes."""
    return FP8_E4M3_ROUNDOFF + FP8_E4M3_SUBNORMAL * math.sqrt(max(numel, 1))


def quantized_sum_tolerance(contributions: list[Sketch], observed: Sketch, world: int) -> float:
    """The SUM of a quantized round (torchft's ``allreduce_quantized``, dequantized, before the
    divide) against Σ contributions: two e4m3 roundings per element (each contribution, the
    reduced sum) and the fp32 sum between them (module docstring)."""
    total = sum(c.norm or 0.0 for c in contributions)
    q = quantized_unit(observed.numel)
    reduced = (1.0 + q) * total  # bounds the fp32 sum of the dequantized contributions
    sum_norm = (1.0 + q) * reduced  # and, one more e4m3 rounding on, the SUM's (not recorded)
    data = Z * q * (total + reduced) + Z * U32 * max(world - 1, 0) * total
    return data + sketch_error(observed, sum_norm) + sum(sketch_error(c) for c in contributions)


def quantized_average_tolerance(contributions: list[Sketch], average: Sketch, n: int) -> float:
    """The average of a quantized round against Σ contributions / n (module docstring): two e4m3
    roundings per element (each contribution, the reduced sum), then torchft's divide."""
    total = sum(c.norm or 0.0 for c in contributions)
    q = quantized_unit(average.numel)
    reduced = (1.0 + q) * total  # bounds the fp32 sum of the dequantized contributions
    sum_norm = (1.0 + q) * reduced  # and, one more e4m3 rounding on, the SUM's (not recorded)
    data = Z * (q * (total + reduced) + roundoff(average.dtype) * sum_norm) / n
    return data + sketch_error(average, sum_norm / n) + sum(sketch_error(c) for c in contributions) / n


def average_tolerance(total: Sketch, average: Sketch, n: int, bound: float | None = None) -> float:
    """``total``: the SUM; its norm (or ``bound`` = Σ||c|| when not recorded) also bounds the average's."""
    size = total.norm if total.norm is not None else (bound or 0.0)
    return Z * roundoff(average.dtype) * size / n + sketch_error(average, size / n) + sketch_error(total, size) / n
