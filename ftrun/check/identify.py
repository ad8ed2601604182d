"""Stage 2 of the check, identify: which fragment every observation moved -> ``Identities``.

Applies ``ftrun.check.evidence`` (signatures, ``ManifestIdentifier``, ``ClusterIdentifier``)
to every observation of a run, in two steps: ``RunIdentities(manifest, wobs, schedule)`` learns
the signature classes (enough for ``cls``: to see a fragment sent again, which the expect/match
stage needs to infer failed commits); ``label(wobs, pairs)`` then fixes each observation's
``Identity`` — without a manifest the classes are labelled from the matched expectations
(the first captured run of steps of each worker). ``notes`` states the trace-wide conditions once.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ftrun.check.evidence import NO_EVIDENCE, ClusterIdentifier, Identity, ManifestIdentifier, SignatureKey, trace_key
from ftrun.check.observe import Obs, WorkerObs
from ftrun.layout import AnyManifest, Manifest
from ftrun.schedule import Event, Schedule

Pair = tuple[Event | None, Obs | None]  # (expected, observed), from the expect/match stage


class Identities(msgspec.Struct):
    """Each observation's identity (``NO_EVIDENCE`` for one never labelled)."""

    by_obs: dict[Obs, Identity] = msgspec.field(default_factory=dict)

    def of(self, o: Obs) -> Identity:
        return self.by_obs.get(o, NO_EVIDENCE)


class RunIdentities:
    """Trace -> signature -> identity for every observation of the run (module docstring)."""

    def __init__(self, manifest: AnyManifest | None, wobs: list[WorkerObs], schedule: Schedule) -> None:
        self.schedule = schedule
        sends = [o.sig for wo in wobs for o in wo.obs if o.kind == "send" and o.sig is not None]
        self.with_sizes = trace_key(sends)
        frags = manifest.fragments if manifest is not None else None
        self.has_manifest = manifest is not None  # ftrun launch: a manifest without fragment sizes
        self.manifest: ManifestIdentifier | None = None
        self.cluster: ClusterIdentifier | None = None
        if frags:
            bucketized = isinstance(manifest, Manifest) and manifest.config.optimizer.bucketize
            self.manifest = ManifestIdentifier(frags, bucketized)
            return
        self.cluster = ClusterIdentifier(schedule.fragments, self.with_sizes)
        order = sorted(
            (
                (o.step if o.step is not None else 1 << 30, o.kind != "send", wi, o.ts, o)
                for wi, wo in enumerate(wobs)
                for o in wo.obs
            ),
            key=lambda x: x[:4],
        )
        for *_, o in order:
            if o.kind == "send" and o.sig is not None:
                self.cluster.learn_send(o.sig)
        for *_, o in order:
            if o.kind == "sync" and o.sig is not None:
                self.cluster.learn_restore(o.sig, o.paired.sig if o.paired is not None else None)

    @property
    def _clusters(self) -> ClusterIdentifier:
        """The signature classes: ``__init__`` made them wherever the manifest gave no fragments."""
        assert self.cluster is not None
        return self.cluster

    def _identity(self, o: Obs) -> Identity:
        if self.manifest is not None:
            return self.manifest.identify(o.sig)
        return self._clusters.identify(o.sig)

    @property
    def distinct(self) -> bool:
        """Can the classes tell every fragment apart? (Else a repeated class is no evidence of a retry.)"""
        return self.manifest is not None or len(self._clusters.order) >= self.schedule.fragments

    def cls(self, o: Obs | None) -> int | SignatureKey | None:
        """A label-free class of what ``o`` moved (manifest fragment, else signature class)."""
        if o is None or o.sig is None:
            return None
        if self.manifest is not None:
            return self._identity(o).fragment
        return self._clusters.class_of(o.sig)

    def label(self, wobs: Sequence[WorkerObs], pairs: Sequence[Sequence[Pair]]) -> Identities:
        """Every observation's identity; ``pairs``: each worker's matched (expected, observed), as ``wobs``."""
        if self.cluster is not None:
            needed: set[int] = set()
            for wo, mine in zip(wobs, pairs, strict=True):
                # only the first captured run of steps: later ones depend on commits nobody saw
                lo, hi = min(wo.ranges) if wo.ranges else (0, -1)
                for e, o in mine:
                    first_run = lo <= (o.step or -1) <= hi if o is not None else False
                    if e is not None and o is not None and o.kind == "send" and o.sig is not None and first_run:
                        self.cluster.vote(o.sig, e.fragment)
                        needed.add(e.fragment)
            self.cluster.finish(len(needed))
        out = Identities()
        for wo in wobs:
            for o in wo.obs:
                if o.kind == "send":
                    out.by_obs[o] = self._identity(o)
            for o in wo.obs:
                if o.kind != "sync":
                    continue
                i = self._identity(o)
                sent = out.of(o.paired) if o.paired is not None else NO_EVIDENCE
                if i.evidence == "none" and sent.evidence != "none":  # no restore captured: its send says
                    i = Identity(
                        sent.fragment, sent.candidates, "paired send", sent.ambiguous, sent.problem, sent.basis
                    )
                out.by_obs[o] = i
        return out

    def notes(self, wobs: Sequence[WorkerObs], ids: Identities) -> list[str]:
        """Trace-wide conditions, each said once."""
        out = []
        obs = [o for wo in wobs for o in wo.obs]
        sends = [o for o in obs if o.kind == "send"]
        if sends and not self.with_sizes:
            restored = any(o.sig is not None and o.sig.sizes is not None for o in obs if o.kind == "sync")
            if restored:
                out.append(
                    "allreduces run in another process (no c10d::allreduce_ under torchft::manager::allreduce, as with "
                    "torchft's Baby process groups): sends told apart by their number of allreduces"
                )
            else:
                out.append(
                    "no tensor sizes in the trace (record_shapes off): sends told apart by their number of allreduces"
                )
        traces = {id(o.trace): o.trace for o in sends}
        bare = [t for t in traces.values() if not t.collectives]
        if bare:
            out.append(
                f"no collective spans in {len(bare)} of {len(traces)} trace file(s) with sends: "
                "hidden and send→done times are not measured there"
            )
        if self.cluster is not None:
            if self.cluster.unusable:
                out.append(self.cluster.unusable)
            else:
                out.append(
                    f"{'no fragment sizes in the manifest' if self.has_manifest else 'no manifest'}: the trace tells "
                    "the fragments apart (classes of equal signatures, one labelling for every file and replica) but "
                    "not which is fragment 0: the labels follow the expected schedule, so the rotation and the "
                    "replicas' agreement are checked, each fragment id is not (fragment_basis 'class')"
                )
        amb = sorted({ids.of(o).candidates for o in obs if ids.of(o).ambiguous and ids.of(o).candidates})
        for c in amb:
            sig = next(o.sig for o in obs if o.sig is not None and ids.of(o).candidates == c and ids.of(o).ambiguous)
            frs = ", ".join(map(str, c[:-1])) + f" and {c[-1]}"
            out.append(
                f"ambiguous: fragments {frs} have the same signature ({sig.describe()}): "
                "their events are not checked for fragment identity"
            )
        return out
