"""Which fragment a send or sync moved: trace -> signature -> identity, from evidence only.

**Signature** (``Signature``): what one event moved, as the trace shows it.

* send (``torchft::local_sgd::prepare_sync``): the number of ``torchft::manager::allreduce``
  calls (one per parameter, or one per bucket with ``TORCHFT_USE_BUCKETIZATION``), and, when
  the trace has tensor sizes (``record_shapes``), the element count of each (bucket sizes when
  bucketized) and the element size of the collectives that ran them;
* sync (``torchft::local_sgd::perform_sync``): the ``aten::copy_`` calls of
  ``restore_parameters`` (one per parameter) and, with sizes, each parameter's element count.

Sizes are kept as a sorted multiset. ``trace_key`` drops sizes when any event lacks them, so a
trace without ``record_shapes`` is compared by counts only.

**Identity** (``Identity``), two ways, never from the expected schedule's fragment ids alone:

* ``ManifestIdentifier``: a signature matches a manifest fragment when its sizes equal the
  fragment's parameter sizes (one allreduce per parameter), else (a send) when they chunk the
  fragment's total the way torchft's bucketization does (equal buckets, the last one smaller),
  or — without sizes — when its count equals the fragment's parameter count (a bucketized run's
  send without sizes: any fragment, so ambiguous unless there is one). No match:
  ``Identity.problem`` names the observed sizes and the manifest's fragments (the event fails).
  Several matches: ambiguous, never reported as checked.
* ``ClusterIdentifier`` (no manifest): sends with the same signature are one class everywhere
  (every file, replica and rank). Classes are labelled once, anchored on the expected
  schedule where it is sound — the first captured run of steps of each worker (later runs
  depend on commits outside the trace): each class takes the fragment most of its sends there
  were expected to carry, the first captured send breaking ties (so one corrupted send cannot
  relabel the run); a class left over takes the next free id in torchft's rotation. From then
  on every send is checked against the rotation the schedule and the failed commits give. Sync
  signatures join the send class with the same signature, else the class most of their paired
  sends had. Fewer classes than the fragments the captured sends cover: identity cannot be
  checked (``unusable`` says why). A class label is never reported as an identified fragment
  (``Identity.checked``): it checks the rotation and the replicas' agreement, not the id.

Pure: signatures and identifiers only. ``ftrun.check.identify`` applies them to every
observation of a run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import msgspec

from ftrun.layout import Fragment

Numels = tuple[int, ...]
# a signature as a class key: (its collective count, its sorted element counts or None)
SignatureKey = tuple[int, Numels | None]


def numels_of(shapes: Sequence[Sequence[int]] | None) -> Numels | None:
    if not shapes:
        return None
    out = []
    for s in shapes:
        n = 1
        for d in s:
            n *= d
        out.append(n)
    return tuple(out)


class Signature(msgspec.Struct, frozen=True):
    """``kind``: "send" (entries = allreduces) or "restore" (entries = parameters)."""

    kind: str
    count: int
    sizes: Numels | None = None  # sorted element counts; None without tensor sizes
    itemsize: int | None = None  # bytes per element, when the collectives say

    def key(self, with_sizes: bool) -> SignatureKey:
        return (self.count, self.sizes if with_sizes else None)

    def describe(self) -> str:
        what = "allreduce" if self.kind == "send" else "restored parameter"
        n = f"{self.count} {what}{'s' if self.count != 1 else ''}"
        return n if self.sizes is None else f"{n} of {_short(self.sizes)} elements"


def send_signature(
    allreduce_shapes: Sequence[Sequence[Sequence[int]] | None], itemsizes: Iterable[int | None] = ()
) -> Signature:
    """One entry per ``manager.allreduce``: its tensors' shapes (None when the trace has none)."""
    sizes: list[int] | None = []
    for shapes in allreduce_shapes:
        if not shapes or sizes is None:
            sizes = None
            continue
        sizes.append(sum(numels_of(shapes) or ()))
    known = {i for i in itemsizes if i}
    return Signature(
        "send", len(allreduce_shapes), tuple(sorted(sizes)) if sizes else None, known.pop() if len(known) == 1 else None
    )


