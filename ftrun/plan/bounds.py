"""The bounds of ``ftrun plan``'s what-if. Torch-free.

Contract: every number ``plan`` takes from a flag or derives from several (the FLOPs-based step,
the training's steps) is checked here before it is used: finite and within the bounds below,
else ``BadInput`` with one line naming the flags and the value. The walk costs about R x H work
per simulated round (a 10,000-group, H=20 plan: ~3 s; H=10,000 with 2 groups: ~5 s), so R, H
and their product are bounded where a plan still answers in seconds (``MAX_REPLICAS``: the
config's, one bound for train and plan).
"""

from __future__ import annotations

import math

from ftrun.config.parts import MAX_REPLICAS
from ftrun.errors import BadInput

MAX_SYNC_EVERY = 10_000  # H: steps per round the walk simulates
MAX_REPLICA_STEPS = 200_000  # R x H: what one simulated round costs
MAX_PARAMS = 1e15  # parameters: a model's bytes stay exact integers (below 2**53)
MIN_STEP_S, MAX_STEP_S = 1e-6, 86_400.0  # a compute step: 1 us .. 1 day
MAX_TRAIN_STEPS = 1e15  # --train-tokens / (R x --tokens-per-step)


def check_shape(replicas: int, sync_every: int, flag: str = "--replicas") -> None:
    """R and H (from flags or a run) within the walk's bounds (see the module contract)."""
    if not 1 <= replicas <= MAX_REPLICAS:
        raise BadInput(f"{flag} {replicas}: must be from 1 to {MAX_REPLICAS:,} (replica groups a plan walks)")
    if not 1 <= sync_every <= MAX_SYNC_EVERY:
        raise BadInput(
            f"--sync-every {sync_every}: must be from 1 to {MAX_SYNC_EVERY:,} (steps a plan walks per round)"
        )
    if replicas * sync_every > MAX_REPLICA_STEPS:
        raise BadInput(
            f"{flag} {replicas} x --sync-every {sync_every}: {replicas * sync_every:,} replica-steps per round, "
            f"more than a plan walks ({MAX_REPLICA_STEPS:,}); plan fewer groups or a shorter H"
        )


def check_params(params: float) -> None:
    if not (math.isfinite(params) and 1 <= params <= MAX_PARAMS):
        raise BadInput(f"--params {params:g}: must be from 1 to {MAX_PARAMS:g}")


def check_step(step_s: float, how: str) -> float:
    """The compute step (``how``: the flags or the formula it came from) within 1 us .. 1 day."""
    if not (math.isfinite(step_s) and MIN_STEP_S <= step_s <= MAX_STEP_S):
        raise BadInput(f"{how}: a step of {step_s * 1e3:g} ms is outside 1 us .. 1 day")
    return step_s


def check_train_steps(steps: float, how: str) -> float:
    if not (math.isfinite(steps) and 1 <= steps <= MAX_TRAIN_STEPS):
        raise BadInput(f"{how}: {steps:g} training steps is outside 1 .. {MAX_TRAIN_STEPS:g}")
    return steps
