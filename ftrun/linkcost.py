"""What crossing an emulated link costs: one formula for the emulator, compare and planning. Torch-free.

The link: every replica group has its own uplink of ``bandwidth_bps`` (each direction) and
every message takes ``latency_s`` one way. A collective across R replica groups runs as the
textbook ring (what Gloo and NCCL do for large tensors), so each replica's cost is
``steps * latency + bytes_on_wire * 8 / bandwidth`` where, for a tensor of B bytes:

* allreduce (reduce-scatter + allgather): 2(R-1) steps, 2(R-1)/R * B bytes sent (and received);
* reduce_scatter (B = the input), allgather (B = the gathered output), alltoall (B = the input):
  R-1 steps, (R-1)/R * B bytes;
* broadcast (pipelined ring from the root): R-1 steps, B bytes;
* send / recv: 1 step, B bytes; barrier: an allreduce of 0 bytes.

With R = 1 nothing crosses the link: every collective costs 0.

Control plane (torchft's RPCs, as torchft 0.2.0 makes them with ``use_async_quorum=False``):
``CONTROL_ROUND_TRIPS`` says how many round trips (2 * latency each) cross the link between
replica groups. ``quorum``: each ``start_quorum`` asks the group's manager server, which asks
the lighthouse (one request, one reply). ``should_commit``: 0 — torchft's ``should_commit``
is a vote among the ranks of one replica group (its manager server), so it never crosses the
inter-group link ("different replica groups may return different values", manager.py).
A heal's checkpoint transfer (``ftrun.worker.lifecycle``) costs a ``recv`` of the state dict's
tensor bytes between two groups. Not emulated: the process-group rendezvous after a quorum change.
"""

from __future__ import annotations

COLLECTIVE_STEPS_BYTES = {
    # kind: (latency steps as a function of R, fraction of B on the wire as a function of R)
    "allreduce": (lambda r: 2 * (r - 1), lambda r: 2 * (r - 1) / r),
    "reduce_scatter": (lambda r: r - 1, lambda r: (r - 1) / r),
    "allgather": (lambda r: r - 1, lambda r: (r - 1) / r),
    "alltoall": (lambda r: r - 1, lambda r: (r - 1) / r),
    "broadcast": (lambda r: r - 1, lambda r: 1.0),
    "send": (lambda r: 1, lambda r: 1.0),
    "recv": (lambda r: 1, lambda r: 1.0),
    "barrier": (lambda r: 2 * (r - 1), lambda r: 0.0),
}

CONTROL_ROUND_TRIPS = {"quorum": 1, "should_commit": 0}


def wire(kind: str, nbytes: int, replicas: int) -> tuple[int, float]:
    """(latency steps, bytes on this replica's wire) of one collective of ``kind`` across ``replicas``."""
    if kind not in COLLECTIVE_STEPS_BYTES:
        raise ValueError(f"unknown collective kind {kind!r}")
    if replicas <= 1:
        return 0, 0.0
    steps, frac = COLLECTIVE_STEPS_BYTES[kind]
    return steps(replicas), frac(replicas) * nbytes


def collective_s(kind: str, nbytes: int, replicas: int, bandwidth_bps: float, latency_s: float) -> float:
    """Seconds one collective of ``nbytes`` takes on an idle link (module docstring)."""
    steps, on_wire = wire(kind, nbytes, replicas)
    return steps * latency_s + on_wire * 8.0 / bandwidth_bps


def enqueue(
    free_at: float, issued: float, kind: str, nbytes: int, replicas: int, bandwidth_bps: float, latency_s: float
) -> tuple[float, float]:
    """One collective on a replica's shared uplink: ``(link free at, collective done at)``.

    The wire time queues behind what is still on the link (``free_at``); the latency steps do
    not occupy it: done = max(free_at, issued) + wire + steps * latency. The emulator
    (``ftrun.worker.link``) and the planner (``ftrun.plan``) both use this rule.
    """
    steps, on_wire = wire(kind, nbytes, replicas)
    free_at = max(free_at, issued) + on_wire * 8.0 / bandwidth_bps
    return free_at, free_at + steps * latency_s


def control_s(rpc: str, latency_s: float) -> float:
    """Seconds one control RPC (``quorum``, ``should_commit``) spends crossing the link."""
    return CONTROL_ROUND_TRIPS[rpc] * 2.0 * latency_s


def plain_sync_s(model_bytes: int, replicas: int, bandwidth_bps: float, latency_s: float) -> float:
    """Plain DiLoCo's cost per sync on the link: one quorum + the full model's ring allreduce."""
    return (
        control_s("quorum", latency_s)
        + control_s("should_commit", latency_s)
        + collective_s("allreduce", model_bytes, replicas, bandwidth_bps, latency_s)
    )


def bandwidth_for(sync_s: float, model_bytes: int, replicas: int, latency_s: float) -> float:
    """The bandwidth at which ``plain_sync_s`` equals ``sync_s`` (inverse of it in bandwidth).

    ``ValueError`` when the latency terms alone already take ``sync_s`` or more.
    """
    fixed = plain_sync_s(0, replicas, 1.0, latency_s)
    _, on_wire = wire("allreduce", model_bytes, replicas)
    if sync_s <= fixed or on_wire <= 0:
        raise ValueError(f"a sync of {sync_s:.3g} s leaves no time for data after {fixed:.3g} s of latency")
    return on_wire * 8.0 / (sync_s - fixed)
