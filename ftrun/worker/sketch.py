"""Sketch what torchft's DiLoCo averaged at every sync, so ``ftrun.check.numerics`` can check it.

Where torchft computes it (0.2.0 and nightly, ``local_sgd.py`` / ``manager.py``): at the send,
``_StreamingDiLoCoFragment.prepare_sync`` computes each parameter's pseudo-gradient
``original - current`` and calls ``Manager.allreduce`` per parameter (or per bucket);
``Manager.allreduce`` zeroes the tensor when the replica is not participating, runs the process
group's SUM, and chains a callback that divides by ``num_participants()``; at the sync,
``perform_sync`` waits, and after ``should_commit`` the outer optimizer steps on the average.
We hook exactly those places, never re-implementing them:

* ``SketchPG`` wraps the process group the Manager uses (torchft's ``ProcessGroupWrapper``
  extension point): the tensor handed to its ``allreduce`` is the **contribution** as the
  collective saw it; its result, before torchft's divide callback runs, is the **SUM**. On the
  CPU the SUM is read at the sync: the fragment's ``perform_sync`` (innermost hook, ``attach_sums``)
  first waits for the round's Works as torchft's own wait does first, and sketches every SUM at
  once, in place, before torchft's wait chains its divide (a Python Work wrapper per collective and
  a completion callback per tensor, each copying its tensor, cost ~0.45 ms per sync in the rank).
  Elsewhere (a GPU's streams, the quantized path's own done-callback) the SUM is sketched in a
  callback on the Work's future (``SketchedWork``).
  With ``--quantize`` torchft calls ``allreduce_quantized`` instead, which never calls it:
  ``ftrun.worker.sketch_quantized`` wraps that function and sketches through ``SketchPG.sketched``.
* each fragment's ``prepare_sync`` / ``perform_sync`` (instance attributes) name the round:
  fragment, manager step, quorum id, participants, whether this replica participates.
* the outer optimizers ftrun built get a step pre-hook (the **average** it steps on: ``p.grad``).
  (The event log's ``fingerprint`` of every commit, ``ftrun.worker.recorder``, hashes the globals
  exactly, for the replicas' agreement; their sketch, ``sketch_outer``, is what the linear checks of
  the step and of the next round's originals need.)
* the rest of the outer step (``ftrun.worker.sketch_outer``): the originals and the current
  parameters at the send, the outer step's hyper-parameters, parameters and momentum after it, and
  with ``fragment_update_alpha`` > 0 the merge; ``--corrupt-sync`` acts in the same hooks.
* after a heal, the first send fingerprints every fragment's global parameters (``HealNumerics``),
  as the recorder does at a commit: the check compares them with the source's, bit for bit.

The projections themselves (``layout.Sketch``, linear, fixed ±1; their cost and rounding):
``ftrun.worker.sketch_projection``.

A hook that fails never breaks training: the round is marked unsketched and the check says
"not checked" for it (logged once).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torchft.process_group import ProcessGroup
from torchft.utils import get_stream_context

from ftrun import layout
from ftrun.torchft_compat import SKETCH_WAIT, diloco_fragments, quorum_id
from ftrun.worker.pg_wrapper import KeptWrapper
from ftrun.worker.recorder import fingerprint
from ftrun.worker.sketch_outer import OuterSketcher
from ftrun.worker.sketch_projection import (  # (this module's API too)
    BATCH,
    FUSE_ROWS,
    PERIOD,
    SEED,
    STAGE,
    Builder,
    K,
    Projector,
)

__all__ = ["BATCH", "FUSE_ROWS", "K", "PERIOD", "SEED", "STAGE", "Builder", "NumericsProbe", "Projector", "SketchPG"]

log = logging.getLogger(__name__)


class Round:
    """One fragment's round, from its send to its sync, on this rank."""

    def __init__(
        self,
        projector: Projector,
        fragment: int,
        manager_step: int,
        qid: int | None,
        participants: int,
        participating: bool,
        sync_step: int | None,
        path: str,
    ) -> None:
        self.fragment, self.manager_step, self.quorum_id = fragment, manager_step, qid
        self.participants, self.participating, self.sync_step, self.path = participants, participating, sync_step, path
        self.world: int | None = None
        self.contribution = Builder(projector)
        self.sum = Builder(projector, norm=False)  # the check bounds ||SUM|| by Σ||contribution||
        # CPU plain path: (tensor, offset, index, Work) per collective, the SUM sketched at the sync
        self.held: list[tuple[torch.Tensor, int, int, dist._Work]] = []
        self.sum_sketch: layout.Sketch | None = None  # the held collectives' SUM (``NumericsProbe.sums_first``)
        self.average: layout.Sketch | None = None
        self.issued = 0
        self.done = 0
        self.broken = False
        self.sent = False  # its send part is in the event log
        self.device = "cpu"  # of the tensors handed to the collective
        self.unsketched: str | None = None  # why its collective could not be sketched (the quantized path)
        self.outer: Any = None  # its ``sketch_outer.OuterParts`` (set by ``NumericsProbe``)

    def part(self, phase: str, **sketches: Any) -> layout.RoundNumerics:
        return layout.RoundNumerics(
            phase=phase,
            fragment=self.fragment,
            manager_step=self.manager_step,
            quorum_id=self.quorum_id,
            sync_step=self.sync_step,
            participants=self.participants,
            participating=self.participating,
            world=self.world,
            path=self.path,
            collectives=self.issued,
            unsketched=None if self.issued else self.unsketched,
            **sketches,
        )


