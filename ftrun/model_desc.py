"""What a model is, without torch: the built-in models' names and architecture as data, their
parameter count, and the one even split (of blocks into fragments, or of bytes into parts).

The built-in models (``ftrun.worker.models.TokenModel`` builds them from an ``Architecture``)
are token models: embedding -> N blocks -> final norm + head, predicting the next token. Block
i's feed-forward width is ``2*width + 16*i``, so every block — and therefore every fragment —
has a distinct parameter-size signature. That is what lets ``inspect-trace`` tell fragments
apart from the allreduce sizes alone, without trusting the schedule.
"""

from __future__ import annotations

from dataclasses import dataclass

BUILTIN_MODELS = ("mlp", "transformer")  # --model names of the built-in models; anything else is a user's


def even_split(total: int, parts: int) -> tuple[int, ...]:
    """``total`` items in ``parts`` contiguous groups as even as possible, earlier groups
    taking the remainder: ``even_split(5, 2) == (3, 2)``."""
    if parts < 1 or total < 0:
        raise ValueError(f"even_split({total}, {parts}): needs parts >= 1 and total >= 0")
    return tuple(total // parts + (1 if i < total % parts else 0) for i in range(parts))


@dataclass(frozen=True)
class Architecture:
    """A built-in model's shape. ``kind``: 'mlp' (per-token residual MLP blocks) or
    'transformer' (causal self-attention + that MLP, learned positions of ``seq_len``)."""

    kind: str
    vocab: int
    width: int
    blocks: int
    seq_len: int

    # torch's default dtype, which the built-in models are built in
    BYTES_PER_PARAM = 4

    def __post_init__(self) -> None:
        if self.kind not in BUILTIN_MODELS:
            raise ValueError(f"Architecture: {self.kind!r} is not a built-in model ({', '.join(BUILTIN_MODELS)})")

    @property
    def heads(self) -> int:
        return 4 if self.width % 4 == 0 else 1

    def ffn_width(self, i: int) -> int:
        """Block ``i``'s feed-forward width (distinct per block: module docstring)."""
        return 2 * self.width + 16 * i

    def embedding_params(self) -> int:
        """Token embedding, plus the positions of a transformer."""
        return self.vocab * self.width + (self.seq_len * self.width if self.kind == "transformer" else 0)

    def block_params(self, i: int) -> int:
        w, f = self.width, self.ffn_width(i)
        n = 2 * w + (w * f + f) + (f * w + w)  # norm, up, down
        if self.kind == "transformer":
            n += 2 * w + 4 * w * w + 4 * w  # norm1, attention in/out projections with biases
        return n

    def head_params(self) -> int:
        """Final norm and the output projection."""
        return 2 * self.width + self.width * self.vocab + self.vocab

    def params(self) -> int:
        return self.embedding_params() + sum(self.block_params(i) for i in range(self.blocks)) + self.head_params()

    def param_bytes(self) -> int:
        return self.BYTES_PER_PARAM * self.params()
