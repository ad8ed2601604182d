"""Factories for ``ftrun train --model tests.user_model_fixtures:NAME`` (the documented contract:
``FACTORY(vocab_size=V, seq_len=T, **model_args)`` -> nn.Module mapping [B, T] ids to [B, T, V] logits)."""

from __future__ import annotations

import torch
from torch import nn


class Stack(nn.Module):
    """emb -> ``depth`` Linear layers (``layers``, an nn.ModuleList) -> out."""

    def __init__(self, vocab_size: int, width: int, depth: int, growing: bool) -> None:
        super().__init__()
        w = [width + (8 * i if growing else 0) for i in range(depth + 1)]
        self.emb = nn.Embedding(vocab_size, w[0])
        self.layers = nn.ModuleList(nn.Linear(w[i], w[i + 1]) for i in range(depth))
        self.out = nn.Linear(w[-1], vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.emb(tokens)
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.out(x)


def stack(vocab_size: int, seq_len: int, width: int = 16, depth: int = 4, growing: bool = True) -> nn.Module:
    return Stack(vocab_size, width, depth, growing)


def not_a_module(vocab_size: int, seq_len: int):
    return "a string"


def wrong_output(vocab_size: int, seq_len: int) -> nn.Module:
    return nn.Embedding(vocab_size, 8)  # [B, T, 8], not logits over the vocabulary
