"""Predicted goodput under a rate of faults (``ftrun plan --mtbf``). Pure, torch-free.

R replica groups train; faults arrive over the whole run with mean time between them MTBF
seconds (``--chaos KIND:MTBF``'s rate: one group hit per fault). Each fault costs, in
group-seconds of useful work:

* the hit group's **recovery**: from the fault to its first commit (``recovery_s``: measured by
  the recovery breakdown, ``ftrun.check.recovery``), during which it commits nothing;
* its **uncommitted work**: a group's step is useful when its next sync commits
  (``ftrun.check.goodput``); it syncs a fragment every H/F steps, so a fault at a random moment
  loses on average half of that, H/(2F) steps of ``step_s`` each;
* the survivors' **stall**: each of the R - 1 others waits ``stall_s`` (what torchft's
  detection holds them in a quorum or a sync: a collective with the dead group in it waits for
  its timeout; measured as the recovery breakdown's detect interval, 0 unless measured).

Goodput retained = 1 - cost / (R x MTBF), at least 0: the share of the fault-free run's useful
group-steps per second a run under that rate keeps. It assumes each group computes at its own
pace whether or not the others run (a group on its own devices); where the groups share CPUs,
the survivors of a fault speed up and the run keeps more than predicted. Hangs are not
modelled (a stall's cost depends on where it falls relative to the syncs).
"""

from __future__ import annotations

import msgspec


class GoodputInputs(msgspec.Struct, frozen=True):
    """What the prediction needs (module docstring); ``step_s``: one group's step time, fault-free."""

    replicas: int
    mtbf_s: float
    recovery_s: float
    step_s: float
    sync_window: int  # H / F: steps between two of a group's commits
    stall_s: float = 0.0


class GoodputPrediction(msgspec.Struct, frozen=True):
    """``retained``: the predicted share of the twin's goodput; ``cost_s``: useful group-seconds
    one fault costs, split in ``recovery_s``, ``uncommitted_s`` and ``stall_s`` (all groups')."""

    retained: float
    cost_s: float
    recovery_s: float
    uncommitted_s: float
    stall_s: float


def predict_goodput(x: GoodputInputs) -> GoodputPrediction:
    """The module docstring's model; ``ValueError`` for inputs it cannot take."""
    if x.replicas < 1 or x.mtbf_s <= 0 or x.recovery_s < 0 or x.step_s < 0 or x.sync_window < 1 or x.stall_s < 0:
        raise ValueError(f"goodput model: inputs out of range: {x}")
    uncommitted = x.sync_window / 2 * x.step_s
    stall = (x.replicas - 1) * x.stall_s
    cost = x.recovery_s + uncommitted + stall
    retained = max(0.0, 1.0 - cost / (x.replicas * x.mtbf_s))
    return GoodputPrediction(
        retained=retained, cost_s=cost, recovery_s=x.recovery_s, uncommitted_s=uncommitted, stall_s=stall
    )


def relative_error(predicted: float, measured: float) -> float | None:
    """|predicted - measured| / measured (None: nothing measured)."""
    return abs(predicted - measured) / measured if measured > 0 else None
