"""Which fragment a send or sync moved, from the tensor sizes in the trace.

Evidence is a tuple of element counts (numels): a send's allreduced tensors (``c10d::allreduce_``
Input Dims under each ``torchft::manager::allreduce``), or a sync's restored parameters
(``aten::copy_`` under ``torchft::local_sgd::restore_parameters``).

* ``ManifestMatcher``: candidates are the manifest fragments whose parameter numels equal the
  evidence as a multiset (one allreduce per parameter), or whose total numel equals the
  evidence's total with no more tensors than parameters (bucketized allreduce).
* ``GroupingMatcher`` (foreign traces, no manifest): equal totals = same fragment. Each
  signature takes the fragment id most sends with it were expected to carry (ties: the first
  observed send anchors the numbering); the rest take the next free ids in torchft's rotation;
  more signatures than fragments = inconsistent (no candidates). With fewer distinct signatures than fragments, a signature may stand for the
  unclaimed ids too: it is ambiguous.

``identify`` turns candidates into an ``Identity``: one candidate = that fragment; several =
ambiguous (accepted when the expected fragment is among them, flagged); none = unknown.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

Numels = tuple[int, ...]


def numels_of(shapes: Optional[Sequence[Sequence[int]]]) -> Optional[Numels]:
    if not shapes:
        return None
    out = []
    for s in shapes:
        n = 1
        for d in s:
            n *= d
        out.append(n)
    return tuple(out)


@dataclass(frozen=True)
class Identity:
    fragment: Optional[int]
    candidates: tuple[int, ...]
    evidence: str  # "send sizes", "restore sizes", "paired send", "none"
    ambiguous: bool = False
    note: Optional[str] = None


NO_EVIDENCE = Identity(None, (), "none", note="no tensor sizes in trace (record_shapes off?)")


def identify(candidates: Iterable[int], evidence: str, numels: Numels, expected: Optional[int]) -> Identity:
    c = tuple(sorted(set(candidates)))
    if not c:
        return Identity(None, (), evidence, note=f"sizes {list(numels)} match no fragment")
    if len(c) == 1:
        return Identity(c[0], c, evidence)
    frag = expected if expected in c else c[0]
    return Identity(frag, c, evidence, ambiguous=True, note=f"ambiguous: sizes fit fragments {list(c)}")


class ManifestMatcher:
    """Candidates from the manifest's ``fragments[i].params[j].numel`` (see module docstring)."""

    def __init__(self, fragments: list[dict[str, Any]]) -> None:
        self.frags: list[tuple[int, Counter, int, int]] = []
        for i, f in enumerate(fragments):
            nums = [int(p["numel"]) for p in f.get("params", [])]
            total = int(f.get("numel", sum(nums)))
            self.frags.append((int(f.get("id", i)), Counter(nums), total, len(nums)))

    def candidates(self, numels: Numels) -> tuple[int, ...]:
        have, total = Counter(numels), sum(numels)
        exact = tuple(fid for fid, nums, _, _ in self.frags if nums == have)
        if exact:
            return exact
        return tuple(fid for fid, _, t, n in self.frags if t == total and len(numels) <= n)


class GroupingMatcher:
    """Consistent numbering of size signatures across sends (see module docstring).

    ``learn`` every observation (sends first, in step order) with the fragment expected there,
    then ``finish``. Signatures take ids by majority of their expected fragments (ties: first
    seen, so the first observed send anchors the numbering); one mutated send can then not
    relabel everything else. Signatures left over take the free ids in rotation order.
    """

    def __init__(self, fragments: int) -> None:
        self.f = fragments
        self.order: list[int] = []
        self.votes: dict[int, Counter] = {}
        self.ids: dict[int, Optional[int]] = {}
        self._shared = False

    def learn(self, numels: Numels, expected: Optional[int]) -> None:
        key = sum(numels)
        if key not in self.votes:
            self.order.append(key)
            self.votes[key] = Counter()
        if expected is not None:
            self.votes[key][expected] += 1

    def finish(self, expected_distinct: int) -> None:
        """Fix the ids. Fewer signatures than distinct expected fragments = shared (ambiguous)."""
        pos = {k: i for i, k in enumerate(self.order)}
        used: set[int] = set()
        for _, _, k, f in sorted((-n, pos[k], k, f) for k in self.order for f, n in self.votes[k].items()):
            if k not in self.ids and f not in used and 0 <= f < self.f:
                self.ids[k] = f
                used.add(f)
        anchor = self.ids.get(self.order[0], 0) if self.order else 0
        for k in self.order:
            if k in self.ids:
                continue
            free = [(anchor + pos[k] + j) % self.f for j in range(self.f)]
            fid = next((f for f in free if f not in used), None)
            self.ids[k] = fid
            if fid is not None:
                used.add(fid)
        self._shared = len(used) < min(self.f, expected_distinct)

    def candidates(self, numels: Numels) -> tuple[int, ...]:
        fid = self.ids.get(sum(numels))
        if fid is None:
            return ()
        claimed = {i for i in self.ids.values() if i is not None}
        if self._shared:
            return (fid, *sorted(set(range(self.f)) - claimed))
        return (fid,)
