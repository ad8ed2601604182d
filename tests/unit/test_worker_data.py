"""The synthetic source's walk, taken in Python, draws the tokens torch indexing drew."""

from __future__ import annotations

import torch

from ftrun.worker.data import Batches


def reference_next(b: Batches) -> tuple[torch.Tensor, torch.Tensor]:
    """The walk as torch indexing, one position at a time (what ``Batches.next`` computed before)."""
    n, t = b.batch_size, b.seq_len
    seq = torch.empty(n, t + 1, dtype=torch.long)
    seq[:, 0] = torch.randint(0, b.vocab, (n,), generator=b.gen)
    choice = torch.randint(0, 4, (n, t), generator=b.gen)
    for j in range(t):
        seq[:, j + 1] = b.successors[seq[:, j], choice[:, j]]
    return seq[:, :-1], seq[:, 1:]


def test_walk_draws_the_same_tokens_as_torch_indexing() -> None:
    for vocab, seq_len, batch, stream in ((256, 64, 8, 0), (97, 5, 3, 1001), (2, 1, 1, 7)):
        fast = Batches("synthetic", vocab, seq_len, batch, seed=3, stream=stream)
        slow = Batches("synthetic", vocab, seq_len, batch, seed=3, stream=stream)
        for _ in range(3):
            (xi, xt), (ri, rt) = fast.next(), reference_next(slow)
            assert xi.dtype == torch.long and xi.shape == (batch, seq_len)
            assert torch.equal(xi, ri) and torch.equal(xt, rt)


def test_targets_are_the_inputs_shifted_by_one() -> None:
    inputs, targets = Batches("synthetic", 50, 16, 4, seed=1, stream=0).next()
    assert torch.equal(inputs[:, 1:], targets[:, :-1])
    # each next token is one of its predecessor's 4 successors
    table = Batches("synthetic", 50, 16, 4, seed=1, stream=0).successors
    assert all(int(targets[i, j]) in table[int(inputs[i, j])].tolist() for i in range(4) for j in range(16))
