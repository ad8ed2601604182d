"""Small models split into contiguous fragments of whole blocks, as torchtitan splits an LLM.

Both models are token models: embedding -> N blocks -> head, predicting the next token.
Block i's feed-forward width is ``2*width + 16*i``, so every block — and therefore every
fragment — has a distinct parameter-size signature. That is what lets ``inspect-trace``
tell fragments apart from the allreduce sizes alone, without trusting the schedule.
"""

from __future__ import annotations

import torch
from torch import nn


def ffn_width(width: int, i: int) -> int:
    return 2 * width + 16 * i


class MLPBlock(nn.Module):
    def __init__(self, width: int, i: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, ffn_width(width, i))
        self.down = nn.Linear(ffn_width(width, i), width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(self.norm(x))))


class DecoderBlock(nn.Module):
    def __init__(self, width: int, i: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.mlp = MLPBlock(width, i)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=1)
        h = self.norm1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return self.mlp(x)


class TokenModel(nn.Module):
    """embedding -> blocks -> norm + head. ``kind``: 'mlp' (per-token residual MLP) or 'transformer'."""

    def __init__(self, kind: str, vocab: int, width: int, blocks: int, seq_len: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.zeros(1, seq_len, width)) if kind == "transformer" else None
        heads = 4 if width % 4 == 0 else 1
        self.blocks = nn.ModuleList(
            DecoderBlock(width, i, heads) if kind == "transformer" else MLPBlock(width, i) for i in range(blocks)
        )
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        if self.pos is not None:
            x = x + self.pos[:, : tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def build_model(cfg) -> nn.Module:
    """The run's model from its config (a ``RunConfig`` or its ``resolved()`` dict): the built-in
    ``TokenModel`` or a user's factory (``--model MODULE:FACTORY``, ``ftrun.worker.user_model``)."""
    if not isinstance(cfg, dict):
        cfg = cfg.resolved()
    if cfg["model"] in ("mlp", "transformer"):
        return TokenModel(cfg["model"], cfg["vocab"], cfg["width"], cfg["blocks"], cfg["seq_len"])
    from ftrun.worker.user_model import build_user_model

    return build_user_model(cfg)


class _Fragment(nn.Module):
    """A view over some of the model's modules; parameters are shared, not copied."""

    def __init__(self, parts: dict[str, nn.Module], params: dict[str, nn.Parameter]) -> None:
        super().__init__()
        for name, mod in parts.items():
            self.add_module(name, mod)
        for name, p in params.items():
            self.register_parameter(name, p)


def split_fragments(model: TokenModel, fragments: int) -> list[nn.Module]:
    """F contiguous groups of blocks; the first also holds the embedding, the last the head.

    Blocks are spread as evenly as possible, earlier fragments taking the remainder.
    """
    n = len(model.blocks)
    assert 1 <= fragments <= n
    sizes = [n // fragments + (1 if i < n % fragments else 0) for i in range(fragments)]
    out: list[nn.Module] = []
    start = 0
    for f, size in enumerate(sizes):
        parts: dict[str, nn.Module] = {f"block{start + j}": model.blocks[start + j] for j in range(size)}
        params: dict[str, nn.Parameter] = {}
        if f == 0:
            parts = {"embed": model.embed, **parts}
            if model.pos is not None:
                params["pos"] = model.pos
        if f == fragments - 1:
            parts.update({"norm": model.norm, "head": model.head})
        out.append(_Fragment(parts, params))
        start += size
    return out


def describe_fragments(fragments: list[nn.Module]) -> list[dict]:
    """Manifest form: per fragment, each parameter's name, numel and shape (in allreduce order).
    A fragment with ``fqns`` (``ftrun.worker.user_model``) is named by the model's own names."""
    out = []
    for i, frag in enumerate(fragments):
        named = list(frag.named_parameters())
        names = getattr(frag, "fqns", None) or [n for n, _ in named]
        params = [{"name": fq, "numel": p.numel(), "shape": list(p.shape)} for fq, (_, p) in zip(names, named)]
        numel = sum(p["numel"] for p in params)
        out.append({"id": i, "params": params, "numel": numel, "bytes": numel * 4})
    return out