class SketchedWork(dist._Work):
    """The process group's Work, whose future completes after ``on_done`` sketched the SUM (and
    before torchft's divide callback, which the Manager chains on this future).

    The chain is built only when someone asks for the future, as torchft's Manager does after
    ``wait()``: asking earlier changes torchft's behaviour (0.2.0's Baby process groups reply to
    a future request issued before the op completes with a late-bound op id and then hang)."""

    def __init__(self, work: dist._Work, on_done: Callable[[], None]) -> None:
        super().__init__()
        self._work = work
        self._on_done = on_done
        self._future: torch.futures.Future[Any] | None = None
        self._lock = threading.Lock()

    def wait(self, timeout: Any = None) -> bool:
        ok = self._work.wait() if timeout is None else self._work.wait(timeout)
        if self._future is not None:
            self._future.wait()
        return True if ok is None else ok

    def block_current_stream(self, timeout: Any = None) -> None:
        self._work.block_current_stream()

    def get_future(self) -> torch.futures.Future[Any]:
        with self._lock:
            if self._future is None:
                on_done = self._on_done

                def done(fut: torch.futures.Future[Any]) -> Any:
                    value = fut.value()  # the real collective's error, if any, propagates
                    on_done()
                    return value

                self._future = self._work.get_future().then(done)
            return self._future


