"""The run's model and its fragments, built-in or a user's: the one worker-side builder.

The built-in ``TokenModel`` is the torch form of ``ftrun.model_desc.Architecture`` (which holds
its shape, parameter count and why every block differs in size); a user's model comes from its
factory (``ftrun.worker.user_model``). Both are split by ``ftrun.worker.fragments``.

Both build from one ``ftrun.model_spec.ModelSpec`` (``RunConfig.model_spec()``).

Run as ``python -m ftrun.worker.models SPEC`` (``SPEC``: the ``ModelSpec`` as JSON) it is the
parent's pre-launch check of a user's model (``ftrun.model_spec.check``): it builds the model once,
runs one forward pass on a ``[2, T]`` batch to check the output is ``[2, T, V]`` logits, splits
it, and prints its ``ModelAnswer`` as one JSON line: {"warnings": [...], "fragments": [...]}
(``warnings`` absent when there are none) or {"error": "one line"}.
"""

from __future__ import annotations

import sys

import msgspec
import torch
from torch import nn

from ftrun import layout
from ftrun.errors import BadInput
from ftrun.model_desc import Architecture
from ftrun.model_spec import ModelCheck, ModelSpec, decode_spec, parse_fragment_fqns
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


def build_model(spec: ModelSpec) -> nn.Module:
    """The run's model: the built-in ``TokenModel`` or a user's factory (``--model MODULE:FACTORY`` / ``hf:NAME``)."""
    arch = spec.architecture
    return TokenModel(arch) if arch is not None else build_user_model(spec)


def build_fragments(model: nn.Module, spec: ModelSpec) -> list[Fragment]:
    """The run's ``--fragments`` fragments of ``model`` (``ftrun.worker.fragments``): a built-in
    model by its blocks, a user's by ``--fragment-fqns`` or its largest ``nn.ModuleList``."""
    if isinstance(model, TokenModel):
        groups = assign_fragments(model, spec.fragments, blocks=("blocks", model.blocks))
    else:
        fqns = parse_fragment_fqns(spec.fragment_fqns, spec.fragments)
        groups = assign_fragments(model, spec.fragments, fqns)
    return split(model, groups)


class ModelAnswer(ModelCheck, omit_defaults=True):
    """The child's answer: what the parent reads (``ModelCheck``) and the fragments it built."""

    fragments: list[layout.Fragment] = []


def check(spec: ModelSpec) -> ModelAnswer:
    """The pre-launch check (module docstring)."""
    t = spec.seq_len
    try:
        model = build_model(spec)
        with torch.no_grad():
            out = model(torch.zeros(2, t, dtype=torch.long))
        want = (2, t, spec.vocab)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != want:
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ModelError(
                f"{spec.flag}: maps token ids [2, {t}] to {got}; ftrun needs logits [B, T, V] = {list(want)}"
            )
        frags = build_fragments(model, spec)
    except ModelError as e:
        return ModelAnswer(error=str(e))
    except Exception as e:  # the user's forward pass
        first = str(e).splitlines()[0] if str(e) else ""
        return ModelAnswer(error=f"{spec.flag}: forward pass failed: {type(e).__name__}: {first}")
    described = describe_fragments(frags)
    return ModelAnswer(warnings=same_signatures(described), fragments=described)


def answer(payload: str | bytes) -> ModelAnswer:
    """The check of the spec ``payload`` (its JSON, ``ftrun.model_spec.decode_spec``): a payload
    that is not one answers its one-line error."""
    try:
        spec = decode_spec(payload)
    except BadInput as e:
        return ModelAnswer(error=str(e))
    return check(spec)


if __name__ == "__main__":
    print(msgspec.json.encode(answer(sys.argv[1])).decode(), flush=True)