def restore_signature(copies: int, shapes: Sequence[Sequence[int]] | None) -> Signature | None:
    """None when ``restore_parameters`` was not captured (no copies)."""
    n = numels_of(shapes)
    if not copies and not n:
        return None
    count = max(copies, len(n or ()))
    return Signature("restore", count, tuple(sorted(n)) if n and len(n) == count else None)


def trace_key(sigs: Iterable[Signature]) -> bool:
    """Compare with sizes only when every signature has them."""
    sigs = list(sigs)
    return bool(sigs) and all(s.sizes is not None for s in sigs)


class Identity(msgspec.Struct, frozen=True):
    fragment: int | None  # None: not identified (no evidence, ambiguous, or no match)
    candidates: tuple[int, ...]
    evidence: str  # "send sizes" | "send count" | "restore sizes" | "restore count" | "paired send" | "none"
    ambiguous: bool = False
    problem: str | None = None  # the evidence contradicts every fragment: the event fails
    # what names the fragment id: "manifest" (sizes or counts matched to the manifest's fragments),
    # "log" (torchft's own log line: ``ftrun.check.fragment_log``)
    # or "class" (a class of equal signatures, labelled by the expected schedule: the trace tells
    # the fragments apart but not which one is fragment 0, so the id itself is not checked)
    basis: str = "manifest"

    @property
    def labelled(self) -> bool:
        """A fragment id to compare with the rotation (evidence or a class label)."""
        return self.fragment is not None

    @property
    def checked(self) -> bool:
        """The fragment id itself is proven by evidence (never by a class label)."""
        return self.fragment is not None and self.basis != "class"


NO_EVIDENCE = Identity(None, (), "none")


def evidence_name(sig: Signature, with_sizes: bool) -> str:
    return f"{sig.kind} {'sizes' if with_sizes and sig.sizes is not None else 'count'}"


def _short(sizes: Sequence[int], most: int = 6) -> str:
    s = list(sizes)
    return "[" + ", ".join(map(str, s[:most])) + (f", … {len(s) - most} more" if len(s) > most else "") + "]"


class _Frag(msgspec.Struct, frozen=True):
    id: int
    sizes: Numels  # sorted parameter numels
    total: int
    itemsize: int | None


class ManifestIdentifier:
    """Identity from the manifest's ``fragments[i].params[j].numel`` (see module docstring)."""

    def __init__(self, fragments: list[Fragment], bucketized: bool = False) -> None:
        self.bucketized = bucketized  # the run's --bucketize: a send's allreduce count is its buckets'
        self.frags: list[_Frag] = []
        for f in fragments:
            nums = tuple(sorted(p.numel for p in f.params))
            item = f.bytes // f.numel if f.numel and f.bytes % f.numel == 0 else None
            self.frags.append(_Frag(f.id, nums, f.numel, item))

    def candidates(self, sig: Signature, with_sizes: bool = True) -> tuple[int, ...]:
        """Per-parameter matches; for a send without one, bucketized matches."""
        frags = [f for f in self.frags if not (sig.itemsize and f.itemsize and sig.itemsize != f.itemsize)]
        if not with_sizes or sig.sizes is None:
            if self.bucketized and sig.kind == "send":  # one allreduce per bucket: the count names no fragment
                return tuple(f.id for f in frags)
            return tuple(f.id for f in frags if sig.count == len(f.sizes))
        exact = tuple(f.id for f in frags if sig.sizes == f.sizes)
        if exact or sig.kind != "send":
            return exact
        return tuple(f.id for f in frags if _buckets(sig.sizes, f.total))

    def identify(self, sig: Signature | None, with_sizes: bool = True) -> Identity:
        if sig is None:
            return NO_EVIDENCE
        ev = evidence_name(sig, with_sizes)
        c = self.candidates(sig, with_sizes)
        if len(c) == 1:
            return Identity(c[0], c, ev)
        if c:
            return Identity(None, c, ev, ambiguous=True)
        return Identity(None, (), ev, problem=f"{sig.describe()} match no manifest fragment ({self.describe()})")

    def describe(self) -> str:
        return "; ".join(f"fragment {f.id}: {len(f.sizes)} parameters of {_short(f.sizes)}" for f in self.frags)


def _buckets(sizes: Numels, total: int) -> bool:
    """torchft's bucketization: equal chunks of the flattened fragment, the last one smaller."""
    return sum(sizes) == total and all(s == sizes[-1] for s in sizes[1:])


