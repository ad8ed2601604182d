"""``ftrun plan``: the what-if model of streaming vs plain DiLoCo on a link, and what feeds it.

One concept per module:

- ``model``: the pure, torch-free timeline of one replica (``Workload``, ``simulate``,
  ``Prediction``; data-parallel beside it); ``search``: the smallest tau / F and the lowest
  bandwidth that reach a target over it; ``bounds``: the numbers a plan accepts;
- ``recovery`` and ``goodput``: the pure models of one killed group's recovery and of goodput
  under a rate of faults;
- ``measure``: what a run dir gives the model (``read_run``: the manifest, the event logs'
  arrivals, the traces' costs);
- ``options``: what ``ftrun plan`` can be asked (``PlanRequest``, its flags declared once);
  ``request``: a request assembled into the model's inputs and the predicted result;
  ``check``: ``plan --check`` of a compare or sweep dir; ``recovery_check``: of a ``--kill`` run
  dir; ``goodput_run``: goodput from a ``--chaos`` run and its check; ``tolerance``: how a
  prediction is judged against a measurement.

The package itself re-exports the pure model (``from ftrun.plan import simulate``), so importing
it stays torch-free and cheap; the modules that read run dirs are imported by name.
"""

from __future__ import annotations

from ftrun.plan.model import (
    BACKWARD_SHARE,
    DEFAULT_ROUNDS,
    Prediction,
    Workload,
    expected_max,
    expected_shortfall,
    plain,
    simulate,
    simulate_data_parallel,
)
from ftrun.plan.search import (
    data_hidden_bandwidth,
    data_parallel_hidden_bandwidth,
    data_parallel_hiding_bandwidth,
    hiding_bandwidth,
    lowest_bandwidth,
    smallest_fragment_sync_delay,
    smallest_fragments,
)

__all__ = [
    "BACKWARD_SHARE",
    "DEFAULT_ROUNDS",
    "Prediction",
    "Workload",
    "data_hidden_bandwidth",
    "data_parallel_hidden_bandwidth",
    "data_parallel_hiding_bandwidth",
    "expected_max",
    "expected_shortfall",
    "hiding_bandwidth",
    "lowest_bandwidth",
    "plain",
    "simulate",
    "simulate_data_parallel",
    "smallest_fragment_sync_delay",
    "smallest_fragments",
]
