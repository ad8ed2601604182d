"""What-if model of one replica's streaming-DiLoCo timeline on an emulated link. Pure, torch-free.

The timeline (torchft 0.2's schedule, ``ftrun.schedule``; every replica alike; every commit
succeeds, so fragment ``cycle % F`` is sent in each cycle):

* every training step computes for ``step_s`` (everything that is not waiting on the link:
  forward, backward, the inner step, the send's and the sync's own CPU work);
* a **send** (after local step w - tau): torchft's ``start_quorum`` is held by its round trips
  on the link (``linkcost.control_s("quorum")``: the emulator holds it, the training thread
  waits for it), then the fragment's pseudo-gradients are allreduced across the R replica
  groups. They go on the replica's one uplink, queued behind whatever is still on it
  (``linkcost.enqueue``: the emulator's rule). torchft issues one allreduce per parameter, back
  to back; on a queued link the last of them finishes exactly when one allreduce of the whole
  fragment would, so a send is modelled as one allreduce of the fragment's bytes;
* a **sync** (after local step w): the training thread blocks until the fragment's allreduce is
  done — the exposed data communication — then ``should_commit``, which crosses no inter-group
  link (``linkcost.control_s("should_commit")`` = 0: a vote inside one replica group).

So a sync exposes whatever of its fragment's communication has not finished tau steps of
compute after the send. In torchft's schedule a fragment's sync always precedes the next send,
so two fragments' sends never share the link; the queue still decides when a send finishes.

Not modelled (the measured runs contain them; ``ftrun plan --check`` shows how much they
matter): waiting for the slowest replica (at the quorum and inside the real collective), the
real RPCs and collectives on loopback, process-group reconfiguration, heals, failed commits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ftrun import linkcost
from ftrun.schedule import Schedule

# Without a step count: one round of H steps. Every round repeats the same timeline (each sync
# drains its fragment's allreduce before the next send), so one round is the steady state.
DEFAULT_ROUNDS = 1


@dataclass(frozen=True)
class Workload:
    """What one replica computes and sends: compute per step, bytes per fragment, R replicas."""

    step_s: float
    fragment_bytes: tuple[int, ...]
    replicas: int

    @property
    def model_bytes(self) -> int:
        return sum(self.fragment_bytes)

    def split(self, fragments: int) -> Workload:
        """The same model in ``fragments`` fragments: its own split when F matches, else even parts."""
        if fragments == len(self.fragment_bytes):
            return self
        total = self.model_bytes
        parts = tuple(total // fragments + (1 if i < total % fragments else 0) for i in range(fragments))
        return Workload(self.step_s, parts, self.replicas)


@dataclass(frozen=True)
class Prediction:
    """One configuration's predicted timeline, summed over ``steps`` training steps."""

    steps: int
    syncs: int
    compute_s: float
    exposed_data_s: float
    exposed_control_s: float
    comm_s: float  # every send's issue-to-done time, plus the held control round trips
    bits_on_wire: float  # sent by this replica
    peak_bandwidth_bps: float  # the highest of one send's bits over its issue-to-sync time
    wall_s: float

    @property
    def exposed_s(self) -> float:
        return self.exposed_data_s + self.exposed_control_s

    @property
    def utilisation(self) -> float:
        """Compute utilisation: compute time / wall time."""
        return self.compute_s / self.wall_s if self.wall_s else 1.0

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.wall_s if self.wall_s else math.inf

    @property
    def mean_bandwidth_bps(self) -> float:
        return self.bits_on_wire / self.wall_s if self.wall_s else 0.0

    def per_sync_ms(self, seconds: float) -> float:
        return seconds / self.syncs * 1e3 if self.syncs else 0.0

    def as_dict(self) -> dict:
        return {
            "steps": self.steps,
            "syncs": self.syncs,
            "exposed_ms_per_sync": self.per_sync_ms(self.exposed_s),
            "exposed_data_ms_per_sync": self.per_sync_ms(self.exposed_data_s),
            "exposed_control_ms_per_sync": self.per_sync_ms(self.exposed_control_s),
            "exposed_ms_per_step": self.exposed_s / self.steps * 1e3 if self.steps else 0.0,
            "compute_utilisation": self.utilisation,
            "steps_per_s": self.steps_per_s,
            "peak_bandwidth_bps": self.peak_bandwidth_bps,
            "mean_bandwidth_bps": self.mean_bandwidth_bps,
            "wall_s": self.wall_s,
        }


