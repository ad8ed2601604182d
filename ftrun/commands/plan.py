"""``ftrun plan``: predict streaming vs plain DiLoCo on links (``ftrun.plan``), or check the model
against measured runs (``--check``). Torch-free.

Inputs come from flags (``--params``, ``--dtype``, ``--step-ms``) or from a run dir
(``--from``): its manifest's fragment bytes, replicas and schedule, and its event logs' compute
time per step — the loop time minus the exposed data and control time, per step, averaged over
the replica groups (what ``ftrun compare`` calls compute time). ``--check DIR`` reads a compare
dir (``report.json``) or a sweep dir (``sweep.json``) and predicts every run from its own run dir
on the link it was trained on.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import msgspec

from ftrun import layout
from ftrun.errors import BadInput
from ftrun.event_log import read_event_log, read_lifecycle, seconds, stepped
from ftrun.layout import EventRecord
from ftrun.link_spec import LinkSpec, parse_link
from ftrun.linkcost import control_s
from ftrun.output import check_parent
from ftrun.plan import (
    Prediction,
    Workload,
    data_hidden_bandwidth,
    data_parallel_hidden_bandwidth,
    data_parallel_hiding_bandwidth,
    hiding_bandwidth,
    plain,
    simulate,
    simulate_data_parallel,
    smallest_fragment_sync_delay,
    smallest_fragments,
)
from ftrun.plan_bounds import check_params, check_shape, check_step, check_train_steps, strict_json
from ftrun.plan_recovery import (
    MEASURED_ONLY,
    STATE_TENSOR_BYTES,
    RecoveryInputs,
    RecoveryPrediction,
    heal_bytes,
    predict_recovery,
    within as within_recovery,
)
from ftrun.schedule import Schedule, ScheduleError
from ftrun.small_files import read_head, read_json

# Bytes of a compare dir's report.json or a sweep dir's sweep.json read at most (--check): a row
# per run or cell, kilobytes each; a thousand-cell sweep is a few MB
RESULT_LIMIT = 256 << 20

DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5}  # bytes per exchanged value
DEFAULT_MFU = 0.4  # model FLOPs utilisation when --mfu is not given
SWEEP_POINTS_PER_DECADE = 4
LOOPBACK = LinkSpec(1e12, 0.0)  # a run without an emulated link: the model's link costs nothing
EXPOSED_FLOOR_MS = 5.0  # an exposed-time error this small always passes --check


@dataclass(frozen=True)
class RunInputs:
    """What the model needs from one measured run."""

    name: str
    work: Workload
    schedule: Schedule
    steps: int
    link: LinkSpec | None


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
    """How a run's groups drifted apart (``ftrun.plan.Workload``'s ``bias_s``, ``jitter_s``,
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
        # its own should_commit is no wait on another group either: it delays that group's arrival
        whole = [c + o + seconds(xr[r].commit_s) for r, (c, o) in enumerate(per)]
        send = [seconds(x.send_s) if x.sent is not None else 0.0 for x in xr]
        tail = [seconds(x.sync_s) - seconds(x.exposed_s) if x.synced is not None else 0.0 for x in xr]
        replay.append((step, _deviations([w - a - b for w, a, b in zip(whole, send, tail, strict=True)])))
        if any(x.sent is not None for x in xr):
            after_send.append((step, _deviations(send)))
        if any(x.synced is not None for x in xr):
            traced = [own.get((r, step)) for r in range(replicas)]
            work = [w if w is not None else 0.0 for w in traced] if None not in traced else [0.0] * replicas
            after_sync.append((step, _deviations([a + b for a, b in zip(tail, work, strict=True)])))
    n = len(dev[0])
    if n < 2:
        return Arrivals((), 0.0, tuple(stalls), 0.0)
    bias = tuple(sum(d) / n for d in dev)
    var = sum((d - bias[r]) ** 2 for r in range(replicas) for d in dev[r]) / (replicas * (n - 1))
    jitter = math.sqrt(
        var * replicas / (replicas - 1)
    )  # deviations from the mean have (R-1)/R of each group's variance
    waits = []
    for step in common:
        qs = [seconds(by_step[r][step][1].quorum_s) for r in range(replicas)]
        if all(by_step[r][step][1].quorum_s is not msgspec.UNSET for r in range(replicas)):
            waits.append(max(0.0, min(qs) - hold_s))
    rpc = statistics.median(waits) if waits else 0.0
    tails = [d for _, devs in after_sync for d in devs]
    sync_spread = math.sqrt(sum(d * d for d in tails) / len(tails) * replicas / (replicas - 1)) if tails else 0.0
    return Arrivals(
        bias,
        jitter,
        tuple(stalls),
        rpc,
        drift_spread(dev, bias, min(lags, n // 2)),
        tuple(replay),
        tuple(paced),
        tuple(after_send),
        tuple(after_sync),
        sync_spread,
    )


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
    link = m.link
    spec = LinkSpec(link.bandwidth_bps, link.latency_s) if link and link.emulated else None
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


def parse_sweep(text: str) -> tuple[list[LinkSpec], float]:
    """``LO..HI[,LATENCY]`` -> log-spaced links (``SWEEP_POINTS_PER_DECADE``), and the latency."""
    m = re.match(r"^\s*([^.,]+(?:\.\d+)?[^.,]*)\.\.([^,]+)(?:,(.+))?$", text or "")
    if not m:
        raise BadInput(f"--sweep-link {text!r}: expected LO..HI[,LATENCY], e.g. 10mbit..10gbit,20ms")
    lat = parse_link(f"1gbit,{m[3]}", f"--sweep-link {text!r}: latency").latency_s if m[3] else 0.0
    lo = parse_link(m[1], f"--sweep-link {text!r}: low end").bandwidth_bps
    hi = parse_link(m[2], f"--sweep-link {text!r}: high end").bandwidth_bps
    if hi <= lo:
        raise BadInput(f"--sweep-link {text!r}: the high end must be above the low end")
    n = max(2, round(math.log10(hi / lo) * SWEEP_POINTS_PER_DECADE) + 1)
    return [LinkSpec(lo * (hi / lo) ** (i / (n - 1)), lat) for i in range(n)], lat


def _schedule(fragments: int, sync_every: int, delay: int) -> Schedule:
    try:
        return Schedule(fragments, sync_every, delay)
    except ScheduleError as e:
        flag = {
            "fragments": "--fragments",
            "sync_every": "--sync-every",
            "fragment_sync_delay": "--fragment-sync-delay",
        }[e.field]
        raise BadInput(f"{flag} {e.value}: {e.rule}") from None


@dataclass(frozen=True)
class PlanRequest:
    """What ``ftrun plan`` was asked (one field per flag; None = not given)."""

    from_dir: str | None = None
    params: float | None = None
    dtype: str | None = None  # of the exchanged pseudo-gradients (DiLoCo) / gradients (data-parallel)
    step_ms: float | None = None
    tokens_per_step: float | None = None  # per replica group; with the three below: step = 6 N T / (G F MFU)
    flops_per_gpu: float | None = None
    gpus_per_replica: int | None = None
    mfu: float | None = None
    links: tuple[str, ...] = ()
    sweep_link: str | None = None
    replicas: int | None = None
    fragments: int | None = None
    layers: int | None = None
    layers_per_fragment: int | None = None
    sync_every: int | None = None
    fragment_sync_delay: int | None = None
    step_jitter_ms: float | None = None
    overlap_slowdown: float | None = None
    data_parallel: bool = False
    dp_dtype: str | None = None
    train_tokens: float | None = None
    heartbeat_timeout_ms: float | None = None  # recovery: the lighthouse's heartbeat timeout
    target_util: float = 0.95
    json_out: bool = False
    png: str | None = None


def _positive(flag: str, value: float | None, integer: bool = False) -> None:
    if value is not None and not (math.isfinite(value) and value > 0 and (not integer or value == int(value))):
        raise BadInput(f"{flag} {value:g}: must be {'an integer' if integer else 'a number'} > 0")


def _dtype_bytes(flag: str, dtype: str) -> float:
    if dtype not in DTYPE_BYTES:
        raise BadInput(f"{flag} {dtype!r}: expected one of {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


def step_seconds(req: PlanRequest) -> tuple[float, str]:
    """The compute step: ``--step-ms``, or FLOPs-based: 6 N T / (GPUs x FLOP/s per GPU x MFU)."""
    flops = (req.flops_per_gpu, req.mfu, req.gpus_per_replica)
    if req.step_ms is not None:
        if any(x is not None for x in flops):
            raise BadInput("--step-ms: give either --step-ms or --flops-per-gpu/--mfu/--gpus-per-replica, not both")
        if not (req.step_ms > 0 and math.isfinite(req.step_ms)):
            raise BadInput(f"--step-ms {req.step_ms}: must be a number > 0")
        return check_step(req.step_ms / 1e3, f"--step-ms {req.step_ms:g}"), f"step {req.step_ms:g} ms"
    if req.tokens_per_step is None or req.flops_per_gpu is None:
        raise BadInput(
            "plan: give --step-ms MS, or --tokens-per-step and --flops-per-gpu (with --mfu, --gpus-per-replica)"
        )
    for flag, v in (("--tokens-per-step", req.tokens_per_step), ("--flops-per-gpu", req.flops_per_gpu)):
        _positive(flag, v)
    _positive("--gpus-per-replica", req.gpus_per_replica, integer=True)
    mfu = req.mfu if req.mfu is not None else DEFAULT_MFU
    if not 0.0 < mfu <= 1.0:
        raise BadInput(f"--mfu {mfu:g}: must be in (0, 1]")
    gpus = req.gpus_per_replica or 1
    assert req.params is not None  # its one caller checked --params first
    how = "--tokens-per-step/--flops-per-gpu"  # (both overflow to inf or 0 at the extremes: checked)
    step = check_step(6.0 * req.params * req.tokens_per_step / (gpus * req.flops_per_gpu * mfu), how)
    return step, (
        f"step 6 N T / (G F MFU) = 6 x {req.params:.3g} x {req.tokens_per_step:.3g} / "
        f"({gpus} x {req.flops_per_gpu:.3g} x {mfu:g}) = {step * 1e3:.3g} ms"
    )


def _fragment_count(req: PlanRequest, default: int) -> int:
    if req.layers_per_fragment is None and req.layers is None:
        return req.fragments if req.fragments is not None else default
    if req.fragments is not None:
        raise BadInput(
            "--layers-per-fragment: give either --fragments or --layers with --layers-per-fragment, not both"
        )
    if req.layers is None or req.layers_per_fragment is None:
        raise BadInput("--layers-per-fragment: needs --layers (and --layers needs --layers-per-fragment)")
    if req.layers < 1:
        raise BadInput(f"--layers {req.layers}: must be at least 1")
    if req.layers_per_fragment < 1 or req.layers % req.layers_per_fragment:
        raise BadInput(f"--layers-per-fragment {req.layers_per_fragment}: must divide --layers {req.layers}")
    return req.layers // req.layers_per_fragment


def plan_inputs(req: PlanRequest) -> tuple[Workload, Schedule, LinkSpec | None, str, int | None, dict]:
    """The workload and streaming schedule to plan, the run's own link (``--from``), the
    bytes a data-parallel step all-reduces (None without ``--params``), and what it takes for
    the backend's own collectives (``real_collectives``)."""
    grad_bytes = None
    if req.from_dir is not None:
        given = [
            f
            for f, v in (
                ("--params", req.params),
                ("--dtype", req.dtype),
                ("--step-ms", req.step_ms),
                ("--tokens-per-step", req.tokens_per_step),
                ("--flops-per-gpu", req.flops_per_gpu),
            )
            if v is not None
        ]
        if given:
            raise BadInput(f"--from: give either a run dir or {'/'.join(given)}, not both")
        run = read_run([Path(req.from_dir)])
        real = real_collectives(run.work)
        # a what-if is one steady round: the run's one-off stalls (its start, the profiler's
        # export, its first quorum's reconfigure) and its profiled steps' real loopback collectives
        # belong to its own step numbers, so only its bias, jitter, drift, syncs' tail spread, RPC,
        # CPU work per send / sync and (timed on every send) its real collectives' pace carry over
        work, sched, link, source = (
            replace(
                run.work,
                stalls=(),
                real_steps=(),
                real_times=(),
                # the machine's own collectives at their measured pace, on every send
                real_every_send=run.work.real_collective_s > 0,
                replay=(),
                replay_send=(),
                replay_sync=(),
                step_times=(),
                commit_times=(),
                reconfigure=(),
            ),
            run.schedule,
            run.link,
            f"run {req.from_dir}",
        )
    else:
        if req.params is None:
            raise BadInput("plan: give --from RUN_DIR, or --params N and --step-ms MS (and --dtype)")
        check_params(req.params)
        step_s, step_text = step_seconds(req)
        params = round(req.params)
        dtype = req.dtype or "fp32"
        per_param = _dtype_bytes("--dtype", dtype)
        grad_bytes = round(params * _dtype_bytes("--dp-dtype", req.dp_dtype or dtype))
        work = Workload(step_s, (max(1, round(params * per_param)),), 2)
        sched, link, source = Schedule(2, 20, 5), None, f"{params:,} params x {dtype}, {step_text}"
        real = {"ms_per_round": None, "threads": None, "how": "not modelled (no run measured them): the link's hold"}
    if req.replicas is not None:
        check_shape(req.replicas, 1)  # (before a list of R is built; R x H once H is known)
        work = work.with_replicas(req.replicas)
    if req.step_jitter_ms is not None:
        if not (req.step_jitter_ms >= 0 and math.isfinite(req.step_jitter_ms)):
            raise BadInput(f"--step-jitter {req.step_jitter_ms:g}: must be a number of ms >= 0")
        work = replace(work, jitter_s=req.step_jitter_ms / 1e3)
    if req.overlap_slowdown is not None:
        if not (math.isfinite(req.overlap_slowdown) and 0.5 <= req.overlap_slowdown <= 10.0):
            raise BadInput(
                f"--overlap-slowdown {req.overlap_slowdown:g}: must be a factor from 0.5 to 10 (1 = no slowdown)"
            )
        work = replace(work, overlap_slowdown=req.overlap_slowdown)
    if req.dp_dtype is not None and req.from_dir is not None:
        raise BadInput("--dp-dtype: applies with --params (a run dir has no data-parallel step)")
    sched = _schedule(
        _fragment_count(req, sched.fragments),
        req.sync_every if req.sync_every is not None else sched.sync_every,
        req.fragment_sync_delay if req.fragment_sync_delay is not None else sched.fragment_sync_delay,
    )
    check_shape(work.replicas, sched.sync_every, "--replicas" if req.replicas is not None else "replica groups")
    return work.split(sched.fragments), sched, link, source, grad_bytes, real


def _totals(p: Prediction, steps: float | None, payload_bytes_per_step: float) -> dict:
    """A training of ``steps`` steps at the predicted rate: hours; bytes sent per replica (its
    uplink: an allreduce of B bytes sends 2(R-1)/R B); and bits exchanged per replica: the values
    it contributes (its pseudo-gradients once per H steps, or its gradients every step, before
    the allreduce), whatever R: what the Streaming DiLoCo paper's "Terabytes exchanged" match,
    read as terabits (docs/plan.md, "Against the Streaming DiLoCo paper")."""
    if steps is None or not p.steps:
        return {}
    return {
        "train_hours": steps / p.steps_per_s / 3600.0,
        "sent_bytes_per_replica": p.bits_on_wire / 8.0 / p.steps * steps,
        "exchanged_bits_per_replica": payload_bytes_per_step * 8.0 * steps,
    }


def predict(
    work: Workload,
    sched: Schedule,
    links: list[LinkSpec],
    target: float,
    grad_bytes: int | None = None,
    train_steps: float | None = None,
) -> list[dict]:
    """Per link: streaming (``sched``), plain DiLoCo (and data-parallel) predictions, and the smallest tau / F."""
    out = []
    for link in links:
        bw, lat = link.bandwidth_bps, link.latency_s
        tau = smallest_fragment_sync_delay(work, sched.fragments, sched.sync_every, bw, lat, target)
        frag = smallest_fragments(work, sched.sync_every, bw, lat, target)
        runs = {"streaming": simulate(work, sched, bw, lat), "plain": simulate(work, plain(sched), bw, lat)}
        if grad_bytes is not None:
            runs["data_parallel"] = simulate_data_parallel(work, grad_bytes, bw, lat)
        cfg: dict[str, Any] = {"link": {"bandwidth_bps": bw, "latency_s": lat, "describe": link.describe()}}
        # bytes one replica contributes per step: every fragment once per H steps; DP: its gradients
        per_step = {"streaming": work.model_bytes / sched.sync_every, "plain": work.model_bytes / sched.sync_every}
        per_step["data_parallel"] = float(grad_bytes or 0)
        cfg.update({k: {**p.as_dict(), **_totals(p, train_steps, per_step[k])} for k, p in runs.items()})
        cfg["smallest_fragment_sync_delay"] = tau
        cfg["smallest_fragments"] = {"fragments": frag[0], "fragment_sync_delay": frag[1]} if frag else None
        out.append(cfg)
    return out


def real_collectives(run: Workload) -> dict:
    """What a ``--from`` what-if takes for the backend's own collectives (the emulator holds a
    completion but runs it for real, ``ftrun.plan``): their pace per round, on every send, and
    where the run measured it."""
    if not run.real_collective_s:
        return {"ms_per_round": None, "threads": None, "how": "not measured by the run: the link's hold alone"}
    where = (
        "measured on every send (event logs)"
        if run.real_every_send
        else "measured on the profiled sends only (window traces: the run's event logs do not time them)"
    )
    return {
        "ms_per_round": run.real_collective_s * 1e3,
        "threads": run.collective_threads,
        "how": f"{where}, applied to every send",
    }


def plan(req: PlanRequest) -> int:
    from ftrun.report.plan_view import draw_utilisation, print_plan

    if not 0.0 < req.target_util <= 1.0:
        raise BadInput(f"--target-util {req.target_util}: must be in (0, 1]")
    specs = [parse_link(x) for x in req.links]
    sweep_lat = None
    if req.sweep_link is not None:
        swept, sweep_lat = parse_sweep(req.sweep_link)
        specs += swept
    if req.png is not None:  # before any work: a bad output path is refused first
        _check_png(req.png)
    if req.data_parallel and req.params is None:
        raise BadInput("--data-parallel: needs --params (the gradients a step all-reduces)")
    _positive("--train-tokens", req.train_tokens)
    _positive("--tokens-per-step", req.tokens_per_step)  # (also with --step-ms: --train-tokens divides by it)
    work, sched, run_link, source, grad_bytes, real = plan_inputs(req)
    if not req.data_parallel:
        grad_bytes = None
    train_steps = None
    if req.train_tokens is not None:
        if req.tokens_per_step is None:
            raise BadInput("--train-tokens: needs --tokens-per-step (steps = train tokens / tokens per step)")
        # --tokens-per-step is one group's: a step of R groups trains on R times as many
        train_steps = check_train_steps(
            req.train_tokens / (req.tokens_per_step * work.replicas), "--train-tokens / (R x --tokens-per-step)"
        )
    if not specs:
        if run_link is None:
            raise BadInput("plan: give --link BW,LAT (repeatable) or --sweep-link LO..HI[,LAT]")
        specs = [run_link]
    specs = sorted(set(specs), key=lambda s: (s.bandwidth_bps, s.latency_s))
    target = req.target_util
    configs = predict(work, sched, specs, target, grad_bytes, train_steps)
    lat = sweep_lat if sweep_lat is not None else specs[0].latency_s
    lo, hi = min(min(s.bandwidth_bps for s in specs), 1e3), max(max(s.bandwidth_bps for s in specs), 1e12)
    both = (("streaming", sched), ("plain", plain(sched)))
    hides: dict[str, Any] = {name: hiding_bandwidth(work, s, lat, target, lo, hi) for name, s in both}
    data_hidden: dict[str, Any] = {name: data_hidden_bandwidth(work, s, lat, lo, hi) for name, s in both}
    if grad_bytes is not None:
        hides["data_parallel"] = data_parallel_hiding_bandwidth(work, grad_bytes, lat, target, lo, hi)
        data_hidden["data_parallel"] = data_parallel_hidden_bandwidth(work, grad_bytes, lat, lo, hi)
    result: dict[str, Any] = {
        "source": source,
        "inputs": {
            "step_ms": work.step_s * 1e3,
            "fragment_bytes": list(work.fragment_bytes),
            "model_bytes": work.model_bytes,
            "replicas": work.replicas,
            "fragments": sched.fragments,
            "sync_every": sched.sync_every,
            "fragment_sync_delay": sched.fragment_sync_delay,
            "target_util": target,
            "step_jitter_ms": work.jitter_s * 1e3,
            "sync_spread_ms": work.sync_spread_s * 1e3,
            "overlap_slowdown": work.overlap_slowdown,
            "lighthouse_rpc_ms": work.rpc_s * 1e3,
            "replica_bias_ms": [b * 1e3 for b in work.bias_s],
            "stalls": len(work.stalls),
            "real_collectives": real,
            "data_parallel_bytes": grad_bytes,
            "train_steps": train_steps,
        },
        "configs": configs,
        "hides_from_bps": {**hides, "latency_s": lat},  # utilisation >= target from here up
        "data_hidden_from_bps": data_hidden,  # no sync waits for its data from here up
    }
    result["recovery"] = plan_recovery(req, work, sched, specs)
    if req.png is not None:
        result["png"] = str(draw_utilisation(result, Path(req.png)))
    if req.json_out:
        print(strict_json(result))
    else:
        print_plan(result)
    return 0


def _check_png(png: str) -> None:
    """``--png``: a ``.png`` name, not a directory, not a file other than a PNG (that one is not
    overwritten), and under no file that would stop its directory being made."""
    path = Path(png)
    if not png.endswith(".png"):
        raise BadInput(f"--png {png}: the file name must end in .png")
    if path.is_dir():
        raise BadInput(f"--png {png}: is a directory")
    if path.exists() and read_head(path, 8, "--png file") != b"\x89PNG\r\n\x1a\n":
        raise BadInput(f"--png {png}: exists and is not a PNG; not overwriting it")
    check_parent(path, "--png", parent_made=True)  # (draw_utilisation makes its directory)


def plan_recovery(req: PlanRequest, work: Workload, sched: Schedule, specs: list[LinkSpec]) -> dict:
    """Predicted recovery of one killed group per link (``ftrun.plan_recovery``): from ``--from``
    a run dir's own state bytes, heartbeat timeout and (a kill run's) measured relaunch / join /
    reconfigure; from ``--params`` float32 state of that many parameters with ftrun's optimizers
    (AdamW inner, outer momentum 0.9), the relaunch, join and reconfigure not predicted."""
    if req.heartbeat_timeout_ms is not None and not (
        math.isfinite(req.heartbeat_timeout_ms) and req.heartbeat_timeout_ms > 0
    ):
        raise BadInput(f"--heartbeat-timeout-ms {req.heartbeat_timeout_ms:g}: must be a number of ms > 0")
    if req.from_dir is not None:
        run_dir = Path(req.from_dir)
        x = recovery_inputs(run_dir, RunInputs(run_dir.name, work, sched, 0, None), with_measured=True)
        x = replace(x, kill_step=None)  # a what-if: where a kill lands in the schedule is not known
    else:
        params = round(req.params or 0)
        x = RecoveryInputs(
            heartbeat_timeout_s=2.0,
            state_bytes=heal_bytes(params * STATE_TENSOR_BYTES, 0, True),
            schedule=sched,
            step_s=work.step_s,
            fragment_bytes=work.fragment_bytes,
            replicas=work.replicas,
        )
    if req.heartbeat_timeout_ms is not None:
        x = replace(x, heartbeat_timeout_s=req.heartbeat_timeout_ms / 1e3)
    per_link = [{"link": s.describe(), **predict_recovery(x, s.bandwidth_bps, s.latency_s).as_dict()} for s in specs]
    return {
        "heartbeat_timeout_s": x.heartbeat_timeout_s,
        "state_bytes": x.state_bytes,
        "measured_from": x.measured_from,
        "links": per_link,
    }


# --- --check ---------------------------------------------------------------------------------


def _run_dirs(root: Path, given: Any) -> list[Path]:
    """Run dirs as a report recorded them: relative to the report's dir (``compare``'s
    ``as_recorded``), else as given (absolute, or relative to the cwd compare ran in: earlier
    reports); a dir that moved is looked up next to the report (a sweep's cells)."""
    dirs = []
    if given is not None and not isinstance(given, str | list):
        raise BadInput(f"--check {root}: a run's run dirs are {type(given).__name__}, not a path or a list of paths")
    for d in given.split(",") if isinstance(given, str) else list(given or []):
        if not isinstance(d, str):
            raise BadInput(f"--check {root}: a run dir {d!r} is not a path")
        tries = [root / d, Path(d), root / Path(d).name]  # (root / an absolute d is d)
        p = next((t for t in tries if (t / layout.MANIFEST).is_file()), Path(d))
        if not (p / layout.MANIFEST).is_file():
            raise BadInput(f"--check {root}: run dir {d} is missing (no {layout.MANIFEST})")
        dirs.append(p)
    if not dirs:
        raise BadInput(f"--check {root}: a run names no run dir")
    return dirs


def _measured_runs(root: Path) -> list[dict]:
    """[{name, dirs: [[run dir, ...] per repeat], link, measured}] from report.json or sweep.json."""

    def load(path: Path) -> dict:
        got = read_json(path, RESULT_LIMIT, "result", python_json=True)  # bounded in size and depth
        if not isinstance(got, dict):
            raise BadInput(f"{path}: not an ftrun result (a JSON {type(got).__name__}, not an object)")
        return got

    def rows(path: Path, got: dict, key: str) -> list[dict]:
        """``got[key]``: a list of objects (one line naming the file and the key, else)."""
        xs = got.get(key, [])
        if not isinstance(xs, list) or not all(isinstance(x, dict) for x in xs):
            raise BadInput(f"{path}: not an ftrun result ({key}: not a list of objects)")
        return xs

    def number(path: Path, row: dict, key: str) -> float | None:
        v = row.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            raise BadInput(f"{path}: not an ftrun result ({key}: {v!r} is not a number)")
        return v

    if (root / "report.json").is_file():
        path = root / "report.json"
        rep = load(path)
        out = []
        for r in rows(path, rep, "runs"):
            if not isinstance(r.get("name"), str):
                raise BadInput(f"{path}: not an ftrun result (a run without a name)")
            repeats = rows(path, r, "repeat_runs") or [r]
            data, ctrl = number(path, r, "per_sync_exposed_ms"), number(path, r, "per_sync_exposed_control_ms")
            number(path, r, "steps_per_s")
            out.append(
                {
                    "name": r["name"],
                    "dirs": [_run_dirs(root, x.get("run_dirs") or x.get("run_dir")) for x in repeats],
                    "link": r.get("link") or rep.get("link"),
                    "measured": {
                        "exposed_ms_per_sync": None if data is None or ctrl is None else data + ctrl,
                        "exposed_data_ms_per_sync": data,
                        "exposed_control_ms_per_sync": ctrl,
                        "steps_per_s": r.get("steps_per_s"),
                    },
                }
            )
        return out
    if (root / "sweep.json").is_file():
        path = root / "sweep.json"
        cells = rows(path, load(path), "cells")
        out = []
        for i, c in enumerate(cells):
            dirs = _run_dirs(root, c.get("run_dir"))
            data, ctrl = number(path, c, "exposed_comm_per_sync_ms"), number(path, c, "exposed_control_per_sync_ms")
            number(path, c, "steps_per_s")
            name = c.get("name") or (Path(c["run_dir"]).name if isinstance(c.get("run_dir"), str) else f"cell{i}")
            out.append(
                {
                    "name": name,
                    "dirs": [dirs],
                    "link": None,
                    # a sweep reports the data plane (compare's exposed_comm); control only when it says so
                    "measured": {
                        "exposed_ms_per_sync": data + ctrl if data is not None and ctrl is not None else data,
                        "exposed_data_ms_per_sync": data,
                        "exposed_control_ms_per_sync": ctrl,
                        "steps_per_s": c.get("steps_per_s"),
                    },
                    "planes": "data+control" if ctrl is not None else "data",
                }
            )
        return out
    raise BadInput(f"--check {root}: neither a compare dir (report.json) nor a sweep dir (sweep.json)")


def error_of(pred: float | None, meas: float | None) -> float | None:
    """Relative error (pred - meas) / meas; None when either is missing or meas is 0."""
    if pred is None or meas is None or meas == 0:
        return None
    return (pred - meas) / meas


def within(key: str, pred: float | None, meas: float | None, tolerance: float) -> bool | None:
    """Exposed times pass within ``tolerance`` or ``EXPOSED_FLOOR_MS``; rates within ``tolerance``."""
    if pred is None or meas is None:
        return None
    if key.startswith("exposed") and abs(pred - meas) <= EXPOSED_FLOOR_MS:
        return True
    return meas != 0 and abs(pred - meas) <= tolerance * abs(meas)


CHECKED = ("exposed_ms_per_sync", "exposed_data_ms_per_sync", "exposed_control_ms_per_sync", "steps_per_s")
GATED = ("exposed_ms_per_sync", "steps_per_s")  # exit 1 when one is outside tolerance; the split is diagnosis


def check(dir_: str, tolerance: float, json_out: bool) -> int:
    from ftrun.report.plan_view import print_check

    if not 0.0 < tolerance < 10.0:
        raise BadInput(f"--tolerance {tolerance}: must be a fraction > 0, e.g. 0.25")
    root = Path(dir_)
    if not root.is_dir():
        raise BadInput(f"--check {dir_}: not a directory")
    if (root / layout.MANIFEST).is_file() and not (root / "report.json").is_file():
        return check_recovery(root, tolerance, json_out)
    runs = []
    for mr in _measured_runs(root):
        preds, expect = [], []
        for dirs in mr["dirs"]:
            inp = read_run(dirs)
            link = inp.link or LOOPBACK
            if mr["link"] is None:
                mr["link"] = {
                    "bandwidth_bps": link.bandwidth_bps,
                    "latency_s": link.latency_s,
                    "describe": link.describe() if inp.link else "loopback (no emulated link)",
                }
            preds.append(simulate(inp.work, inp.schedule, link.bandwidth_bps, link.latency_s, inp.steps).as_dict())
            # the same run from its drift's statistics instead of its own arrivals: what runs like it give on average
            expect.append(
                simulate(
                    replace(
                        inp.work,
                        replay=(),
                        replay_send=(),
                        replay_sync=(),
                        step_times=(),
                        commit_times=(),
                        real_times=(),  # its real collectives at their pace over every timed send
                    ),  # its one-off events stay: its stalls, its first quorum's reconfigure
                    inp.schedule,
                    link.bandwidth_bps,
                    link.latency_s,
                    inp.steps,
                ).as_dict()
            )
        # compare reports the median of its repeats: predict each repeat, take the median too
        pred_all = {k: statistics.median(p[k] for p in preds) for k in CHECKED}
        expected = {k: statistics.median(p[k] for p in expect) for k in CHECKED}
        planes = mr.get("planes", "data+control")
        if planes == "data":
            pred_all["exposed_ms_per_sync"] = pred_all["exposed_data_ms_per_sync"]
        meas = mr["measured"]
        predicted = {k: pred_all[k] for k in CHECKED}
        errors = {k: error_of(predicted[k], meas.get(k)) for k in CHECKED}
        ok = {k: within(k, predicted[k], meas.get(k), tolerance) for k in CHECKED}
        runs.append(
            {
                "name": mr["name"],
                "planes": planes,
                "link": mr["link"],
                "repeats": len(preds),
                "predicted": predicted,
                "expected_from_statistics": expected,
                "measured": {k: meas.get(k) for k in CHECKED},
                "error": errors,
                "within_tolerance": ok,
            }
        )
    if not runs:
        raise BadInput(f"--check {dir_}: no runs to check")
    failed = [f"{r['name']}: {k}" for r in runs for k in GATED if r["within_tolerance"][k] is False]
    # a run none of whose gated figures was measured is no evidence either way: named, never a pass
    unchecked = [r["name"] for r in runs if all(r["within_tolerance"][k] is None for k in GATED)]
    result = {
        "check": str(root),
        "tolerance": tolerance,
        "exposed_floor_ms": EXPOSED_FLOOR_MS,
        "runs": runs,
        "verdict": verdict(failed, compared=len(runs) - len(unchecked)),
        "outside_tolerance": failed,
        "not_checked": unchecked,
    }
    if json_out:
        print(strict_json(result))
    else:
        print_check(result)
    return 0 if result["verdict"] == "pass" else 1


def verdict(failed: list[str], compared: int) -> str:
    """fail: something outside tolerance; not checked: nothing was compared; else pass."""
    return "fail" if failed else "not checked" if not compared else "pass"


# --- recovery ----------------------------------------------------------------------------------

RECOVERY_FLOOR_S = 0.2  # a phase error this small always passes: the lighthouse's 100 ms tick and a step's length
RECOVERY_GATED = ("detect", "heal", "catch_up", "total")


def recovery_inputs(run_dir: Path, inp: RunInputs, with_measured: bool) -> RecoveryInputs:
    """The recovery model's inputs from a run dir: heartbeat timeout, state bytes (the manifest's
    parameters, float32; the outer momentum from its config), the first kill's step, the run's
    step/send/sync costs; with ``with_measured``, its first kill's relaunch, join and reconfigure
    (each phase's own interval, ``ftrun.check.recovery``) as inputs."""
    from ftrun.check.recovery import recovery_of_run_dir

    m = _manifest(run_dir)
    cfg = m.config or {}
    params = [p for f in m.fragments for p in f.params]
    state = heal_bytes(
        sum(p.numel for p in params) * STATE_TENSOR_BYTES, len(params), float(cfg.get("outer_momentum", 0.9)) > 0
    )
    kills = sorted((f for f in m.faults.fired if f.action == "kill"), key=lambda f: f.fired_at)
    measured: dict[str, float] = {}
    if with_measured and kills:
        rec = next((x for x in recovery_of_run_dir(run_dir) if x.replica == kills[0].replica), None)
        if rec is not None:
            measured = {k: s[1] - s[0] for k, s in rec.spans.items() if k in MEASURED_ONLY and s is not None}
    w = inp.work
    return RecoveryInputs(
        heartbeat_timeout_s=float(cfg.get("heartbeat_timeout_ms", 2000)) / 1e3,
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


def recovery_rows(pred: RecoveryPrediction, recs: list[Any], tolerance: float) -> tuple[list[dict], list[str]]:
    """Each fault's breakdown (``ftrun.check.recovery.Recovery``: each phase's own interval, the
    total) against the prediction, and what is outside tolerance (a predicted phase, the total,
    or heal bytes that differ from what torchft sent). Relaunch, join and reconfigure are inputs."""
    rows = []
    for rec in recs:
        meas: dict[str, float | None] = {k: (s[1] - s[0]) if s is not None else None for k, s in rec.spans.items()}
        meas["total"] = rec.total_s
        p = dict(pred.phases)
        p["total"] = pred.total_s
        ok = {k: within_recovery(p.get(k), meas.get(k), tolerance, RECOVERY_FLOOR_S) for k in p}
        for k in MEASURED_ONLY:
            ok[k] = None  # inputs: measured, not predicted
        rows.append(
            {
                "fault": rec.fault,
                "replica": rec.replica,
                "predicted": p,
                "measured": meas,
                "how": pred.how,
                "heal_bytes": {"predicted": pred.heal_bytes, "measured": rec.heal_bytes, "sent": rec.heal_bytes_sent},
                "within_tolerance": ok,
                "error": {k: error_of(p.get(k), meas.get(k)) for k in p},
            }
        )
    failed = [f"{r['fault']}: {k}" for r in rows for k in RECOVERY_GATED if r["within_tolerance"].get(k) is False]
    failed += [
        f"{r['fault']}: heal bytes"
        for r in rows
        if r["heal_bytes"]["measured"] is not None and r["heal_bytes"]["measured"] != r["heal_bytes"]["predicted"]
    ]
    return rows, failed


def check_recovery(root: Path, tolerance: float, json_out: bool) -> int:
    """``--check RUN_DIR`` of a run with a ``--kill``: each fault's predicted vs measured phases."""
    from ftrun.check.recovery import recovery_of_run_dir
    from ftrun.report.plan_view import print_recovery_check

    recs = [x for x in recovery_of_run_dir(root) if x.fault.startswith("kill")]
    if not recs:
        raise BadInput(f"--check {root}: a run dir, but no --kill fired in it (nothing to compare a recovery with)")
    inp = read_run([root])
    x = recovery_inputs(root, inp, with_measured=True)
    link = inp.link
    pred = predict_recovery(x, link.bandwidth_bps if link else None, link.latency_s if link else 0.0)
    rows, failed = recovery_rows(pred, recs, tolerance)
    result = {
        "check": str(root),
        "kind": "recovery",
        "tolerance": tolerance,
        "floor_s": RECOVERY_FLOOR_S,
        "link": None
        if link is None
        else {"bandwidth_bps": link.bandwidth_bps, "latency_s": link.latency_s, "describe": link.describe()},
        "recovery": rows,
        "verdict": recovery_verdict(rows, failed),
        "outside_tolerance": failed,
    }
    if json_out:
        print(strict_json(result))
    else:
        print_recovery_check(result)
    return 0 if result["verdict"] == "pass" else 1


def recovery_verdict(rows: list[dict], failed: list[str]) -> str:
    """``verdict`` of ``recovery_rows``: compared = the faults with a gated phase or the heal bytes measured."""
    compared = sum(
        1
        for r in rows
        if r["heal_bytes"]["measured"] is not None
        or any(r["within_tolerance"].get(k) is not None for k in RECOVERY_GATED)
    )
    return verdict(failed, compared)
