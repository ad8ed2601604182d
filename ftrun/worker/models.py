"""The run's model and its fragments, built-in or a user's: the one worker-side builder.

The built-in ``TokenModel`` is the torch form of ``ftrun.model_desc.Architecture`` (which holds
its shape, parameter count and why every block differs in size); a user's model comes from its
factory (``ftrun.worker.user_model``). Both are split by ``ftrun.worker.fragments``.

Run as ``python -m ftrun.worker.models JSON`` it is the parent's pre-launch check of a user's
model (``ftrun.model_spec.check``): it builds the model once, runs one forward pass on a ``[2, T]``
batch to check the output is ``[2, T, V]`` logits, splits it, and prints one JSON line:
{"fragments": [...], "warnings": [...]} or {"error": "one line"}.
"""

from __future__ import annotations

import json
import sys

import msgspec
import torch
from torch import nn

from ftrun.model_desc import Architecture, architecture
from ftrun.model_spec import parse_fragment_fqns
from ftrun.worker.fragments import Fragment, ModelError, assign_fragments, describe_fragments, same_signatures, split
from ftrun.worker.user_model import build_user_model


class MLPBlock(nn.Module):
    def __init__(self, arch: Architecture, i: int) -> None:
        super().__init__()
        width = arch.width
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, arch.ffn_width(i))
        self.down = nn.Linear(arch.ffn_width(i), width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(self.norm(x))))


class DecoderBlock(nn.Module):
    def __init__(self, arch: Architecture, i: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(arch.width)
        self.attn = nn.MultiheadAttention(arch.width, arch.heads, batch_first=True)
        self.mlp = MLPBlock(arch, i)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=1)
        h = self.norm1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return self.mlp(x)


class TokenModel(nn.Module):
    """embedding -> blocks -> norm + head, as ``arch`` describes it."""

    def __init__(self, arch: Architecture) -> None:
        super().__init__()
        self.embed = nn.Embedding(arch.vocab, arch.width)
        self.pos = nn.Parameter(torch.zeros(1, arch.seq_len, arch.width)) if arch.kind == "transformer" else None
        block = DecoderBlock if arch.kind == "transformer" else MLPBlock
        self.blocks = nn.ModuleList(block(arch, i) for i in range(arch.blocks))
        self.norm = nn.LayerNorm(arch.width)
        self.head = nn.Linear(arch.width, arch.vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        if self.pos is not None:
            x = x + self.pos[:, : tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def _as_dict(cfg) -> dict:
    return cfg if isinstance(cfg, dict) else cfg.resolved()


def build_model(cfg) -> nn.Module:
    """The run's model from its config (a ``RunConfig`` or its ``resolved()`` dict): the built-in
    ``TokenModel`` or a user's factory (``--model MODULE:FACTORY`` / ``hf:NAME``)."""
    c = _as_dict(cfg)
    arch = architecture(c)
    return TokenModel(arch) if arch is not None else build_user_model(c)


def build_fragments(model: nn.Module, cfg) -> list[Fragment]:
    """The run's ``--fragments`` fragments of ``model`` (``ftrun.worker.fragments``): a built-in
    model by its blocks, a user's by ``--fragment-fqns`` or its largest ``nn.ModuleList``."""
    c = _as_dict(cfg)
    if isinstance(model, TokenModel):
        groups = assign_fragments(model, c["fragments"], blocks=("blocks", model.blocks))
    else:
        fqns = parse_fragment_fqns(c.get("fragment_fqns") or "", c["fragments"])
        groups = assign_fragments(model, c["fragments"], fqns)
    return split(model, groups)


def check(cfg: dict) -> dict:
    """The pre-launch check (module docstring)."""
    try:
        model = build_model(cfg)
        with torch.no_grad():
            out = model(torch.zeros(2, cfg["seq_len"], dtype=torch.long))
        want = (2, cfg["seq_len"], cfg["vocab"])
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != want:
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ModelError(
                f"--model {cfg['model']}: maps token ids [2, {cfg['seq_len']}] to {got}; "
                f"ftrun needs logits [B, T, V] = {list(want)}"
            )
        frags = build_fragments(model, cfg)
    except ModelError as e:
        return {"error": str(e)}
    except Exception as e:  # the user's forward pass
        first = str(e).splitlines()[0] if str(e) else ""
        return {"error": f"--model {cfg['model']}: forward pass failed: {type(e).__name__}: {first}"}
    described = describe_fragments(frags)
    # the child's answer is JSON on its stdout (ftrun.model_spec.check reads it): the records as builtins
    return {"fragments": msgspec.to_builtins(described), "warnings": same_signatures(described)}


if __name__ == "__main__":
    print(json.dumps(check(json.loads(sys.argv[1]))), flush=True)
