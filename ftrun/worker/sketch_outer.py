"""Sketch the rest of torchft's outer step, so ``ftrun.check.numerics_outer`` can check it.

What torchft 0.2.0 does to a fragment between its send and its next send (``local_sgd.py``,
``_StreamingDiLoCoFragment``): at the send, ``prepare_sync`` computes the pseudo-gradient
``original_parameters - current`` (``_save_grads``); at the sync, ``perform_sync`` keeps a copy of
the current (local) parameters, restores the originals, and after ``should_commit``: sets ``p.grad``
to the average, steps the outer optimizer, ``save_parameters`` (the new originals = the globals
after the step), and ``_merge_parameters`` (``p.lerp_(local, fragment_update_alpha)``). Each of
these is linear in the tensors, so the projections of ``ftrun.worker.sketch`` check each stage:

* at the send (before torchft's ``prepare_sync``): ``local`` (the fragment's parameters), and
  ``original`` (``original_parameters``) only where the check cannot derive it: the contribution
  must be ``original - local`` and ``original`` the globals after this fragment's last commit, so
  where that commit's step is derivable (SGD, its average and momentum chain known) the check holds
  ``contribution + local`` against the derived globals instead, one read fewer. ``original`` is
  sketched at a chain's start (a fragment's first send in this process, after a heal, after a
  commit the check cannot derive), by a replica not participating (its contribution is zeros), and
  after ``ORIGINALS_EVERY`` commits derived in a row (the check bounds the unmeasured
  ||original|| through the chain, a bound that grows a little each derived round);
* the outer optimizer's step: its hyper-parameters read from ``param_groups`` in a step pre-hook
  (``OuterStep``). What the step read and wrote is not read again where the check can derive it,
  each read of the fragment being a cost every sync pays: the parameters before the step are
  ``original`` (``restore_parameters`` just copied it into them), the parameters after it are the
  next round's ``original`` (``save_parameters`` copies them there; a skipped copy is what the check
  catches), and the momentum buffers follow from the averages (torch's SGD: buffer = gradient on
  its first step, then momentum * buffer + (1 - dampening) * gradient). The buffers are sketched
  after the step only where that chain is unknown: the first step of a fragment this process
  takes with buffers it did not see made (loaded from a checkpoint, or after a heal);
* with ``fragment_update_alpha`` > 0 only: the parameters at the sync before torchft's
  ``perform_sync`` (the local ones it merges) and after it (merged). With 0 the merge leaves the
  globals (``lerp`` by 0), and nothing more is read.

Each sketch reads the fragment once (``Builder``): one per sync (``local``), three with alpha > 0,
one more where the originals' or the momentum's chain starts. A norm costs more than the sketch's fold (a
second pass over each block, ``ftrun.worker.sketch_projection``), so only the norms the check cannot
bound from others are measured: ``original``'s and ``local_sync``'s (and the momentum buffers');
``local`` is sketched without one (||local|| <= ||original|| + ||contribution||, the contribution
being checked against original - local) and so is ``merged`` (||merged|| <= (1 - alpha) ||globals||
+ alpha ||local_sync||, the merge being checked against that sum): ``ftrun.check.numerics_outer``
uses those bounds, larger than the norms they stand for only by the pseudo-gradient's size. The
``--corrupt-sync`` faults (``ftrun.worker.fault_injection.Corruption``) act here and in
``ftrun.worker.sketch``: ``sign`` negates the tensor handed to the collective, ``stale`` skips
``save_parameters``, ``lr`` steps with another lr, ``alpha`` merges with alpha 0.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch

from ftrun import layout
from ftrun.layout import LINEAR_OPTIMIZERS
from ftrun.torchft_compat import fragment_alpha, fragment_originals, fragment_params, set_fragment_alpha
from ftrun.worker.sketch_projection import Builder, Projector

log = logging.getLogger(__name__)

# a fragment's originals are sketched at least every this many commits: between two, the check
# bounds ||original|| by the last measured one plus each derived step's lr * ||update||
ORIGINALS_EVERY = 16


@dataclass
class OuterParts:
    """One round's outer-step sketches as they are taken (``OuterSketcher``)."""

    original: layout.Sketch | None = None
    local: layout.Sketch | None = None
    step: layout.OuterStep | None = None
    alpha: float | None = None
    local_sync: layout.Sketch | None = None
    lr_restore: list[tuple[dict, float]] = field(default_factory=list)
    fragment: int = 0
    need_buffer: bool = False  # sketch the momentum buffers after the step (their chain is unknown)
    alpha_restore: float | None = None


def _sketch(projector: Projector, tensors: list[torch.Tensor], norm: bool = True) -> layout.Sketch:
    """One read of ``tensors`` laid end to end (the fragment's flattened order, as the contribution);
    ``norm``: their norm too (module docstring: which the check bounds instead)."""
    b = Builder(projector, norm=norm, copy=False)  # sketched at once, before anything changes them
    for t in tensors:
        b.add(t.detach())
    return b.sketch()


def _params(opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for g in opt.param_groups for p in g["params"]]


