"""The numeric check's primitives: unit roundoffs, a sketch's own error budget, arithmetic on
projections (``ftrun.check.numerics``, ``ftrun.check.numerics_outer``). Torch-free."""

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
