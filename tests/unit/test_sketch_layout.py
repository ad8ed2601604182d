"""The small tensors' layout in ``ftrun.worker.sketch.Projector.project_many``: tensors that follow
each other take torch's flatten (``_project_run``), others the padded cat; both are the float64
projection P·x of the elements at their offsets. No process."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from ftrun.worker import sketch_projection as sketch  # noqa: E402
from ftrun.worker.sketch import PERIOD, Projector  # noqa: E402


def exact(items: list[tuple[int, torch.Tensor]]) -> torch.Tensor:
    """P·x in float64 from its definition: P[j, i] = W[j, i mod PERIOD], element by element."""
    w = Projector().w(torch.device("cpu"))
    out = torch.zeros(w.shape[0], dtype=torch.float64)
    for offset, t in items:
        cols = (offset + torch.arange(t.numel())) % PERIOD
        out += w[:, cols] @ t.reshape(-1).to(torch.float64)
    return out


@pytest.mark.parametrize("start", [0, 5, PERIOD - 3, 3 * PERIOD + 11])
@pytest.mark.parametrize("shapes", [[(7,)], [(64, 96), (96,), (128, 40)], [(PERIOD,), (2 * PERIOD + 1,)]])
def test_tensors_that_follow_each_other_project_as_their_elements(start, shapes):
    g = torch.Generator().manual_seed(len(shapes) + start)
    items, offset = [], start
    for s in shapes:
        t = torch.randn(s, generator=g)
        items.append((offset, t))
        offset += t.numel()
    proj, sq, rows = Projector().project_many(list(reversed(items)), norm=True)  # any order
    assert rows == 0
    assert torch.allclose(proj, exact(items), rtol=1e-12, atol=1e-9)
    flat = torch.cat([t.reshape(-1) for _, t in items]).to(torch.float64)
    assert float(sq) == pytest.approx(float(flat @ flat), rel=1e-12)


def test_tensors_with_gaps_take_the_padded_layout_and_agree(monkeypatch):
    g = torch.Generator().manual_seed(1)
    items = [(0, torch.randn(50, generator=g)), (300, torch.randn(20, 9, generator=g)), (PERIOD + 7, torch.randn(5))]
    assert not sketch._follow(sorted(items, key=lambda p: p[0]))
    proj, _, _ = Projector().project_many(items, norm=False)
    assert torch.allclose(proj, exact(items), rtol=1e-12, atol=1e-9)
    # the same tensors laid out back to back: the flatten, and the padded cat when torch has no flatten
    follow, offset = [], 0
    for _, t in items:
        follow.append((offset, t))
        offset += t.numel()
    fast, _, _ = Projector().project_many(follow, norm=False)
    monkeypatch.setattr(sketch, "_flatten", None)
    slow, _, _ = Projector().project_many(follow, norm=False)
    assert torch.allclose(fast, slow, rtol=1e-12, atol=1e-9) and torch.allclose(
        fast, exact(follow), rtol=1e-12, atol=1e-9
    )
