"""The numerics sketches in the step logs (``EventRecord.numerics``/``heal_numerics``). Torch-free.

What torchft did to each fragment in each round, as linear sketches."""

from __future__ import annotations

from typing import Annotated

import msgspec

# What a ``Sketch`` is (``ftrun.worker.sketch`` computes it, ``ftrun.check.numerics`` budgets its
# error): SKETCH_K projections P[j, i] = W[j, i mod SKETCH_PERIOD], W = ±1 drawn from SKETCH_SEED;
# each tensor first summed in float32 over rows of SKETCH_STAGE columns, then in float64.
SKETCH_K = 4
SKETCH_PERIOD = 4093
SKETCH_STAGE = SKETCH_PERIOD * 32
SKETCH_SEED = 22
# outer optimizers whose step is linear in its state (torch's SGD, any hyper-parameters): the check
# derives their globals from the average, so the worker need not sketch the next round's originals
LINEAR_OPTIMIZERS = ("SGD",)


class Sketch(msgspec.Struct):
    """Linear sketch of one flattened fragment (``ftrun.worker.sketch``): ``proj`` = SKETCH_K fixed
    random projections in float64 (the same on every replica), ``norm`` = its L2 norm (None: not
    measured — the SUM's and the average's, to save a pass), ``numel`` elements, ``dtype`` of
    the tensors sketched."""

    # exactly SKETCH_K: a hand-edited line with another count is not a record (event_log says where)
    proj: Annotated[list[float], msgspec.Meta(min_length=SKETCH_K, max_length=SKETCH_K)]
    norm: float | None
    numel: int
    dtype: str
    stage_rows: int | None = None  # most float32 first-stage rows one column summed (0: none ran)


class OuterStep(msgspec.Struct):
    """The outer optimizer's step and torchft's merge at one committed sync
    (``ftrun.worker.sketch_outer``; checked by ``ftrun.check.numerics_outer``).

    ``optimizer``: its class name; ``lr`` .. ``maximize``: its first param group's hyper-parameters as
    read right before the step; ``first_momentum``: no momentum buffer before it (torch's SGD then sets
    buffer = gradient); ``momentum_after``: the momentum buffers after it (sketched only where the
    check cannot derive them from the averages: the first step with loaded buffers, or after a
    heal). The parameters after the step are not here: the check reads them as the next round's
    ``original`` of the same replica, where ``save_parameters`` stores them.
    ``alpha``: torchft's ``fragment_update_alpha`` (None: a torchft without it);
    ``local_sync``/``merged``: the parameters at the sync before torchft restored the globals, and
    after its merge (sketched only when alpha > 0: with 0 the merge leaves the globals)."""

    optimizer: str
    lr: float
    momentum: float = 0.0
    dampening: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0
    maximize: bool = False
    first_momentum: bool = False
    momentum_after: Sketch | None = None
    alpha: float | None = None
    local_sync: Sketch | None = None
    merged: Sketch | None = None


class RoundNumerics(msgspec.Struct):
    """What one rank's torchft did to one fragment in one round (send .. sync), as sketches.

    Written in two parts: at the send (``phase`` "send": ``contribution`` as the process group
    saw it, zeros when not participating; the quorum) and at the sync (``phase`` "sync": the
    process group's ``sum`` and the ``average`` the outer optimizer stepped on; absent when the
    commit failed or the collective never completed). The send also carries ``original`` and
    ``local`` (the fragment's saved globals and current parameters), the sync ``outer``
    (``OuterStep``: the outer step and the merge, a committed sync only).
    A round is named by (fragment, ``quorum_id``, ``manager_step`` at the send); ``sync_step``
    is the training step of its sync. ``path``: per-param | bucketized | quantized (the path
    torchft took, as the hooks saw it: a ``--quantize`` round torchft ran through the plain allreduce
    is per-param or bucketized); ``collectives``: collectives sketched; ``world``: the process
    group's size; ``unsketched``: why this round's collectives could not be sketched (the
    quantized path on a torchft whose ``allreduce_quantized`` ftrun cannot wrap).
    """

    phase: str
    fragment: int
    manager_step: int
    quorum_id: int | None
    sync_step: int | None = None
    participants: int | None = None
    participating: bool | None = None
    world: int | None = None
    path: str = "per-param"
    collectives: int = 0
    unsketched: str | None = None
    contribution: Sketch | None = None
    sum: Sketch | None = None
    average: Sketch | None = None
    # the send's torchft ``original_parameters`` and current parameters of the fragment: the
    # contribution must be their difference, ``original`` the last commit's globals (``OuterStep``).
    # ``original`` is sketched only where the check cannot derive it from the last commit
    # (``ftrun.worker.sketch_outer``: a chain's start, and after ``ORIGINALS_EVERY`` derived ones)
    original: Sketch | None = None
    local: Sketch | None = None
    outer: OuterStep | None = None  # the sync's outer step and merge (``ftrun.worker.sketch_outer``)


class HealNumerics(msgspec.Struct):
    """Every fragment's global parameters right after this rank healed (torchft's checkpoint
    transport) at ``manager_step``, as ``fingerprints`` (``EventRecord.fingerprint``'s hash, one
    per fragment): the source's after its last commit of each must be the same, bit for bit
    (``ftrun.check.numerics``)."""

    manager_step: int
    fingerprints: list[str] = []  # (an event log of an ftrun that sketched them instead: not checked)
