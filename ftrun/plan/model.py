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
for its data longer. A sync that blocks aligns the groups where the allreduce ends, not where
the step ends: each group still runs the rest of its sync alone (its own callbacks, should_commit,
the outer step), so the groups leave it ``sync_spread_s`` apart (a replay: each group's own,
``replay_sync``). A quorum that changes the membership (every run's first) also waits for the
process group's reconfiguration (``reconfigure``). (With jitter, utilisation can dip a little
just where a faster link stops the syncs from blocking, since those no longer align the groups;
the bandwidth and tau searches below treat utilisation as monotone all the same.)

How far the groups drift is measured, not assumed, where a run says (``drift_sd``: for each
number of steps n, the spread of a group's summed deviation over n consecutive steps): on a
loaded machine a slow spell lasts several steps, so the drift grows faster than sqrt(n) x jitter;
beyond the measured lags (and for a what-if with ``--step-jitter``) the steps are independent.

The costs the emulator does not replace (``ftrun.trace.sync_costs``): the send issues its
collectives while it runs (``send_s``: the send's own CPU work, from the first collective on),
so the hold starts ``send_s`` before the step's end; every collective also runs for real, and
completes at the later of its hold and its real completion (the emulator holds a completion
from the collective's issue, concurrently with the real one: overlapped, not serial): a fragment
of k tensors needs ceil(k / ``collective_threads``) real allreduces of ``real_collective_s``
each. The pace is measured on every send where the event logs time the real collectives
(``real_every_send``; ``real_times``: each send's own, for a replay), else on the profiled
steps only (``real_steps``; elsewhere nothing measures it and the hold is taken to cover it);
and a sync, after its data is in, still runs torchft's per-tensor callbacks and ftrun's
sketches (``sync_work_s``), which the measured exposed time contains.

Not modelled (the measured runs contain them; ``ftrun plan --check`` shows how much they
matter): process-group reconfiguration, heals, failed commits.
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
    ``drift_sd``: the measured spread of one group's drift over n = 1, 2, ... steps (module docstring;
    empty: ``jitter_s`` x sqrt(n)). ``send_s``, ``sync_work_s``, ``real_collective_s``,
    ``collective_threads``, ``fragment_tensors`` (tensors per fragment: one collective each) and
    ``real_steps`` ((first, last) step ranges where the real collectives were measured;
    ``real_every_send``: on every send, so the pace applies to every send) and ``real_times``
    ((send step, per group: seconds from the send's start to its last collective's real completion
    as that group's process saw it), ...: a run's own, in place of the pace; a blocking sync then
    releases each group when it saw the collectives done, not all at once): the costs the
    emulator does not replace (module docstring; 0 / empty = none). ``replay``: ((step,
    per-group arrival deviation from the groups' mean in that step, up to its quorum or sync), ...):
    a measured run's own drift, step by step, in place of bias, jitter and stalls (``ftrun plan
    --check``); ``replay_send`` / ``replay_sync``: the same for what a group does after the step's
    quorum (the send's own CPU work) and after its sync's data is in (the sync's own work, its
    ``should_commit``, the outer step): a sync that blocks aligns the groups, and what each does
    after that still drifts them apart before the next quorum; ``step_times``:
    ((step, the groups' mean compute in that step), ...): its own pace, in place of ``step_s`` (and
    of ``overlap_slowdown``: a measured step holds its own). ``commit_s``: ``should_commit``'s own
    RPC to the group's manager server (it crosses no inter-group link, but it is not free);
    ``commit_times``: ((step, the groups' mean ``should_commit`` at that sync), ...): a run's own, in
    place of ``commit_s``. ``reconfigure``: ((step, seconds), ...): the quorum of that step changed
    the membership (a run's first quorum; a group leaving or joining) and torchft reconfigured the
    process group inside it: the later group's ``configure`` (the groups' process groups rendezvous).
    ``sync_spread_s``: the standard deviation (convention of ``jitter_s``) of what a group does
    after a blocking sync's data is in (the sync's own work, ``should_commit``, the outer step):
    the groups leave such a sync that far apart, before any step drifts them (``replay_sync``'s
    statistic).
    """

    step_s: float
    fragment_bytes: tuple[int, ...]
    replicas: int
    bias_s: tuple[float, ...] = ()
    jitter_s: float = 0.0
    stalls: tuple[tuple[int, tuple[float, ...]], ...] = ()
    rpc_s: float = 0.0
    overlap_slowdown: float = 1.0
    drift_sd: tuple[float, ...] = ()
    send_s: float = 0.0
    sync_work_s: float = 0.0
    real_collective_s: float = 0.0
    collective_threads: int = 1
    fragment_tensors: tuple[int, ...] = ()
    real_steps: tuple[tuple[int, int], ...] = ()
    real_every_send: bool = False
    real_times: tuple[tuple[int, tuple[float, ...]], ...] = ()
    replay: tuple[tuple[int, tuple[float, ...]], ...] = ()
    replay_send: tuple[tuple[int, tuple[float, ...]], ...] = ()
    replay_sync: tuple[tuple[int, tuple[float, ...]], ...] = ()
    step_times: tuple[tuple[int, float], ...] = ()
    commit_s: float = 0.0
    commit_times: tuple[tuple[int, float], ...] = ()
    reconfigure: tuple[tuple[int, float], ...] = ()
    sync_spread_s: float = 0.0

    @property
    def model_bytes(self) -> int:
        return sum(self.fragment_bytes)

    def split(self, fragments: int) -> Workload:
        """The same model in ``fragments`` fragments: its own split when F matches, else even parts."""
        if fragments == len(self.fragment_bytes):
            return self
        parts = even_split(self.model_bytes, fragments)
        tensors = sum(self.fragment_tensors)
        counts = tuple(max(1, tensors // fragments) for _ in range(fragments)) if tensors else ()
        # (a run's own per-send real times are of its own fragments: the pace carries over)
        return replace(self, fragment_bytes=parts, fragment_tensors=counts, real_times=())

    def real_chain_s(self, fragment: int, step: int) -> float:
        """Seconds from the send at ``step`` to its last collective's real completion: the run's
        own (``real_times``), else its rounds at the measured pace where that pace applies (every
        send with ``real_every_send``, else the ``real_steps``); 0: not measured here."""
        own = dict(self.real_times)
        if step in own:
            return sum(own[step]) / len(own[step])
        if not self.real_collective_s or not (self.real_every_send or any(a <= step <= b for a, b in self.real_steps)):
            return 0.0
        k = self.fragment_tensors[fragment] if fragment < len(self.fragment_tensors) else 1
        return math.ceil(k / max(1, self.collective_threads)) * self.real_collective_s

    def real_done_each(self, step: int, issued: float, held_done: float) -> list[float] | None:
        """Per group, when its process saw the send at ``step`` (issued at ``issued``) done: the
        later of the hold and its own measured real completion (``real_times``; None: not measured
        per group here). A group whose process ran late (descheduled, on a loaded machine) sees
        the same collectives done later, and leaves the sync later."""
        own = dict(self.real_times).get(step)
        if own is None or len(own) != self.replicas:
            return None
        return [max(held_done, issued + r) for r in own]

    def with_replicas(self, replicas: int) -> Workload:
        """The same workload on ``replicas`` groups (a per-group bias or stall only fits its own R)."""
        if replicas == self.replicas:
            return self
        return replace(self, replicas=replicas, bias_s=(), stalls=(), real_times=())


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
        self.drift_sd = work.drift_sd
        self.sync_spread = work.sync_spread_s
        self.replay = {step: list(v) for step, v in work.replay if len(v) == r}
        self.after = {
            phase: {step: list(v) for step, v in got if len(v) == r}
            for phase, got in (("send", work.replay_send), ("sync", work.replay_sync))
        }
        if self.replay:  # the run's own arrivals: nothing left to chance
            self.bias, self.stalls, self.jitter, self.drift_sd = [0.0] * r, {}, 0.0, ()
            self.sync_spread = 0.0
        self.align()

    def sd(self) -> float:
        """One group's drift spread after ``steps`` steps: measured where the run says, else iid;
        on top of the spread it left the last alignment with (a sync's own work, ``sync_spread_s``)."""
        return math.sqrt(self.base**2 + self._steps_sd() ** 2)

    def _steps_sd(self) -> float:
        n = self.steps
        if n == 0:
            return 0.0
        if n <= len(self.drift_sd):
            return self.drift_sd[n - 1]
        if self.drift_sd:  # beyond the measured lags: independent steps on top of the last one
            m = len(self.drift_sd)
            return math.sqrt(self.drift_sd[-1] ** 2 + (n - m) * self.jitter**2)
        return self.jitter * math.sqrt(n)

    def align(self, after_sync: bool = False) -> None:
        """Every group at the same point: a quorum's answer, or (``after_sync``) the end of an
        allreduce every group blocked on, after which each runs the rest of its sync on its own."""
        self.offsets = [0.0] * len(self.bias)
        self.steps = 0
        self.base = self.sync_spread if after_sync else 0.0

    def step(self, step: int) -> None:
        extra = self.stalls.get(step) or self.replay.get(step)
        for i, b in enumerate(self.bias):
            self.offsets[i] += b + (extra[i] if extra else 0.0)
        self.steps += 1

    def after_point(self, phase: str, step: int) -> None:
        """What each group did in ``step`` after its quorum (``phase`` "send") or after its sync's
        data (``phase`` "sync"): it moves the group's arrival on from the alignment, not before it."""
        for i, d in enumerate(self.after[phase].get(step, ())):
            self.offsets[i] += d

    def wait(self) -> float:
        """The mean group's wait for the slowest one, at a quorum now."""
        mean = sum(self.offsets) / len(self.offsets)
        return expected_max(self.offsets, self.sd()) - mean

    def blocked(self, ahead: float | list[float]) -> float:
        """The groups' mean wait for data done ``ahead`` seconds after the mean group arrives
        (one figure, or one per group: when each group's process saw it done): a group that got
        here early waits longer, one that is late may not wait at all."""
        sd = self.sd()
        each = ahead if isinstance(ahead, list) else [ahead] * len(self.offsets)
        return sum(expected_shortfall(a - o, sd) for a, o in zip(each, self.offsets, strict=True)) / len(each)

    def shift(self, by: list[float]) -> None:
        """Each group's arrival moved on by ``by`` (seconds, per group)."""
        self.offsets = [o + d for o, d in zip(self.offsets, by, strict=True)]


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

    def as_dict(self) -> dict[str, float]:
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


def simulate(
    work: Workload, schedule: Schedule, bandwidth_bps: float, latency_s: float, steps: int | None = None
) -> Prediction:
    """Walk one replica's timeline for ``steps`` training steps (default ``DEFAULT_ROUNDS`` x H)."""
    if len(work.fragment_bytes) != schedule.fragments:
        work = work.split(schedule.fragments)
    steps = steps if steps is not None else DEFAULT_ROUNDS * schedule.sync_every
    w, tau, nfrag = schedule.window, schedule.fragment_sync_delay, schedule.fragments
    t = free_at = 0.0
    data = control = comm = bits = peak = 0.0
    syncs = 0
    drift = _Drift(work)
    # fragment -> (issued, done, bits, when each group saw it done: None = all at done)
    pending: dict[int, tuple[float, float, float, list[float] | None]] = {}
    compute = 0.0
    paced = dict(work.step_times)
    commits, configures = dict(work.commit_times), dict(work.reconfigure)
    for step in range(1, steps + 1):
        local = schedule.local_step(step)
        step_s = paced[step] if step in paced else work.step_s * (work.overlap_slowdown if w - tau < local < w else 1.0)
        frag = schedule.cycle_of(step) % nfrag
        sending = local == w - tau
        # the send's own CPU work comes after the quorum, issuing the collectives as it goes
        send_cpu = min(work.send_s, step_s) if sending else 0.0
        t += step_s - send_cpu
        compute += step_s
        drift.step(step)
        if sending:  # send: the quorum (the slowest group, the RPC, the held round trips), then the allreduce
            q = drift.wait() + work.rpc_s + linkcost.control_s("quorum", latency_s) + configures.get(step, 0.0)
            drift.align()
            t += q
            control += q
            comm += q
            nbytes = work.fragment_bytes[frag]
            free_at, done = linkcost.enqueue(free_at, t, "allreduce", nbytes, work.replicas, bandwidth_bps, latency_s)
            each = None
            if work.replicas > 1:  # completes at the later of its hold and its real collectives
                each = work.real_done_each(step, t, done)
                done = sum(each) / len(each) if each else max(done, t + work.real_chain_s(frag, step))
            sent_bits = linkcost.wire("allreduce", nbytes, work.replicas)[1] * 8.0
            pending[frag] = (t, done, sent_bits, each)
            comm += done - t
            bits += sent_bits
            t += send_cpu
            drift.after_point("send", step)
        if local == w:  # sync: block for the rest of the fragment's allreduce, then should_commit
            issued, done, sent_bits, each = pending.pop(frag)
            ahead = [d - t for d in each] if each else done - t
            blocked = drift.blocked(ahead) if work.replicas > 1 else max(0.0, done - t)
            if done > t and work.replicas > 1:  # every group leaves the same allreduce together,
                drift.align(after_sync=True)
                if each:  # each as its own process saw it end
                    drift.shift([d - done for d in each])
            # after its data is in, the sync runs its callbacks and sketches (measured exposed time holds them)
            blocked += work.sync_work_s if work.replicas > 1 else 0.0
            t += blocked
            data += blocked
            if t > issued:
                peak = max(peak, sent_bits / (t - issued))
            c = linkcost.control_s("should_commit", latency_s) + commits.get(step, work.commit_s)
            t += c
            control += c
            comm += c
            syncs += 1
            drift.after_point("sync", step)
    return Prediction(steps, syncs, compute, data, control, comm, bits, peak, t)


def plain(schedule: Schedule) -> Schedule:
    """Plain DiLoCo with the same H: one fragment, no delay."""
    return Schedule(1, schedule.sync_every, 0)


# Data-parallel training (the paper's baseline): every step all-reduces the whole model's
# gradients. Backward is 2/3 of a step's FLOPs (twice the forward), and gradients become ready
# layer by layer during it, so the allreduce can start once the forward is done and overlap
# the backward; the step waits for what is left at its end. No quorum per step (torchft's
# async quorum overlaps the forward).
BACKWARD_SHARE = 2.0 / 3.0


def simulate_data_parallel(
    work: Workload, grad_bytes: int, bandwidth_bps: float, latency_s: float, steps: int = 1
) -> Prediction:
    """Data-parallel: each step's gradient allreduce of ``grad_bytes`` overlapping its backward pass."""
    t = free_at = data = bits = peak = comm = 0.0
    for _ in range(steps):
        issued = t + (1.0 - BACKWARD_SHARE) * work.step_s
        t += work.step_s
        free_at, done = linkcost.enqueue(
            free_at, issued, "allreduce", grad_bytes, work.replicas, bandwidth_bps, latency_s
        )
        sent_bits = linkcost.wire("allreduce", grad_bytes, work.replicas)[1] * 8.0
        blocked = max(0.0, done - t)
        t += blocked
        data += blocked
        comm += done - issued
        bits += sent_bits
        if t > issued:
            peak = max(peak, sent_bits / (t - issued))
    return Prediction(steps, steps, steps * work.step_s, data, 0.0, comm, bits, peak, t)
