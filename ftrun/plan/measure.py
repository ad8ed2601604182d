"""What ``ftrun plan`` reads from a run dir (``--from``, ``--check``): the manifest's workload and
schedule, and from the event logs the compute time per step, quorum arrivals, overlap, send,
commit, reconfigure and real collective times (``RunInputs``). Torch-free."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import msgspec

from ftrun import layout
from ftrun.errors import BadInput
from ftrun.event_log import read_event_log, read_lifecycle, seconds, stepped
from ftrun.layout import EventRecord
from ftrun.link_spec import Link
from ftrun.linkcost import control_s
from ftrun.plan.model import Workload
from ftrun.plan.recovery import MEASURED_ONLY, STATE_TENSOR_BYTES, RecoveryInputs, heal_bytes
from ftrun.schedule import Schedule, ScheduleError


@dataclass(frozen=True)
class RunInputs:
    """What the model needs from one measured run."""

    name: str
    work: Workload
    schedule: Schedule
    steps: int
    link: Link | None


def _manifest(run_dir: Path) -> layout.Manifest:
    if not (run_dir / layout.MANIFEST).is_file():
        raise BadInput(f"{run_dir}: not an ftrun run dir (no {layout.MANIFEST})")
    return layout.read_train_manifest(run_dir)


STALL_S = 0.010  # time outside a step body longer than this is a stall at that step (profiler export), not jitter


def _replica_records(dirs: list[Path], replicas: int) -> list[list[EventRecord]]:
    """Each replica group's rank-0 step records (a group without them: [])."""
    out = []
    for r in range(replicas):
        recs: list[EventRecord] = next((got for d in dirs if (got := read_event_log(layout.event_log(d, r, 0)))), [])
        out.append(stepped(recs))
    return out


def _compute_s(x: EventRecord) -> float:
    """A step's time minus what it waited on the link (exposed data, quorum, should_commit)."""
    return (
        x.step_time_s
        - (seconds(x.exposed_s) if x.synced is not None else 0.0)
        - seconds(x.quorum_s)
        - seconds(x.commit_s)
    )


def compute_step_s(dirs: list[Path], replicas: int) -> float:
    """Mean compute time per step over the replica groups' rank-0 event logs (loop - exposed)."""
    per_replica = [sum(_compute_s(x) for x in recs) / len(recs) for recs in _replica_records(dirs, replicas) if recs]
    if not per_replica:
        raise BadInput(f"{dirs[0]}: no event logs with step times under {layout.EVENT_LOGS}/")
    return sum(per_replica) / len(per_replica)


@dataclass(frozen=True)
class Arrivals:
    """How a run's groups drifted apart (``ftrun.plan.model.Workload``'s ``bias_s``, ``jitter_s``,
    ``stalls``, ``rpc_s``), measured from its event logs without reading any wait: per step,
    each group's compute (step time minus its exposed data, quorum and commit) plus its time
    outside the step body (from the records' end times ``t``)."""

    bias_s: tuple[float, ...]
    jitter_s: float
    stalls: tuple[tuple[int, tuple[float, ...]], ...]
    rpc_s: float
    drift_sd: tuple[float, ...] = ()
    replay: tuple[tuple[int, tuple[float, ...]], ...] = ()
    step_times: tuple[tuple[int, float], ...] = ()
    replay_send: tuple[tuple[int, tuple[float, ...]], ...] = ()
    replay_sync: tuple[tuple[int, tuple[float, ...]], ...] = ()
    sync_spread_s: float = 0.0


def drift_spread(dev: list[list[float]], bias: tuple[float, ...], lags: int) -> tuple[float, ...]:
    """For n = 1..``lags``: the spread of one group's drift over n consecutive steps, as the
    standard deviation of an independent group's (the convention of ``jitter_s``): the rms, over
    the groups and every window of n steps, of the summed deviations from the groups' mean (less
    the group's bias), times sqrt(R / (R - 1)). Measured, so a slow spell lasting several steps
    counts (it makes the drift grow faster than sqrt(n))."""
    r = len(dev)
    out = []
    for n in range(1, lags + 1):
        sq = [sum(d - bias[i] for d in dev[i][k : k + n]) ** 2 for i in range(r) for k in range(len(dev[i]) - n + 1)]
        if not sq:
            break
        out.append(math.sqrt(sum(sq) / len(sq) * r / (r - 1)))
    return tuple(out)


