"""What-if model of one replica's streaming-DiLoCo timeline on an emulated link. Pure, torch-free.

The timeline (torchft 0.2's schedule, ``ftrun.schedule``; every replica alike; every commit
succeeds, so fragment ``cycle % F`` is sent in each cycle):

* every training step computes for ``step_s`` (everything that is not waiting on the link:
  forward, backward, the inner step, the send's and the sync's own CPU work); a step between a
  send and its sync, computing while the fragment's collectives are in flight, computes for
  ``step_s x overlap_slowdown`` (they share the machine: ``ftrun.check.throughput``);
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

What a quorum waits for (torchft's lighthouse answers when every replica group has asked): the
**slower groups' arrival**, then the real RPC on top of the held round trips. Arrivals drift apart
between the points that align the groups (a quorum; a sync that blocks every group on the same
allreduce): each group's steps take ``step_s`` plus its own ``bias_s`` on average, plus
independent per-step noise of standard deviation ``jitter_s``; and a group can stall outside its
steps at known places (``stalls``: the start, the profiler writing its trace). A quorum after n
such steps waits, on average over the groups, E[max_r A_r] - mean_r E[A_r] with A_r ~
N(n bias_r + stalls_r, n jitter^2): the slowest group's lead over the mean group. A sync
waits, on average over the groups, E[max(0, done - A_r)]: a group that got there early waits
for its data longer. (With jitter, utilisation can dip a little just where a faster link stops
the syncs from blocking, since those no longer align the groups; the bandwidth and tau
searches below treat utilisation as monotone all the same.)

Not modelled (the measured runs contain them; ``ftrun plan --check`` shows how much they
matter): the real collectives on loopback (their own CPU cost, under load), process-group
reconfiguration, heals, failed commits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ftrun import linkcost
from ftrun.model_desc import even_split
from ftrun.schedule import Schedule

# Without a step count: one round of H steps. Every round repeats the same timeline (each sync
# drains its fragment's allreduce before the next send), so one round is the steady state.
DEFAULT_ROUNDS = 1


@dataclass(frozen=True)
class Workload:
    """What one replica computes and sends: compute per step, bytes per fragment, R replicas.

    How the R groups drift apart between alignments (module docstring): ``bias_s`` (per group:
    its mean step minus ``step_s``; empty = all alike), ``jitter_s`` (per-step standard deviation
    of each group's step, independent across groups), ``stalls`` ((step, per-group seconds spent
    outside the step bodies before that step, relative to the groups' mean), ...), and
    ``rpc_s``: the lighthouse's own reply time on top of the held round trips.
    ``overlap_slowdown``: how much longer a step between a send and its sync computes (1 = not at all).
    """

    step_s: float
    fragment_bytes: tuple[int, ...]
    replicas: int
    bias_s: tuple[float, ...] = ()
    jitter_s: float = 0.0
    stalls: tuple[tuple[int, tuple[float, ...]], ...] = ()
    rpc_s: float = 0.0
    overlap_slowdown: float = 1.0

    @property
    def model_bytes(self) -> int:
        return sum(self.fragment_bytes)

    def split(self, fragments: int) -> Workload:
        """The same model in ``fragments`` fragments: its own split when F matches, else even parts."""
        if fragments == len(self.fragment_bytes):
            return self
        return replace(self, fragment_bytes=even_split(self.model_bytes, fragments))

    def with_replicas(self, replicas: int) -> Workload:
        """The same workload on ``replicas`` groups (a per-group bias or stall only fits its own R)."""
        if replicas == self.replicas:
            return self
        return replace(self, replicas=replicas, bias_s=(), stalls=())


def expected_max(means: list[float], sd: float) -> float:
    """E[max_r X_r] for independent X_r ~ N(means[r], sd^2) (numerically; exact for sd = 0)."""
    if len(means) == 1 or sd <= 0.0:
        return max(means)
    lo, hi = min(means) - 8.0 * sd, max(means) + 8.0 * sd
    n = 400
    h = (hi - lo) / n
    # E[X] = hi - integral_lo^hi F(x) dx, F = prod of the normal CDFs; trapezoid rule
    def cdf(x: float) -> float:
        p = 1.0
        for m in means:
            p *= 0.5 * (1.0 + math.erf((x - m) / (sd * math.sqrt(2.0))))
        return p

    area = 0.5 * (cdf(lo) + cdf(hi)) + sum(cdf(lo + i * h) for i in range(1, n))
    return hi - area * h


class _Drift:
    """How far each replica group has drifted from the mean group since the last alignment."""

    def __init__(self, work: Workload) -> None:
        r = work.replicas
        self.bias = list(work.bias_s) if len(work.bias_s) == r else [0.0] * r
        self.stalls = {step: list(v) for step, v in work.stalls if len(v) == r}
        self.jitter = work.jitter_s
        self.align()

    def align(self) -> None:
        self.offsets = [0.0] * len(self.bias)
        self.steps = 0

    def step(self, step: int) -> None:
        extra = self.stalls.get(step)
        for i, b in enumerate(self.bias):
            self.offsets[i] += b + (extra[i] if extra else 0.0)
        self.steps += 1

    def wait(self) -> float:
        """The mean group's wait for the slowest one, at a quorum now."""
        mean = sum(self.offsets) / len(self.offsets)
        return expected_max(self.offsets, self.jitter * math.sqrt(self.steps)) - mean

    def blocked(self, ahead: float) -> float:
        """The groups' mean wait for data done ``ahead`` seconds after the mean group arrives:
        a group that got here early waits longer, one that is late may not wait at all."""
        sd = self.jitter * math.sqrt(self.steps)
        return sum(expected_shortfall(ahead - o, sd) for o in self.offsets) / len(self.offsets)


def expected_shortfall(mean: float, sd: float) -> float:
    """E[max(0, X)] for X ~ N(mean, sd^2)."""
    if sd <= 0.0:
        return max(0.0, mean)
    z = mean / sd
    return mean * 0.5 * (1.0 + math.erf(z / math.sqrt(2.0))) + sd * math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)


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
    drift = _Drift(work)
    pending: dict[int, tuple[float, float, float]] = {}  # fragment -> (issued, done, bits)
    compute = 0.0
    for step in range(1, steps + 1):
        local = schedule.local_step(step)
        step_s = work.step_s * (work.overlap_slowdown if w - tau < local < w else 1.0)
        t += step_s
        compute += step_s
        drift.step(step)
        frag = schedule.cycle_of(step) % nfrag
        if local == w - tau:  # send: the quorum (the slowest group, the RPC, the held round trips), then the allreduce
            q = drift.wait() + work.rpc_s + linkcost.control_s("quorum", latency_s)
            drift.align()
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
            blocked = drift.blocked(done - t) if work.replicas > 1 else max(0.0, done - t)
            if done > t and work.replicas > 1:  # every group leaves the same allreduce together
                drift.align()
            t += blocked
            data += blocked
            if t > issued:
                peak = max(peak, sent_bits / (t - issued))
            c = linkcost.control_s("should_commit", latency_s)
            t += c
            control += c
            comm += c
            syncs += 1
    return Prediction(steps, syncs, compute, data, control, comm, bits, peak, t)


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