class ClusterIdentifier:
    """Classes of equal signatures, labelled once for the whole trace set (module docstring).

    ``learn_send(sig)`` every send in (step, worker) order and ``learn_restore(sig,
    paired_send_sig)`` every sync (classes are then known: ``same_class``, ``class_of``); then
    ``vote(sig, expected)`` each matched send and ``finish(needed)`` with the number of distinct
    fragments the captured sends were expected to carry.
    """

    def __init__(self, fragments: int, with_sizes: bool) -> None:
        self.f = fragments
        self.with_sizes = with_sizes
        self.order: list[SignatureKey] = []
        self.votes: dict[SignatureKey, Counter[int]] = {}
        self.restore_votes: dict[SignatureKey, Counter[SignatureKey]] = {}
        self.ids: dict[SignatureKey, int | None] = {}
        self.unusable: str | None = None

    def learn_send(self, sig: Signature) -> None:
        k = sig.key(self.with_sizes)
        if k not in self.votes:
            self.order.append(k)
            self.votes[k] = Counter()

    def vote(self, sig: Signature, expected: int | None) -> None:
        k = sig.key(self.with_sizes)
        if expected is not None and k in self.votes:
            self.votes[k][expected] += 1

    def learn_restore(self, sig: Signature, paired: Signature | None) -> None:
        if paired is not None:
            self.restore_votes.setdefault(sig.key(self.with_sizes), Counter())[paired.key(self.with_sizes)] += 1

    def finish(self, needed: int) -> None:
        pos = {k: i for i, k in enumerate(self.order)}
        used: set[int] = set()
        for _, _, k, f in sorted((-n, pos[key], key, fid) for key in self.order for fid, n in self.votes[key].items()):
            if k not in self.ids and f not in used and 0 <= f < self.f:
                self.ids[k] = f
                used.add(f)
        first = self.ids.get(self.order[0]) if self.order else None  # the loop above gave it an int, or none
        anchor = first if first is not None else 0
        for k in self.order:
            if k in self.ids:
                continue
            fid = next((g for g in ((anchor + pos[k] + j) % self.f for j in range(self.f)) if g not in used), None)
            self.ids[k] = fid
            if fid is not None:
                used.add(fid)
        if len(self.order) < min(self.f, needed):
            what = "allreduce count" if not self.with_sizes else "allreduce sizes"
            same = "number of parameters (no tensor sizes in the trace)" if not self.with_sizes else "tensor sizes"
            self.unusable = (
                f"fragment identity cannot be checked from this trace: {len(self.order)} distinct {what} "
                f"signature(s) for the {min(self.f, needed)} fragments expected in the captured steps (the fragments "
                f"have the same {same}, or fewer fragments were sent: failed commits)"
            )

    def class_of(self, sig: Signature | None) -> SignatureKey | None:
        return self._class(sig) if sig is not None else None

    def _class(self, sig: Signature) -> SignatureKey | None:
        k = sig.key(self.with_sizes)
        if sig.kind == "send" or k in self.votes:
            return k if k in self.votes else None
        votes = self.restore_votes.get(k)
        return votes.most_common(1)[0][0] if votes else None

    def identify(self, sig: Signature | None) -> Identity:
        if sig is None:
            return NO_EVIDENCE
        ev = evidence_name(sig, self.with_sizes)
        if self.unusable:
            return Identity(None, (), ev, ambiguous=True)
        k = self._class(sig)
        if k is None:
            return (
                NO_EVIDENCE
                if sig.kind == "restore"
                else Identity(None, (), ev, problem=f"{sig.describe()}: no send class")
            )
        fid = self.ids.get(k)
        if fid is None:
            return Identity(
                None,
                (),
                ev,
                problem=f"{sig.describe()}: more distinct signatures ({len(self.order)}) than fragments ({self.f})",
            )
        return Identity(fid, (fid,), ev, basis="class")

    def same_class(self, a: Signature | None, b: Signature | None) -> bool | None:
        """Do two signatures belong to one class? None when either has no class."""
        ka = self._class(a) if a is not None else None
        kb = self._class(b) if b is not None else None
        return None if ka is None or kb is None else ka == kb
