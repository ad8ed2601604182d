"""The sketch's arithmetic (ftrun.worker.sketch.Projector): both float32 stages (the CPU gemv with
the norm fused, torch's column sum) against a float64 reference, within ``sketch_error``."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from ftrun.check.numerics_core import sketch_error  # noqa: E402
from ftrun.layout import SKETCH_PERIOD, SKETCH_STAGE  # noqa: E402
from ftrun.worker import sketch_projection as sk  # noqa: E402


def reference(p: sk.Projector, x: torch.Tensor, offset: int) -> list[float]:
    """P·x in float64 throughout, x placed at ``offset``."""
    flat = x.reshape(-1).to(torch.float64)
    padded = torch.zeros(-(-flat.numel() // SKETCH_PERIOD) * SKETCH_PERIOD, dtype=torch.float64)
    padded[: flat.numel()] = flat
    folded = torch.roll(padded.view(-1, SKETCH_PERIOD).sum(0), offset % SKETCH_PERIOD)
    return (p.w(torch.device("cpu")) @ folded).tolist()


def one(p: sk.Projector, x: torch.Tensor, offset: int = 0, norm: bool = True):
    b = sk.Builder(p, norm=norm)
    b.at(x, offset)
    b.numel = offset + x.numel()
    return b.sketch()


def data(kind: str, n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(n)
    if kind == "mixed signs":
        return torch.randn(n, generator=g)
    return 1 + 1e-3 * torch.rand(n, generator=g)  # same signs: the worst case for a sequential sum


@pytest.mark.parametrize("path", ["gemv", "column sum"])
@pytest.mark.parametrize("kind", ["mixed signs", "same signs"])
@pytest.mark.parametrize("rows, tail", [(1, 17), (2, 0), (5, 3), (33, 77)])  # 1 row: no addition, either path
def test_float32_stage_within_its_budget(monkeypatch, path, kind, rows, tail):
    if path == "column sum":
        monkeypatch.setattr(sk, "_gemv_exact", lambda x: False)
    else:
        assert sk._gemv_exact(torch.zeros(1))  # torch's defaults: the gemv path is the one taken
    p = sk.Projector()
    x = data(kind, rows * SKETCH_STAGE + tail)
    offset = 12345
    s = one(p, x, offset)
    assert s.stage_rows == (rows if x.numel() >= sk.BATCH else 0)  # a small tensor: all float64, no stage
    err = max(abs(a - b) for a, b in zip(s.proj, reference(p, x, offset), strict=True))
    assert err <= sketch_error(s), (err, sketch_error(s))
    exact = float(x.to(torch.float64).norm())
    # the fused dot is close to exact; torch's float32 vector_norm on the CPU is off by up to ~5e-4 here
    assert s.norm is not None and abs(s.norm - exact) <= (1e-6 if path == "gemv" else 1e-3) * exact
    assert one(p, x, offset, norm=False).proj == pytest.approx(s.proj, rel=0, abs=2 * sketch_error(s))


def test_gemv_and_column_sum_agree(monkeypatch):
    p = sk.Projector()
    x = data("mixed signs", 7 * 60_001).view(7, -1)  # 2-D, as a weight: 3 rows and a tail
    fast = one(p, x, 99)
    monkeypatch.setattr(sk, "_gemv_exact", lambda x: False)
    slow = one(p, x, 99)
    assert max(abs(a - b) for a, b in zip(fast.proj, slow.proj, strict=True)) <= sketch_error(fast) + sketch_error(slow)


def test_zeros_sketch_to_exact_zeros():
    """A non-participant's contribution must have norm exactly 0 (the check's rule)."""
    s = one(sk.Projector(), torch.zeros(3 * SKETCH_STAGE + 1))
    assert s.norm == 0.0 and s.proj == [0.0] * len(s.proj)


def test_gemv_only_where_float32_matmul_is_exact():
    assert sk._gemv_exact(torch.zeros(4))
    assert not sk._gemv_exact(torch.zeros(4, dtype=torch.bfloat16))  # its float32 stage is torch's sum
    assert not sk._gemv_exact(torch.zeros(4, dtype=torch.float64))
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("medium")  # TF32/bf16 matmul allowed: it rounds the inputs
        assert not sk._gemv_exact(torch.zeros(4))
    finally:
        torch.set_float32_matmul_precision(before)
    assert sk._gemv_exact(torch.zeros(4))


def test_bfloat16_tensor_sketched_in_float32():
    p = sk.Projector()
    x = data("mixed signs", 2 * SKETCH_STAGE + 9).to(torch.bfloat16)
    s = one(p, x)
    assert s.dtype == "bfloat16" and s.stage_rows == 2
    err = max(abs(a - b) for a, b in zip(s.proj, reference(p, x, 0), strict=True))
    assert err <= sketch_error(s)


def test_one_element_off_by_1e3_relative_is_seen_over_two_rows():
    """The ``noise`` fault's size on a 2-row tensor stands out of the sketch's own budget."""
    p = sk.Projector()
    x = data("mixed signs", 2 * SKETCH_STAGE)
    i = int(x.abs().argmax())
    y = x.clone()
    y[i] = y[i] * (1 + 1e-3)
    a, b = one(p, x), one(p, y)
    moved = min(abs(u - v) for u, v in zip(a.proj, b.proj, strict=True))  # ±1: every projection moves
    assert math.isclose(moved, 1e-3 * abs(float(x[i])), rel_tol=0.05)
    assert moved > 3 * (sketch_error(a) + sketch_error(b))