class SketchPG(KeptWrapper):
    """``Manager(pg=SketchPG(pg, probe))``: sketches each SUM allreduce issued during a send; torchft's
    quantized allreduce, called with this group, is sketched through ``sketched`` too
    (``ftrun.worker.sketch_quantized``)."""

    def __init__(self, pg: ProcessGroup, probe: NumericsProbe) -> None:
        super().__init__(pg)
        self._probe = probe

    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> dist._Work:
        if getattr(opts, "reduceOp", None) != dist.ReduceOp.SUM:
            return super().allreduce(tensors, opts)
        path = self._probe.plain_path
        if len(tensors) == 1 and tensors[0].device.type == "cpu":
            return self.held(tensors[0], lambda: KeptWrapper.allreduce(self, tensors, opts), path)
        return self.sketched(tensors, lambda: KeptWrapper.allreduce(self, tensors, opts), path)

    def _contribute(self, t: torch.Tensor, path: str) -> tuple[Round, int, int] | None:
        """Sketch ``t``, about to be handed to the round's next collective (the contribution); the
        round, ``t``'s offset in the fragment and the collective's index. None: no round is sketched."""
        r = self._probe.round
        if r is None or r.broken:
            return None
        try:
            if r.world is None:
                r.world = int(self._inner.size())
                r.device = t.device.type
            r.path = path
            self._probe.corruption.before_issue(t, r.sync_step)  # --corrupt-sync sign: what the collective sees
            offset, index = r.contribution.add(t), r.issued
            r.issued += 1
            self._probe.corruption.at_issue(t, r.sync_step, r.fragment, index)
        except Exception:
            self._probe.failed(r, "contribution")
            return None
        return r, offset, index

    def held(self, t: torch.Tensor, issue: Callable[[], dist._Work], path: str) -> dist._Work:
        """Run ``issue()``, the collective of CPU tensor ``t``, sketching ``t`` as handed to it; its
        Work is returned as it is and kept in the round, whose SUM ``NumericsProbe.sums_first``
        sketches at the sync."""
        placed = self._contribute(t, path)
        work = issue()
        if placed is not None:
            r, offset, index = placed
            r.held.append((t, offset, index, work))
        return work

    def sketched(
        self, tensors: list[torch.Tensor], issue: Callable[[], dist._Work], path: str, stream: Any = None
    ) -> dist._Work:
        """Run ``issue()``, the collective of one tensor of the round being sent, sketching the tensor
        as handed to it (the contribution) and, once the Work completed, its result (the SUM, before
        torchft's divide callback, on ``stream`` when given: where the collective writes the result).
        ``path``: which torchft path this collective is (the round's ``path``)."""
        placed = self._contribute(tensors[0], path) if len(tensors) == 1 else None
        if placed is None:
            return issue()
        t = tensors[0]
        probe = self._probe
        r, offset, index = placed

        def on_done() -> None:
            try:
                with get_stream_context(stream):
                    probe.corruption.before_sum(t, r.sync_step, r.fragment, index)
                    r.sum.at(t, offset)
                    probe.corruption.after_sum(t, r.sync_step, r.participants)
                r.done += 1
            except Exception:  # the SUM is lost (r.done stays short), the contribution stands
                probe.failed(r, "sum", whole=False)

        return SketchedWork(issue(), on_done)


