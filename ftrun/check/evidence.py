"""Which fragment a send or sync moved, from the tensor sizes in the trace.

Evidence is a tuple of element counts (numels): a send's allreduced tensors (``c10d::allreduce_``
Input Dims under each ``torchft::manager::allreduce``), or a sync's restored parameters
(``aten::copy_`` under ``torchft::local_sgd::restore_parameters``).

* ``ManifestMatcher``: candidates are the manifest fragments whose parameter numels equal the
  evidence as a multiset (one allreduce per parameter), or whose total numel equals the
  evidence's total with no more tensors than parameters (bucketized allreduce).
* ``GroupingMatcher`` (foreign traces, no manifest): equal totals = same fragment. The first
  observed send's signature takes that send's expected fragment id; each new signature takes
  the next id in torchft's rotation; more signatures than fragments = inconsistent (no
  candidates). With fewer distinct signatures than fragments, a signature may stand for the
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
    """Consistent numbering of size signatures across sends (see module docstring)."""

    def __init__(self, fragments: int) -> None:
        self.f = fragments
        self.ids: dict[int, Optional[int]] = {}

    def learn(self, numels: Numels, expected: Optional[int]) -> None:
        key = sum(numels)
        if key in self.ids:
            return
        used = [i for i in self.ids.values() if i is not None]
        if not used:
            self.ids[key] = expected if expected is not None else 0
        elif len(used) >= self.f:
            self.ids[key] = None
        else:
            self.ids[key] = (self.ids[next(iter(self.ids))] + len(used)) % self.f

    def candidates(self, numels: Numels) -> tuple[int, ...]:
        fid = self.ids.get(sum(numels))
        if fid is None:
            return ()
        claimed = {i for i in self.ids.values() if i is not None}
        if len(claimed) < self.f and self._shared:
            return (fid, *sorted(set(range(self.f)) - claimed))
        return (fid,)

    _shared = False

    def finish(self, expected_distinct: int) -> None:
        """Call after learning: fewer signatures than distinct expected fragments = shared."""
        claimed = {i for i in self.ids.values() if i is not None}
        self._shared = len(claimed) < min(self.f, expected_distinct)