def _deviations(xs: list[float]) -> tuple[float, ...]:
    mean = sum(xs) / len(xs)
    return tuple(x - mean for x in xs)


def measure_arrivals(
    dirs: list[Path], replicas: int, hold_s: float, lags: int = 0, own_work: dict[tuple[int, int], float] | None = None
) -> Arrivals:
    """Per-group bias and per-step jitter around the groups' mean step, the stalls (the start,
    time outside the steps above ``STALL_S``), and the lighthouse's reply time: at each quorum,
    the group that waited least waited for no one, so its wait minus the held round trips
    ``hold_s`` is the RPC (median over the quorums). ``lags``: measure the drift's spread
    (``drift_spread``) over up to that many steps (at most half the steps measured). ``replay``:
    every step's per-group arrival (compute plus time outside the step body) less the groups'
    mean — the run's own drift, for ``--check`` — split where the step aligns the groups: up to
    its quorum or sync (``replay``), the send's own CPU work after the quorum (``replay_send``:
    ``send_s``), and what the sync does after its data is in (``replay_sync``: ``sync_s -
    exposed_s``, which holds ``should_commit`` and the outer step, plus the sync's own work inside
    its wait where a trace measured it for every group: ``own_work[(replica, step)]``,
    ``ftrun.trace.sync_costs``); ``sync_spread_s``: their statistic, the spread of a group's time
    after its sync's data (``replay_sync``'s deviations, as ``jitter_s``). ``step_times``: every
    step's mean compute over the groups — the run's own pace."""
    recs = _replica_records(dirs, replicas)
    if replicas < 2 or any(not r for r in recs):
        return Arrivals((), 0.0, (), 0.0)
    by_step = [{x.step: (i, x) for i, x in enumerate(r) if x.step is not None} for r in recs]  # all: ``stepped``
    common = sorted(set.intersection(*(set(b) for b in by_step)))
    stalls: list[tuple[int, tuple[float, ...]]] = []
    replay: list[tuple[int, tuple[float, ...]]] = []
    after_send: list[tuple[int, tuple[float, ...]]] = []
    after_sync: list[tuple[int, tuple[float, ...]]] = []
    own = own_work or {}
    paced: list[tuple[int, float]] = []
    dev: list[list[float]] = [[] for _ in range(replicas)]
    for step in common:
        per = []
        for r in range(replicas):
            i, x = by_step[r][step]
            outside = x.t - recs[r][i - 1].t - x.step_time_s if i > 0 else x.t - x.step_time_s  # i = 0: the start time
            per.append((_compute_s(x), outside))
        paced.append((step, sum(c for c, _ in per) / replicas))
        first = step == common[0]
        if first or any(o > STALL_S for _, o in per):
            # the start (absolute start times and the warm-up step) or a stall: a place, not jitter
            at = [c + o if first else o for c, o in per]
            mean = sum(at) / replicas
            stalls.append((step, tuple(a - mean for a in at)))
            if first:
                replay.append(stalls[-1])
                continue
            xs = [c for c, _ in per]
        else:
            xs = [c + o for c, o in per]
        mean = sum(xs) / replicas
        for r in range(replicas):
            dev[r].append(xs[r] - mean)
        xr = [by_step[r][step][1] for r in range(replicas)]
        arrive, sent, synced = _split_step(xr, per, [own.get((r, step)) for r in range(replicas)])
        replay.append((step, arrive))
        if sent is not None:
            after_send.append((step, sent))
        if synced is not None:
            after_sync.append((step, synced))
    n = len(dev[0])
    if n < 2:
        return Arrivals((), 0.0, tuple(stalls), 0.0)
    bias = tuple(sum(d) / n for d in dev)
    var = sum((d - bias[r]) ** 2 for r in range(replicas) for d in dev[r]) / (replicas * (n - 1))
    jitter = math.sqrt(var * replicas / (replicas - 1))  # deviations from the mean: (R-1)/R of each group's variance
    tails = [d for _, devs in after_sync for d in devs]
    sync_spread = math.sqrt(sum(d * d for d in tails) / len(tails) * replicas / (replicas - 1)) if tails else 0.0
    return Arrivals(
        bias,
        jitter,
        tuple(stalls),
        _rpc_s([[by_step[r][step][1] for r in range(replicas)] for step in common], hold_s),
        drift_spread(dev, bias, min(lags, n // 2)),
        tuple(replay),
        tuple(paced),
        tuple(after_send),
        tuple(after_sync),
        sync_spread,
    )


def _split_step(
    xr: list[EventRecord], per: list[tuple[float, float]], traced: list[float | None]
) -> tuple[tuple[float, ...], tuple[float, ...] | None, tuple[float, ...] | None]:
    """One step's per-group deviations, split where the step aligns the groups
    (``measure_arrivals``): the arrival up to its quorum or sync, the send's own CPU work after
    the quorum (None: no send), what the sync does after its data is in, with the sync's own
    work a trace measured for every group (``traced``; None: no sync)."""
    # its own should_commit is no wait on another group either: it delays that group's arrival
    whole = [c + o + seconds(xr[r].commit_s) for r, (c, o) in enumerate(per)]
    send = [seconds(x.send_s) if x.sent is not None else 0.0 for x in xr]
    tail = [seconds(x.sync_s) - seconds(x.exposed_s) if x.synced is not None else 0.0 for x in xr]
    arrive = _deviations([w - a - b for w, a, b in zip(whole, send, tail, strict=True)])
    sent = _deviations(send) if any(x.sent is not None for x in xr) else None
    if not any(x.synced is not None for x in xr):
        return arrive, sent, None
    work = [w if w is not None else 0.0 for w in traced] if None not in traced else [0.0] * len(xr)
    return arrive, sent, _deviations([a + b for a, b in zip(tail, work, strict=True)])


def _rpc_s(steps: list[list[EventRecord]], hold_s: float) -> float:
    """The lighthouse's reply time: at each quorum (``steps``: each step's records, one per
    group), the group that waited least waited for no one; its wait less the held round trips
    ``hold_s``, the median over the quorums."""
    waits = [
        max(0.0, min(seconds(x.quorum_s) for x in xr) - hold_s)
        for xr in steps
        if all(x.quorum_s is not msgspec.UNSET for x in xr)
    ]
    return statistics.median(waits) if waits else 0.0


def measure_overlap(dirs: list[Path], replicas: int) -> tuple[float, float]:
    """The run's overlap slowdown (mean compute of the steps with a fragment in flight over the
    plain steps', ``ftrun.check.throughput``; mean over replicas, 1 where none overlapped) and the
    share of its steps that overlapped."""
    from ftrun.check.throughput import decompose

    parts = [d for recs in _replica_records(dirs, replicas) if (d := decompose(recs)) is not None]
    measured = [
        (d.mean_overlap_slowdown, d.overlapped_steps / d.steps)
        for d in parts
        if d.mean_overlap_slowdown is not None and d.steps
    ]
    if not measured:
        return 1.0, 0.0
    return (sum(s for s, _ in measured) / len(measured), sum(o for _, o in measured) / len(measured))


def measure_send_s(dirs: list[Path], replicas: int) -> float:
    """The send's own CPU work (``prepare_sync``, event log ``send_s``): mean over the groups' sends."""
    per = [
        statistics.mean(seconds(x.send_s) for x in recs if x.sent is not None)
        for recs in _replica_records(dirs, replicas)
        if any(x.sent is not None for x in recs)
    ]
    return sum(per) / len(per) if per else 0.0


def measure_commit_s(dirs: list[Path], replicas: int) -> float:
    """``should_commit``'s own RPC (event log ``commit_s``, a vote inside one replica group that
    waits for no other group): the median over the groups' syncs."""
    xs = [
        seconds(x.commit_s)
        for recs in _replica_records(dirs, replicas)
        for x in recs
        if x.synced is not None and x.commit_s is not msgspec.UNSET
    ]
    return statistics.median(xs) if xs else 0.0


def commit_times(dirs: list[Path], replicas: int) -> tuple[tuple[int, float], ...]:
    """Per sync step, the groups' mean ``should_commit`` (event log ``commit_s``): the run's own,
    for the replay of ``--check`` (one slow RPC is part of what the run exposed)."""
    per: dict[int, list[float]] = {}
    for recs in _replica_records(dirs, replicas):
        for x in recs:
            if x.synced is not None and x.commit_s is not msgspec.UNSET and x.step is not None:
                per.setdefault(x.step, []).append(x.commit_s)
    return tuple((step, sum(v) / len(v)) for step, v in sorted(per.items()) if len(v) == replicas)


def real_collective_times(
    dirs: list[Path], replicas: int, delay: int
) -> tuple[tuple[int, int, tuple[float, ...]], ...]:
    """Per send that every group timed: (send step, fragment, each group's ``real_s``): the
    event log's, at the send's sync (the send's start to the real completion of its last
    collective as the group's process saw it, before the link's hold: ``ftrun.worker.link``);
    the send step is the sync's minus tau (``delay``). Empty for a run without them (no emulated
    link, or an older run)."""
    per: dict[tuple[int, int], dict[int, float]] = {}
    for r, recs in enumerate(_replica_records(dirs, replicas)):
        for x in recs:
            if x.synced is not None and x.real_s is not msgspec.UNSET and x.step is not None:
                per.setdefault((x.step - delay, x.synced), {})[r] = x.real_s
    return tuple(
        (step, frag, tuple(v[r] for r in range(replicas)))
        for (step, frag), v in sorted(per.items())
        if len(v) == replicas
    )


def real_pace_s(times: tuple[tuple[int, int, tuple[float, ...]], ...], tensors: tuple[int, ...], threads: int) -> float:
    """The real collectives' pace per round from every timed send: the median of its time (the
    groups' mean) over its ceil(k / threads) rounds (k: its fragment's tensors, one collective each)."""
    rounds = [math.ceil((tensors[f] if f < len(tensors) else 1) / max(1, threads)) for _, f, _ in times]
    return statistics.median(sum(s) / len(s) / n for (_, _, s), n in zip(times, rounds, strict=True))


def measure_reconfigure(dirs: list[Path], replicas: int) -> tuple[tuple[int, float], ...]:
    """Per step whose quorum reconfigured the process group (lifecycle ``configure``, inside the
    step's ``start_quorum``: the event's end within the step's own clock span), the later group's
    configure: the groups' process groups rendezvous, so the pair is ready when the slower is."""
    per: dict[int, list[float]] = {}
    for r, recs in enumerate(_replica_records(dirs, replicas)):
        events = [
            e
            for d in dirs
            for e in read_lifecycle(layout.lifecycle_log(d, r, 0))
            if e.event == "configure" and e.t >= e.t_start
        ]
        for e in events:
            x = next((x for x in recs if x.t - x.step_time_s <= e.t <= x.t), None)
            if x is not None and x.step is not None:
                per.setdefault(x.step, []).append(e.t - e.t_start)
    return tuple((step, max(v)) for step, v in sorted(per.items()))


def profiled_steps(m: layout.Manifest) -> tuple[tuple[int, int], ...]:
    """The steps the profiler ran on: each window with its warm-up step (``ftrun.worker.profiling``)."""
    return tuple((a - 1, b) for a, b in m.profile_windows)


def read_run(dirs: list[Path], name: str | None = None) -> RunInputs:
    """Fragment bytes, replicas, schedule and link from the manifest; compute step and the
    groups' arrivals (``measure_arrivals``) from the event logs; the send's CPU work, and the
    costs the emulator does not replace from the window traces (``ftrun.trace.sync_costs``)."""
    from ftrun.trace.sync_costs import sync_costs

    m = _manifest(dirs[0])
    sched = m.schedule
    try:
        schedule = Schedule(sched.fragments, sched.sync_every, sched.fragment_sync_delay)
    except ScheduleError as e:
        raise BadInput(f"{dirs[0] / layout.MANIFEST}: schedule {e}") from None
    replicas = m.replicas
    nbytes = tuple(f.bytes for f in sorted(m.fragments, key=lambda f: f.id))
    spec = m.link if m.link and m.link.emulated else None
    steps = sched.steps
    if not nbytes:
        raise BadInput(f"{dirs[0] / layout.MANIFEST}: lists no fragments")
    traces = [(t.replica, p) for t in m.traces if (p := dirs[0] / t.path).is_file()]
    costs = sync_costs([p for _, p in traces], [r for r, _ in traces])
    own_work = {(r, step): s for r, step, s in costs.per_sync}
    hold_s = control_s("quorum", spec.latency_s if spec else 0.0)
    arr = measure_arrivals(dirs, replicas, hold_s, sched.sync_every, own_work)
    slowdown, overlapped_share = measure_overlap(dirs, replicas)
    # the run's mean compute step holds its overlapped steps' slowdown: take it out of step_s,
    # so that the model, which adds it back on those steps, computes what the run computed
    step_s = compute_step_s(dirs, replicas) / (1.0 + overlapped_share * (slowdown - 1.0))
    tensors = tuple(len(f.params) for f in sorted(m.fragments, key=lambda f: f.id))
    # the real collectives: timed on every send by the event logs where the run has them
    # (``real_s``), else their pace on the traced sends only (``sync_costs``: the profiled steps)
    real = real_collective_times(dirs, replicas, sched.fragment_sync_delay) if spec else ()
    pace = real_pace_s(real, tensors, costs.collective_threads) if real else costs.real_collective_s or 0.0
    work = Workload(
        step_s,
        nbytes,
        replicas,
        arr.bias_s,
        arr.jitter_s,
        arr.stalls,
        arr.rpc_s,
        slowdown,
        drift_sd=arr.drift_sd,
        send_s=measure_send_s(dirs, replicas),
        sync_work_s=costs.sync_work_s or 0.0,
        real_collective_s=pace,
        collective_threads=costs.collective_threads,
        fragment_tensors=tensors,
        real_steps=profiled_steps(m),
        real_every_send=bool(real),
        real_times=tuple((step, seconds) for step, _, seconds in real),
        replay=arr.replay,
        replay_send=arr.replay_send,
        replay_sync=arr.replay_sync,
        sync_spread_s=arr.sync_spread_s,
        step_times=arr.step_times,
        commit_s=measure_commit_s(dirs, replicas),
        commit_times=commit_times(dirs, replicas),
        reconfigure=measure_reconfigure(dirs, replicas),
    )
    return RunInputs(name or dirs[0].name, work, schedule, steps, spec)


def recovery_inputs(run_dir: Path, inp: RunInputs, with_measured: bool) -> RecoveryInputs:
    """The recovery model's inputs from a run dir: heartbeat timeout, state bytes (the manifest's
    parameters, float32; the outer momentum from its config), the first kill's step, the run's
    step/send/sync costs; with ``with_measured``, its first kill's relaunch, join and reconfigure
    (each phase's own interval, ``ftrun.check.recovery``) as inputs."""
    from ftrun.check.recovery import recovery_of_run_dir

    m = _manifest(run_dir)
    cfg = m.config
    params = [p for f in m.fragments for p in f.params]
    state = heal_bytes(sum(p.numel for p in params) * STATE_TENSOR_BYTES, len(params), cfg.optimizer.outer_momentum > 0)
    kills = sorted((f for f in m.faults.fired if f.action == "kill"), key=lambda f: f.fired_at)
    measured: dict[str, float] = {}
    if with_measured and kills:
        rec = next((x for x in recovery_of_run_dir(run_dir) if x.replica == kills[0].replica), None)
        if rec is not None:
            measured = {k: s[1] - s[0] for k, s in rec.spans.items() if k in MEASURED_ONLY and s is not None}
    w = inp.work
    return RecoveryInputs(
        heartbeat_timeout_s=cfg.timeouts.heartbeat_timeout_ms / 1e3,
        state_bytes=state,
        schedule=inp.schedule,
        step_s=w.step_s,
        fragment_bytes=w.fragment_bytes,
        replicas=w.replicas,
        send_s=w.send_s,
        sync_work_s=w.sync_work_s,
        overlap_slowdown=w.overlap_slowdown,
        rpc_s=w.rpc_s,
        kill_step=(kills[0].fired_step or kills[0].step) if kills else None,
        measured=measured,
        measured_from=str(run_dir) if measured else None,
    )