def lowest_bandwidth(ok, lo_bps: float, hi_bps: float) -> float | None:
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
    return lowest_bandwidth(lambda bw: simulate(work, schedule, bw, latency_s, steps).utilisation >= target, lo_bps, hi_bps)


def data_hidden_bandwidth(work: Workload, schedule: Schedule, latency_s: float,
                          lo_bps: float, hi_bps: float, steps: int | None = None) -> float | None:
    """The lowest bandwidth in [lo, hi] (to 1%) at which no sync waits for its data: every
    allreduce done within tau steps. None when none is (always for tau = 0 with R > 1)."""
    return lowest_bandwidth(lambda bw: simulate(work, schedule, bw, latency_s, steps).exposed_data_s == 0.0, lo_bps, hi_bps)


# Data-parallel training (the paper's baseline): every step all-reduces the whole model's
# gradients. Backward is 2/3 of a step's FLOPs (twice the forward), and gradients become ready
# layer by layer during it, so the allreduce can start once the forward is done and overlap
# the backward; the step waits for what is left at its end. No quorum per step (torchft's
# async quorum overlaps the forward).
BACKWARD_SHARE = 2.0 / 3.0


def simulate_data_parallel(work: Workload, grad_bytes: int, bandwidth_bps: float, latency_s: float,
                           steps: int = 1) -> Prediction:
    """Data-parallel: each step's gradient allreduce of ``grad_bytes`` overlapping its backward pass."""
    t = free_at = data = bits = peak = comm = 0.0
    for _ in range(steps):
        issued = t + (1.0 - BACKWARD_SHARE) * work.step_s
        t += work.step_s
        free_at, done = linkcost.enqueue(free_at, issued, "allreduce", grad_bytes, work.replicas, bandwidth_bps, latency_s)
        sent_bits = linkcost.wire("allreduce", grad_bytes, work.replicas)[1] * 8.0
        blocked = max(0.0, done - t)
        t += blocked
        data += blocked
        comm += done - issued
        bits += sent_bits
        if t > issued:
            peak = max(peak, sent_bits / (t - issued))
    return Prediction(steps, steps, steps * work.step_s, data, 0.0, comm, bits, peak, t)


def data_parallel_hiding_bandwidth(work: Workload, grad_bytes: int, latency_s: float, target: float,
                                   lo_bps: float, hi_bps: float) -> float | None:
    """The lowest bandwidth in [lo, hi] (to 1%) at which data-parallel utilisation reaches ``target``."""
    return lowest_bandwidth(lambda bw: simulate_data_parallel(work, grad_bytes, bw, latency_s).utilisation >= target, lo_bps, hi_bps)


def data_parallel_hidden_bandwidth(work: Workload, grad_bytes: int, latency_s: float, lo_bps: float, hi_bps: float) -> float | None:
    """The lowest bandwidth in [lo, hi] (to 1%) at which every gradient allreduce ends within its backward pass."""
    return lowest_bandwidth(lambda bw: simulate_data_parallel(work, grad_bytes, bw, latency_s).exposed_s == 0.0, lo_bps, hi_bps)
