"""When the worker sketches a fragment's originals (ftrun.worker.sketch_outer.OuterSketcher): where
a chain starts (the first send, after a heal, after a commit the check cannot derive), by a replica
not participating, and every ORIGINALS_EVERY-th commit; derived by the check in between."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from ftrun.worker.fault_injection import Corruption  # noqa: E402
from ftrun.worker.sketch_outer import ORIGINALS_EVERY, OuterSketcher  # noqa: E402
from ftrun.worker.sketch_projection import Projector  # noqa: E402


def setup(optimizer: str = "SGD"):
    module = torch.nn.Linear(4, 3)
    frag = SimpleNamespace(
        original_parameters={i: p.detach().clone() for i, p in enumerate(module.parameters())},
        _model_fragment=module,
        _fragment_update_alpha=0.0,
    )
    params = list(module.parameters())
    opt = (
        torch.optim.SGD(params, lr=0.7, momentum=0.9, nesterov=True)
        if optimizer == "SGD"
        else torch.optim.Adam(params, lr=0.1)
    )
    return OuterSketcher(Projector(), Corruption([], 0, 0, Path("."))), frag, opt


def round_(s: OuterSketcher, frag, opt, ok: bool = True, average: bool = True, participating: bool = True) -> bool:
    """One round of fragment 0 through the hooks in torchft's order; whether its originals were sketched."""
    parts = s.parts(0)
    s.at_send(frag, parts, participating)
    assert parts.local is not None
    s.before_sync(frag, parts, 10)
    if ok:
        for p in frag._model_fragment.parameters():
            p.grad = torch.ones_like(p)
        s.before_step(opt, parts, 10)
        opt.step()
        s.after_step(opt, parts)
    s.after_sync(frag, parts, ok, average)
    return parts.original is not None


def test_the_originals_are_sketched_where_the_chain_starts_and_every_nth_commit():
    s, frag, opt = setup()
    sketched = [round_(s, frag, opt) for _ in range(2 * (ORIGINALS_EVERY + 1) + 1)]
    period = [True] + [False] * ORIGINALS_EVERY
    assert sketched == period * 2 + [True]


def test_a_heal_a_non_participant_and_an_unknown_average_start_a_chain():
    s, frag, opt = setup()
    assert [round_(s, frag, opt) for _ in range(2)] == [True, False]
    s.forget()  # a heal loaded other parameters
    assert [round_(s, frag, opt) for _ in range(2)] == [True, False]
    assert round_(s, frag, opt, participating=False)  # contributes zeros: nothing to derive through
    assert not round_(s, frag, opt, average=False)  # (derived: its average is this round's)
    assert round_(s, frag, opt)  # the last commit's average unknown: the check cannot derive


def test_a_failed_commit_keeps_the_chain():
    s, frag, opt = setup()
    assert [round_(s, frag, opt), round_(s, frag, opt, ok=False), round_(s, frag, opt)] == [True, False, False]


def test_a_non_linear_outer_optimizer_always_sketches_the_originals():
    s, frag, opt = setup("Adam")
    assert [round_(s, frag, opt) for _ in range(3)] == [True, True, True]