def _hyper(opt: torch.optim.Optimizer, first_momentum: bool) -> layout.OuterStep:
    """The first param group's hyper-parameters (ftrun's outer optimizers have one group)."""
    g = opt.param_groups[0]
    return layout.OuterStep(
        optimizer=type(opt).__name__,
        lr=float(g.get("lr", 0.0)),
        momentum=float(g.get("momentum", 0.0) or 0.0),
        dampening=float(g.get("dampening", 0.0) or 0.0),
        nesterov=bool(g.get("nesterov", False)),
        weight_decay=float(g.get("weight_decay", 0.0) or 0.0),
        maximize=bool(g.get("maximize", False)),
        first_momentum=first_momentum,
    )


class OuterSketcher:
    """The outer-step sketches of one rank; ``ftrun.worker.sketch.NumericsProbe`` calls each hook
    with the round (``Round.outer``) it belongs to. A hook that fails leaves the part None (the
    check says "not checked") and never breaks training."""

    def __init__(self, projector: Projector, corruption: Any) -> None:
        self.projector = projector
        self.corruption = corruption
        self.chained: set[int] = set()  # fragments whose momentum buffers this process saw made or sketched
        # fragments whose next originals the check derives from their last commit, with the commits
        # since their originals were last sketched (module docstring)
        self.derivable: dict[int, int] = {}

    def parts(self, fragment: int) -> OuterParts:
        return OuterParts(fragment=fragment)

    def forget(self) -> None:
        """A heal loaded other parameters and optimizer state: every fragment's originals are
        sketched at its next send, its buffers at its next step."""
        self.chained.clear()
        self.derivable.clear()

    def at_send(self, frag: Any, parts: OuterParts, participating: bool) -> None:
        """Before torchft's ``prepare_sync``: the current parameters, and the originals where the
        check cannot derive them (module docstring)."""
        since = self.derivable.get(parts.fragment)
        if since is None or since >= ORIGINALS_EVERY or not participating:
            parts.original = _sketch(self.projector, fragment_originals(frag))
        parts.local = _sketch(self.projector, fragment_params(frag), norm=False)  # (bounded by the check)

    def before_sync(self, frag: Any, parts: OuterParts, sync_step: int | None) -> None:
        """Before torchft's ``perform_sync``: alpha, and with alpha > 0 the local parameters it
        will merge (its ``_save_local_parameters`` copies them first thing). The ``alpha`` fault."""
        parts.alpha = fragment_alpha(frag)
        if parts.alpha:
            parts.local_sync = _sketch(self.projector, fragment_params(frag))
            if self.corruption.ignore_alpha(sync_step):
                parts.alpha_restore = parts.alpha
                set_fragment_alpha(frag, 0.0)

    def after_sync(self, frag: Any, parts: OuterParts, ok: bool, average_known: bool) -> layout.OuterStep | None:
        """After torchft's ``perform_sync``: the record of the step, with the merged parameters;
        ``average_known``: the round's average was sketched (the check derives the globals from it)."""
        if parts.alpha_restore is not None:
            set_fragment_alpha(frag, parts.alpha_restore)
        step = parts.step
        if not ok or step is None:
            if ok:  # committed, its step not recorded: the next originals cannot be derived
                self.derivable.pop(parts.fragment, None)
            return None  # (a failed commit changes no originals: the chain stands)
        step.alpha = parts.alpha
        if parts.alpha and parts.local_sync is not None:  # (the globals it merged: the next original)
            step.local_sync = parts.local_sync
            step.merged = _sketch(self.projector, fragment_params(frag), norm=False)  # (bounded by the check)
        self._chain(parts, step, average_known)
        return step

    def _chain(self, parts: OuterParts, step: layout.OuterStep, average_known: bool) -> None:
        """After a commit: whether the check can derive its globals (a linear optimizer, the average
        and the momentum buffers known, and this round's originals sketched or derived themselves)."""
        f = parts.fragment
        known = parts.original is not None or f in self.derivable
        buffers = not parts.need_buffer or step.momentum_after is not None
        if step.optimizer in LINEAR_OPTIMIZERS and average_known and buffers and known:
            self.derivable[f] = 0 if parts.original is not None else self.derivable[f] + 1
        else:
            self.derivable.pop(f, None)

    def before_step(self, opt: torch.optim.Optimizer, parts: OuterParts, sync_step: int | None) -> None:
        """The outer optimizer's pre-hook: its hyper-parameters as configured, then the ``lr`` fault."""
        params = _params(opt)
        first = all(opt.state.get(p, {}).get("momentum_buffer") is None for p in params)
        parts.step = _hyper(opt, first)
        parts.need_buffer = bool(parts.step.momentum) and not first and parts.fragment not in self.chained
        factor = self.corruption.outer_lr_factor(sync_step)
        if factor is not None:
            for g in opt.param_groups:
                parts.lr_restore.append((g, g["lr"]))
                g["lr"] = g["lr"] * factor

    def after_step(self, opt: torch.optim.Optimizer, parts: OuterParts) -> None:
        """The outer optimizer's post-hook: the momentum buffers after its step where their chain is
        unknown (module docstring); from here on the check derives them."""
        for g, lr in parts.lr_restore:
            g["lr"] = lr
        parts.lr_restore = []
        if parts.step is None:
            return
        if parts.need_buffer:
            bufs = [opt.state.get(p, {}).get("momentum_buffer") for p in _params(opt)]
            if all(b is not None for b in bufs):
                parts.step.momentum_after = _sketch(self.projector, [b for b in bufs if b is not None])
        self.chained.add(parts.fragment)