def simulate(work: Workload, schedule: Schedule, bandwidth_bps: float, latency_s: float, steps: int | None = None) -> Prediction:
    """Walk one replica's timeline for ``steps`` training steps (default ``DEFAULT_ROUNDS`` x H)."""
    if len(work.fragment_bytes) != schedule.fragments:
        work = work.split(schedule.fragments)
    steps = steps if steps is not None else DEFAULT_ROUNDS * schedule.sync_every
    w, tau, nfrag = schedule.window, schedule.fragment_sync_delay, schedule.fragments
    t = free_at = 0.0
    data = control = comm = bits = peak = 0.0
    syncs = 0
    pending: dict[int, tuple[float, float, float]] = {}  # fragment -> (issued, done, bits)
    for step in range(1, steps + 1):
        t += work.step_s
        local = schedule.local_step(step)
        frag = schedule.cycle_of(step) % nfrag
        if local == w - tau:  # send: the quorum, then the fragment's allreduce on the uplink
            q = linkcost.control_s("quorum", latency_s)
            t += q
            control += q
            comm += q
            nbytes = work.fragment_bytes[frag]
            free_at, done = linkcost.enqueue(free_at, t, "allreduce", nbytes, work.replicas, bandwidth_bps, latency_s)
            sent_bits = linkcost.wire("allreduce", nbytes, work.replicas)[1] * 8.0
            pending[frag] = (t, done, sent_bits)
            comm += done - t
            bits += sent_bits
        if local == w:  # sync: block for the rest of the fragment's allreduce, then should_commit
            issued, done, sent_bits = pending.pop(frag)
            blocked = max(0.0, done - t)
            t += blocked
            data += blocked
            if t > issued:
                peak = max(peak, sent_bits / (t - issued))
            c = linkcost.control_s("should_commit", latency_s)
            t += c
            control += c
            comm += c
            syncs += 1
    return Prediction(steps, syncs, steps * work.step_s, data, control, comm, bits, peak, t)


def plain(schedule: Schedule) -> Schedule:
    """Plain DiLoCo with the same H: one fragment, no delay."""
    return Schedule(1, schedule.sync_every, 0)


def smallest_tau(work: Workload, fragments: int, sync_every: int, bandwidth_bps: float, latency_s: float,
                 target: float, steps: int | None = None) -> int | None:
    """The smallest tau (< H/F) whose utilisation reaches ``target`` with F = ``fragments``; None if none does.

    Utilisation never falls as tau grows (the send moves earlier, the sync stays), so: bisection.
    """
    def ok(tau: int) -> bool:
        return simulate(work, Schedule(fragments, sync_every, tau), bandwidth_bps, latency_s, steps).utilisation >= target

    lo, hi = 0, sync_every // fragments - 1
    if not ok(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid + 1, hi)
    return lo


def smallest_fragments(work: Workload, sync_every: int, bandwidth_bps: float, latency_s: float,
                       target: float, steps: int | None = None) -> tuple[int, int] | None:
    """The smallest F (a divisor of H) for which some tau reaches ``target``, with that tau."""
    for f in (f for f in range(1, sync_every + 1) if sync_every % f == 0):
        tau = smallest_tau(work, f, sync_every, bandwidth_bps, latency_s, target, steps)
        if tau is not None:
            return f, tau
    return None


def _lowest(ok, lo_bps: float, hi_bps: float) -> float | None:
    """The lowest bandwidth in [lo, hi] (to 1%) where the monotone predicate ``ok`` holds."""
    if ok(lo_bps):
        return lo_bps
    if not ok(hi_bps):
        return None
    lo, hi = math.log(lo_bps), math.log(hi_bps)
    while hi - lo > math.log(1.01):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if ok(math.exp(mid)) else (mid, hi)
    return math.exp(hi)


def hiding_bandwidth(work: Workload, schedule: Schedule, latency_s: float, target: float,
                     lo_bps: float, hi_bps: float, steps: int | None = None) -> float | None:
    """The lowest bandwidth in [lo, hi] at which utilisation reaches ``target`` (to 1%).

    Utilisation never falls as bandwidth grows, so below the returned bandwidth the schedule
    stops hiding its communication. ``lo_bps`` when it already reaches the target there; None
    when not even ``hi_bps`` does.
    """
    return _lowest(lambda bw: simulate(work, schedule, bw, latency_s, steps).utilisation >= target, lo_bps, hi_bps)


def data_hidden_bandwidth(work: Workload, schedule: Schedule, latency_s: float,
                          lo_bps: float, hi_bps: float, steps: int | None = None) -> float | None:
    """The lowest bandwidth in [lo, hi] (to 1%) at which no sync waits for its data: every
    allreduce done within tau steps. None when none is (always for tau = 0 with R > 1)."""
    return _lowest(lambda bw: simulate(work, schedule, bw, latency_s, steps).exposed_data_s == 0.0, lo_bps, hi_bps)
