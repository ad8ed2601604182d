"""Predicted recovery of one killed replica group, by phase (``ftrun.check.recovery``'s phases).
Pure, torch-free.

What can be modelled, and how:

* **detect** (the fault -> the survivors' first quorum without the group): torchft's lighthouse
  keeps a group in the quorum until its heartbeats have stopped for ``heartbeat_timeout_s``
  and looks again every ``quorum_tick_s`` (ftrun's lighthouse: 100 ms), so a survivor's quorum
  request returns at the later of (its request: the next send's quorum, one step's compute
  after that step starts) and (the timeout + on average half a tick), plus the held round trip.
* **heal** (the relaunched group's ``recv_checkpoint``): torchft's ``HTTPTransport``
  (``num_chunks=0``; torchft/checkpointing/http_transport.py) serves the Manager's
  ``_manager_state_dict()`` — ``{"user": {every registered state dict}, "torchft": {step,
  batches_committed}}`` — as one streamed ``torch.save``-style payload. Registered here: ftrun's
  ``HealState`` (``"default"``: the model's ``state_dict()``, the inner AdamW's ``state_dict()``
  — ``exp_avg`` and ``exp_avg_sq`` per parameter plus a float32 ``step`` tensor each — and the
  training step), and each DiLoCo fragment's (``StreamingDiLoCoFragment_i``:
  ``original_parameters``, the global copy of its parameters, and the outer SGD's
  ``state_dict()``, a ``momentum_buffer`` per parameter once the fragment has stepped with
  momentum > 0). So the tensor bytes are 4 (5 with outer momentum) x the parameters' bytes +
  4 bytes per parameter tensor (``heal_bytes``; framing and the few ints excluded). With
  ``--link`` the transfer is held by ``linkcost``'s ``recv`` of those bytes (``ftrun.worker.lifecycle``:
  it completes at the later of the real HTTP fetch and that cost); without a link the loopback
  fetch is not predicted.
* **catch-up** (heal's end -> the group's first commit): the heal happens inside the quorum of
  a send; the group then runs the rest of that send (``send_s``), tau more steps, and the sync
  of that fragment, which waits for whatever of its allreduce the tau steps did not hide and
  runs its own work (``sync_work_s``; ``ftrun.plan``).
* **relaunch**, **join**, **reconfigure**: a process start, imports, torchft's rendezvous and
  process-group configure on this machine — not modelled. They are inputs measured by a kill
  run (``ftrun plan --from RUN``), else "not predicted"; never invented.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ftrun import linkcost
from ftrun.schedule import Schedule

MEASURED_ONLY = ("relaunch", "join", "reconfigure")
STATE_TENSOR_BYTES = 4  # ftrun's model, optimizers and DiLoCo copies are float32
ADAMW_STEP_BYTES = 4  # AdamW keeps a float32 scalar ``step`` tensor per parameter
DEFAULT_QUORUM_TICK_S = 0.1  # ftrun's lighthouse (ftrun.launch.groups: --quorum_tick_ms 100)


def heal_bytes(param_bytes: int, param_tensors: int, outer_momentum: bool) -> int:
    """Tensor bytes torchft's checkpoint transport sends to a healing group (module docstring):
    model + AdamW's two moments + DiLoCo's global copy (+ the outer momentum) + AdamW's steps."""
    copies = 4 + (1 if outer_momentum else 0)
    return copies * param_bytes + ADAMW_STEP_BYTES * param_tensors


@dataclass(frozen=True)
class RecoveryInputs:
    """What the recovery model needs (None / empty where nothing says)."""

    heartbeat_timeout_s: float
    state_bytes: int  # what the heal transfers (``heal_bytes``)
    schedule: Schedule
    step_s: float
    fragment_bytes: tuple[int, ...]
    replicas: int
    send_s: float = 0.0
    sync_work_s: float = 0.0
    overlap_slowdown: float = 1.0
    quorum_tick_s: float = DEFAULT_QUORUM_TICK_S
    rpc_s: float = 0.0
    kill_step: int | None = None
    measured: dict[str, float] = field(default_factory=dict)  # relaunch / join / reconfigure from a kill run
    measured_from: str | None = None