class NumericsProbe:
    """Per rank: builds each round's sketches from the hooks above; ``take()`` hands the step's
    ``RoundNumerics`` (and a ``HealNumerics``) to the event-log recorder."""

    def __init__(self, corruption: Any, fragment_sync_delay: int, quantize: bool, bucketize: bool) -> None:
        self.projector = Projector()
        self.corruption = corruption
        self.tau = fragment_sync_delay
        # the path a round took, as its hooks saw it: ``plain_path`` when the process group's
        # allreduce ran (also a --quantize round torchft ran without its quantized path), "quantized"
        # when torchft's quantized allreduce did (``ftrun.worker.sketch_quantized``)
        self.plain_path = "bucketized" if bucketize else "per-param"
        self.path = "quantized" if quantize else self.plain_path
        self.quantized_unsketched: str | None = None  # why the quantized allreduce is not sketched (set by install)
        self.round: Round | None = None  # the send being issued
        self.pending: dict[int, Round] = {}  # fragment -> its round in flight
        self.step = 0  # the training step now running (set by the loop)
        self.out: list[layout.RoundNumerics] = []
        self.heal_out: layout.HealNumerics | None = None
        self._warned = False
        self.outer = OuterSketcher(self.projector, corruption)

    def failed(self, r: Round, where: str, whole: bool = True) -> None:
        r.broken = r.broken or whole
        if not self._warned:
            self._warned = True
            log.exception("sketch of fragment %d (%s) failed; its rounds are not checked", r.fragment, where)

    def attach(self, diloco: Any, manager: Any, outer: list[torch.optim.Optimizer], heal: Any) -> None:
        frags = diloco_fragments(diloco)
        for f, frag in enumerate(frags):
            frag.prepare_sync = self._send(f, frags, frag.prepare_sync, manager, heal)
            frag.perform_sync = self._sync(f, frag, frag.perform_sync)
            if hasattr(frag, "save_parameters"):  # (torchft's fragments have it; a test's may not)
                frag.save_parameters = self._save(f, frag.save_parameters)
            outer[f].register_step_pre_hook(self._before_outer(f))
            outer[f].register_step_post_hook(self._after_outer(f))

    def _send(self, f: int, frags: list[Any], fn: Callable[[], None], manager: Any, heal: Any) -> Callable[[], None]:
        def prepare_sync() -> None:
            if getattr(heal, "healed_from_step", None) is not None and self.heal_out is None:
                self._fingerprint_heal(frags, manager.current_step())
                self.outer.forget()
            # start_quorum ran just before (DiLoCo's post-hook): the round's quorum is known
            r = Round(
                self.projector,
                f,
                manager.current_step(),
                quorum_id(manager),
                manager.num_participants(),
                bool(manager.is_participating()),
                self.step + self.tau,
                self.path,
            )
            r.unsketched = self.quantized_unsketched if self.path == "quantized" else None
            r.outer = self.outer.parts(f)
            try:
                self.outer.at_send(frags[f], r.outer, r.participating)
            except Exception:
                self.failed(r, "original/local", whole=False)
            self.round = r
            try:
                fn()
            finally:
                self.round = None
            self.pending[f] = r
            on_cpu = r.device == "cpu"
            # on a GPU, materialising now would wait for the collectives queued behind the
            # sketches on DiLoCo's stream: the send's part is written at the sync instead
            if on_cpu:
                self._emit_send(r)

        return prepare_sync

    def _emit_send(self, r: Round) -> None:
        if not r.broken and not r.sent:
            r.sent = True
            o = r.outer
            self.out.append(
                r.part(
                    "send",
                    contribution=r.contribution.sketch(),
                    original=o.original if o is not None else None,
                    local=o.local if o is not None else None,
                )
            )

    def _fingerprint_heal(self, frags: list[Any], manager_step: int) -> None:
        try:
            self.heal_out = layout.HealNumerics(manager_step, [fingerprint(f.original_parameters) for f in frags])
        except Exception:
            log.exception("fingerprint of the healed parameters failed")

    def attach_sums(self, diloco: Any) -> None:
        """Hook each fragment's ``perform_sync`` innermost, before anything else wraps it (the event
        log's timings, which count the SUMs' sketch as part of the sync's wait, as it is)."""
        for f, frag in enumerate(diloco_fragments(diloco)):
            frag.perform_sync = self.sums_first(f, frag.perform_sync)

    def sums_first(self, f: int, fn: Callable[[], bool]) -> Callable[[], bool]:
        """``perform_sync`` that first sketches the SUMs of fragment ``f``'s held collectives.

        Its wait for them (``_wait_held``) is no earlier than torchft's own: ``perform_sync``'s
        first statement waits for every Work of the round, and only the SUMs' sketch runs between
        this wait and it, so the training thread blocks for the same collectives at the same
        moment; only the span differs. Hence ``SKETCH_WAIT`` around it: the trace analysis counts it as exposed
        with the rest of the sync's wait (``ftrun.check.comm``), as the event log always did. The
        alternative, sketching each SUM in its collective's completion path (``SketchedWork``, as
        on a GPU), needs a Work wrapper and a callback per tensor (~0.45 ms a sync on the CPU) for
        no change in when the thread blocks: the span is the simpler correct fix."""

        def perform_sync() -> bool:
            r = self.pending.get(f)
            if r is not None and r.held:
                with torch.profiler.record_function(SKETCH_WAIT):
                    held = self._wait_held(r)
                if held is not None:
                    self._sketch_held(r, held)
            return fn()

        return perform_sync

    def _wait_held(self, r: Round) -> list[tuple[torch.Tensor, int, int, dist._Work]] | None:
        """Wait for each held Work (what torchft's wait calls first: a collective that failed raises
        there, and again in torchft's wait, which handles it); None when one failed (no SUM: ``done``
        stays short)."""
        held, r.held = r.held, []
        try:
            for _, _, _, work in held:
                work.wait()
        except Exception:
            return None
        return held

    def _sketch_held(self, r: Round, held: list[tuple[torch.Tensor, int, int, dist._Work]]) -> None:
        """Sketch the waited-for SUMs in place, in one Builder, before torchft's wait chains its divide."""
        try:
            b = Builder(self.projector, norm=False, copy=False)  # sketched below, before anything changes them
            for t, offset, index, _ in held:
                self.corruption.before_sum(t, r.sync_step, r.fragment, index)
                b.at(t, offset)
            r.sum_sketch = b.sketch(r.contribution.numel)
            for t, _, _, _ in held:
                self.corruption.after_sum(t, r.sync_step, r.participants)
            r.done += len(held)
        except Exception:  # the SUM is lost (r.done stays short), the contribution stands
            self.failed(r, "sum", whole=False)

    def _sync(self, f: int, frag: Any, fn: Callable[[], bool]) -> Callable[[], bool]:
        def perform_sync() -> bool:
            r0 = self.pending.get(f)
            if r0 is not None and r0.outer is not None and not r0.broken:
                try:
                    self.outer.before_sync(frag, r0.outer, r0.sync_step)
                except Exception:
                    self.failed(r0, "local at the sync", whole=False)
            ok = fn()
            r = self.pending.pop(f, None)
            step = None
            if r is not None and r.outer is not None:
                try:
                    step = self.outer.after_sync(frag, r.outer, ok, r.average is not None and not r.broken)
                except Exception:
                    self.failed(r, "merged", whole=False)
            if r is not None:
                self._emit_send(r)
                if not r.broken:
                    complete = r.issued > 0 and r.done == r.issued
                    if complete and r.sum_sketch is None:
                        r.sum_sketch = r.sum.sketch(r.contribution.numel)
                    self.out.append(
                        r.part(
                            "sync",
                            sum=r.sum_sketch if complete else None,
                            average=r.average if ok else None,
                            outer=step,
                        )
                    )
            return ok

        return perform_sync

    def _params(self, opt: torch.optim.Optimizer) -> list[torch.Tensor]:
        return [p for g in opt.param_groups for p in g["params"]]

    def _before_outer(self, f: int) -> Callable[..., None]:
        def hook(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
            r = self.pending.get(f)
            if r is None or r.broken:
                return
            try:
                grads = [p.grad for p in self._params(opt) if p.grad is not None]
                self.corruption.before_outer_step(grads, r.sync_step)
                # its tolerance uses the SUM's norm; sketched at once, before the step changes p.grad
                b = Builder(self.projector, norm=False, copy=False)
                for g in grads:
                    b.add(g)
                r.average = b.sketch()
            except Exception:
                self.failed(r, "average")
            if r.outer is not None:
                try:
                    self.outer.before_step(opt, r.outer, r.sync_step)
                except Exception:
                    self.failed(r, "outer step", whole=False)

        return hook

    def _save(self, f: int, fn: Callable[[], None]) -> Callable[[], None]:
        """torchft's ``save_parameters`` of fragment ``f``, skipped by ``--corrupt-sync R@S:stale``."""

        def save_parameters() -> None:
            r = self.pending.get(f)
            if r is not None and self.corruption.skip_save(r.sync_step):
                return
            fn()

        return save_parameters

    def _after_outer(self, f: int) -> Callable[..., None]:
        def hook(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
            r = self.pending.get(f)
            if r is None or r.broken or r.outer is None:
                return
            try:
                self.outer.after_step(opt, r.outer)
            except Exception:
                self.failed(r, "outer step", whole=False)

        return hook

    def take(self) -> tuple[list[layout.RoundNumerics], layout.HealNumerics | None]:
        out, heal = self.out, self.heal_out
        self.out, self.heal_out = [], None
        return out, heal
