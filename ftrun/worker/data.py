"""Training data: a synthetic Markov 'language' or a text file as byte-level tokens.

Every replica group and rank draws its own stream (seeded by seed, replica, rank), as
torchft's DistributedSampler shards data across groups. The synthetic source has real
structure (a fixed random transition table shared by all ranks), so the loss goes down.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ftrun.config.parts import DATA_LIMIT
from ftrun.small_files import read_file


class Batches:
    def __init__(self, source: str, vocab: int, seq_len: int, batch_size: int, seed: int, stream: int) -> None:
        self.seq_len, self.batch_size = seq_len, batch_size
        self.gen = torch.Generator().manual_seed(seed * 1_000_003 + stream)
        if source == "synthetic":
            table_gen = torch.Generator().manual_seed(seed)
            # each token has 4 likely successors: learnable, not trivial
            self.successors = torch.randint(0, vocab, (vocab, 4), generator=table_gen)
            self.vocab = vocab
            self._successors = self.successors.tolist()  # the walk's lookups, in Python (``next``)
            self.text = None
        else:
            raw = read_file(Path(source), DATA_LIMIT, "--data file")  # (checked before launch: config)
            self.text = torch.frombuffer(bytearray(raw), dtype=torch.uint8).long() % vocab

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets), both ``[batch, seq_len]`` int64."""
        b, t = self.batch_size, self.seq_len
        if self.text is None:
            first = torch.randint(0, self.vocab, (b,), generator=self.gen).tolist()
            choice = torch.randint(0, 4, (b, t), generator=self.gen).tolist()
            seq = torch.tensor(
                [self._walk(start, row) for start, row in zip(first, choice, strict=True)], dtype=torch.long
            )
        else:
            starts = torch.randint(0, len(self.text) - t - 1, (b,), generator=self.gen)
            seq = torch.stack([self.text[s : s + t + 1] for s in starts.tolist()])
        return seq[:, :-1], seq[:, 1:]

    def _walk(self, start: int, choice: list[int]) -> list[int]:
        """One sequence of the synthetic source: ``start``, then each token's ``choice[j]``-th
        successor. A walk is sequential, so it is taken in Python on the table's lists: as torch
        indexing each position was a dozen profiler events, a third of a profiled step's and of
        the trace a short run waits on at its end; the tokens are the same."""
        succ = self._successors
        seq = [start]
        for c in choice:
            seq.append(succ[seq[-1]][c])
        return seq