@dataclass(frozen=True)
class RecoveryPrediction:
    phases: dict[str, float | None]  # PHASES -> seconds (None: not predicted)
    how: dict[str, str]  # phase -> how it was predicted / why not
    heal_bytes: int
    total_s: float | None  # the group's chain (relaunch .. catch-up); None when a phase of it is not known


def _next_send(schedule: Schedule, step: int) -> int:
    """The first send step at or after ``step`` (the kill fires at a step's start)."""
    s = max(1, step)
    while schedule.local_step(s) != schedule.window - schedule.fragment_sync_delay:
        s += 1
    return s


def predict_recovery(x: RecoveryInputs, bandwidth_bps: float | None, latency_s: float) -> RecoveryPrediction:
    """Each phase's predicted seconds on a link (``bandwidth_bps`` None: no emulated link)."""
    sched = x.schedule
    phases: dict[str, float | None] = {}
    how: dict[str, str] = {}
    hold = linkcost.control_s("quorum", latency_s)

    timeout = x.heartbeat_timeout_s + x.quorum_tick_s / 2
    if x.kill_step is not None:
        ask = (_next_send(sched, x.kill_step) - x.kill_step + 1) * x.step_s
        how["detect"] = (
            f"later of the survivors' next quorum request ({ask:.2f} s) and the heartbeat timeout "
            f"{x.heartbeat_timeout_s:g} s + half a {x.quorum_tick_s * 1e3:g} ms lighthouse tick, + the held round trip"
        )
    else:
        ask = 0.0
        how["detect"] = (
            f"heartbeat timeout {x.heartbeat_timeout_s:g} s + half a {x.quorum_tick_s * 1e3:g} ms tick "
            "+ the held round trip"
        )
    phases["detect"] = max(ask, timeout) + hold + x.rpc_s

    for k in MEASURED_ONLY:
        if k in x.measured:
            phases[k] = x.measured[k]
            how[k] = f"measured in {x.measured_from} (an input, not modelled)"
        else:
            phases[k] = None
            how[k] = "not predicted (a process start / torchft rendezvous on this machine: give --from a kill run)"

    if bandwidth_bps is not None:
        phases["heal"] = linkcost.collective_s("recv", x.state_bytes, 2, bandwidth_bps, latency_s)
        how["heal"] = (
            f"{x.state_bytes:,} B of model + optimizer state (torchft's HTTP transport) over the link (linkcost recv)"
        )
    else:
        phases["heal"] = None
        how["heal"] = f"not predicted without an emulated link ({x.state_bytes:,} B over loopback HTTP: not modelled)"

    # catch-up: the rest of the send, tau steps, and the sync's wait and own work
    tau = sched.fragment_sync_delay
    frag_bytes = max(x.fragment_bytes) if x.fragment_bytes else 0
    # the tau - 1 steps between the send and the sync compute beside the allreduce (``ftrun.plan``)
    steps = x.step_s * (max(0, tau - 1) * x.overlap_slowdown + min(1, tau))
    if bandwidth_bps is not None and x.replicas > 1:
        data = linkcost.collective_s("allreduce", frag_bytes, x.replicas, bandwidth_bps, latency_s)
    else:
        data = 0.0
    phases["catch_up"] = x.send_s + steps + max(0.0, data - x.send_s - steps) + x.sync_work_s
    how["catch_up"] = (
        f"the send's rest {x.send_s * 1e3:.0f} ms + tau={tau} steps of {x.step_s * 1e3:.0f} ms + "
        f"the sync's wait for its fragment's allreduce and its own work"
    )
    chain = [phases[k] for k in ("relaunch", "join", "reconfigure", "heal", "catch_up")]
    known = [v for v in chain if v is not None]
    total = sum(known) if len(known) == len(chain) else None
    return RecoveryPrediction(phases, how, x.state_bytes, total)


def within(pred: float | None, meas: float | None, tolerance: float, floor_s: float) -> bool | None:
    """A predicted phase against its measurement: within ``tolerance`` of it or ``floor_s``."""
    if pred is None or meas is None or not math.isfinite(meas):
        return None
    return abs(pred - meas) <= max(floor_s, tolerance * abs(meas))
