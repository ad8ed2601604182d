"""What ``ftrun plan`` was asked (``ftrun.plan.options.PlanRequest``), assembled into the model's inputs and its
predicted result (``plan_result``): per link streaming, plain DiLoCo (and data-parallel), the
smallest tau / F, the bandwidths that hide, and one killed group's recovery. Torch-free.

Inputs come from flags (``--params``, ``--dtype``, ``--step-ms``) or from a run dir
(``--from``): its manifest's fragment bytes, replicas and schedule, and its event logs' compute
time per step — the loop time minus the exposed data and control time, per step, averaged over
the replica groups (what ``ftrun compare`` calls compute time; ``ftrun.plan.measure``).
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import msgspec

from ftrun.errors import BadInput
from ftrun.link_spec import Link, parse_link
from ftrun.output import check_parent
from ftrun.plan.bounds import check_params, check_shape, check_step, check_train_steps
from ftrun.plan.measure import RunInputs, read_run, recovery_inputs
from ftrun.plan.model import Prediction, Workload, plain, simulate, simulate_data_parallel
from ftrun.plan.options import PlanRequest
from ftrun.plan.recovery import STATE_TENSOR_BYTES, RecoveryInputs, heal_bytes, predict_recovery
from ftrun.plan.result import (
    Bandwidths,
    Figures,
    HidesFrom,
    Inputs,
    LinkOut,
    LinkPlan,
    PlanResult,
    RealCollectives,
    RecoveryOnLink,
    RecoveryPlan,
    SmallestFragments,
)
from ftrun.plan.search import (
    data_hidden_bandwidth,
    data_parallel_hidden_bandwidth,
    data_parallel_hiding_bandwidth,
    hiding_bandwidth,
    smallest_fragment_sync_delay,
    smallest_fragments,
)
from ftrun.schedule import Schedule, ScheduleError
from ftrun.small_files import read_head

DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5}  # bytes per exchanged value
DEFAULT_MFU = 0.4  # model FLOPs utilisation when --mfu is not given
SWEEP_POINTS_PER_DECADE = 4
# a run without an emulated link: the model's link costs nothing
LOOPBACK = Link(1e12, 0.0, emulated=False, description="loopback (no emulated link)")


def parse_sweep(text: str) -> tuple[list[Link], float]:
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
    return [Link(lo * (hi / lo) ** (i / (n - 1)), lat) for i in range(n)], lat


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


def plan_inputs(req: PlanRequest) -> tuple[Workload, Schedule, Link | None, str, int | None, RealCollectives]:
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
        real = RealCollectives(None, None, "not modelled (no run measured them): the link's hold")
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


def _totals(p: Figures, steps: float | None, payload_bytes_per_step: float, pred: Prediction) -> Figures:
    """A training of ``steps`` steps at the predicted rate: hours; bytes sent per replica (its
    uplink: an allreduce of B bytes sends 2(R-1)/R B); and bits exchanged per replica: the values
    it contributes (its pseudo-gradients once per H steps, or its gradients every step, before
    the allreduce), whatever R: what the Streaming DiLoCo paper's "Terabytes exchanged" match,
    read as terabits (docs/plan.md, "Against the Streaming DiLoCo paper")."""
    if steps is None or not pred.steps:
        return p
    return msgspec.structs.replace(
        p,
        train_hours=steps / pred.steps_per_s / 3600.0,
        sent_bytes_per_replica=pred.bits_on_wire / 8.0 / pred.steps * steps,
        exchanged_bits_per_replica=payload_bytes_per_step * 8.0 * steps,
    )


def predict(
    work: Workload,
    sched: Schedule,
    links: list[Link],
    target: float,
    grad_bytes: int | None = None,
    train_steps: float | None = None,
) -> list[LinkPlan]:
    """Per link: streaming (``sched``), plain DiLoCo (and data-parallel) predictions, and the smallest tau / F."""
    out = []
    for link in links:
        bw, lat = link.bandwidth_bps, link.latency_s
        tau = smallest_fragment_sync_delay(work, sched.fragments, sched.sync_every, bw, lat, target)
        frag = smallest_fragments(work, sched.sync_every, bw, lat, target)
        runs = {"streaming": simulate(work, sched, bw, lat), "plain": simulate(work, plain(sched), bw, lat)}
        if grad_bytes is not None:
            runs["data_parallel"] = simulate_data_parallel(work, grad_bytes, bw, lat)
        # bytes one replica contributes per step: every fragment once per H steps; DP: its gradients
        per_step = {"streaming": work.model_bytes / sched.sync_every, "plain": work.model_bytes / sched.sync_every}
        per_step["data_parallel"] = float(grad_bytes or 0)
        figs = {k: _totals(Figures.of(p), train_steps, per_step[k], p) for k, p in runs.items()}
        out.append(
            LinkPlan(
                link=LinkOut(bw, lat, link.description),
                streaming=figs["streaming"],
                plain=figs["plain"],
                data_parallel=figs.get("data_parallel", msgspec.UNSET),
                smallest_fragment_sync_delay=tau,
                smallest_fragments=SmallestFragments(*frag) if frag else None,
            )
        )
    return out


def real_collectives(run: Workload) -> RealCollectives:
    """What a ``--from`` what-if takes for the backend's own collectives (the emulator holds a
    completion but runs it for real, ``ftrun.plan``): their pace per round, on every send, and
    where the run measured it."""
    if not run.real_collective_s:
        return RealCollectives(None, None, "not measured by the run: the link's hold alone")
    where = (
        "measured on every send (event logs)"
        if run.real_every_send
        else "measured on the profiled sends only (window traces: the run's event logs do not time them)"
    )
    return RealCollectives(run.real_collective_s * 1e3, run.collective_threads, f"{where}, applied to every send")


def _links(req: PlanRequest) -> tuple[list[Link], float | None]:
    """The links asked (``--link``, ``--sweep-link``) and the sweep's latency (None: no sweep)."""
    specs = [parse_link(x) for x in req.links]
    if req.sweep_link is None:
        return specs, None
    swept, sweep_lat = parse_sweep(req.sweep_link)
    return specs + swept, sweep_lat


def _train_steps(req: PlanRequest, replicas: int) -> float | None:
    """``--train-tokens`` as steps (None: not given)."""
    if req.train_tokens is None:
        return None
    if req.tokens_per_step is None:
        raise BadInput("--train-tokens: needs --tokens-per-step (steps = train tokens / tokens per step)")
    # --tokens-per-step is one group's: a step of R groups trains on R times as many
    return check_train_steps(
        req.train_tokens / (req.tokens_per_step * replicas), "--train-tokens / (R x --tokens-per-step)"
    )


def _hiding(
    work: Workload, sched: Schedule, specs: list[Link], lat: float, target: float, grad_bytes: int | None
) -> tuple[HidesFrom, Bandwidths]:
    """From which bandwidth (searched over 1 kbit/s .. 1 Tbit/s, or the links asked if wider) each
    schedule reaches ``target``, and from which it hides all its data."""
    lo, hi = min(min(s.bandwidth_bps for s in specs), 1e3), max(max(s.bandwidth_bps for s in specs), 1e12)
    both = (("streaming", sched), ("plain", plain(sched)))
    hides: dict[str, float | None] = {name: hiding_bandwidth(work, s, lat, target, lo, hi) for name, s in both}
    data: dict[str, float | None] = {name: data_hidden_bandwidth(work, s, lat, lo, hi) for name, s in both}
    if grad_bytes is None:
        return HidesFrom(**hides, latency_s=lat), Bandwidths(**data)
    dp_hides = data_parallel_hiding_bandwidth(work, grad_bytes, lat, target, lo, hi)
    dp_data = data_parallel_hidden_bandwidth(work, grad_bytes, lat, lo, hi)
    return HidesFrom(**hides, data_parallel=dp_hides, latency_s=lat), Bandwidths(**data, data_parallel=dp_data)


def _inputs(
    work: Workload,
    sched: Schedule,
    req: PlanRequest,
    real: RealCollectives,
    grad_bytes: int | None,
    train_steps: float | None,
) -> Inputs:
    return Inputs(
        step_ms=work.step_s * 1e3,
        fragment_bytes=list(work.fragment_bytes),
        model_bytes=work.model_bytes,
        replicas=work.replicas,
        fragments=sched.fragments,
        sync_every=sched.sync_every,
        fragment_sync_delay=sched.fragment_sync_delay,
        target_util=req.target_util,
        step_jitter_ms=work.jitter_s * 1e3,
        sync_spread_ms=work.sync_spread_s * 1e3,
        overlap_slowdown=work.overlap_slowdown,
        lighthouse_rpc_ms=work.rpc_s * 1e3,
        replica_bias_ms=[b * 1e3 for b in work.bias_s],
        stalls=len(work.stalls),
        real_collectives=real,
        data_parallel_bytes=grad_bytes,
        train_steps=train_steps,
    )


def plan_result(req: PlanRequest) -> PlanResult:
    """The plan (``ftrun plan --json``'s object) for ``req``; every bad input first, one line.
    ``--png`` is checked here (a bad output path refused before any work) and drawn by the command."""
    if not 0.0 < req.target_util <= 1.0:
        raise BadInput(f"--target-util {req.target_util}: must be in (0, 1]")
    specs, sweep_lat = _links(req)
    if req.png is not None:  # before any work: a bad output path is refused first
        _check_png(req.png)
    if req.data_parallel and req.params is None:
        raise BadInput("--data-parallel: needs --params (the gradients a step all-reduces)")
    _positive("--train-tokens", req.train_tokens)
    _positive("--tokens-per-step", req.tokens_per_step)  # (also with --step-ms: --train-tokens divides by it)
    work, sched, run_link, source, grad_bytes, real = plan_inputs(req)
    grad_bytes = grad_bytes if req.data_parallel else None
    train_steps = _train_steps(req, work.replicas)
    if not specs:
        if run_link is None:
            raise BadInput("plan: give --link BW,LAT (repeatable) or --sweep-link LO..HI[,LAT]")
        specs = [run_link]
    specs = sorted(set(specs), key=lambda s: (s.bandwidth_bps, s.latency_s))
    lat = sweep_lat if sweep_lat is not None else specs[0].latency_s
    hides, data_hidden = _hiding(work, sched, specs, lat, req.target_util, grad_bytes)
    return PlanResult(
        source=source,
        inputs=_inputs(work, sched, req, real, grad_bytes, train_steps),
        configs=predict(work, sched, specs, req.target_util, grad_bytes, train_steps),
        hides_from_bps=hides,
        data_hidden_from_bps=data_hidden,
        recovery=plan_recovery(req, work, sched, specs),
    )


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


def plan_recovery(req: PlanRequest, work: Workload, sched: Schedule, specs: list[Link]) -> RecoveryPlan:
    """Predicted recovery of one killed group per link (``ftrun.plan.recovery``): from ``--from``
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
    per_link = []
    for s in specs:
        r = predict_recovery(x, s.bandwidth_bps, s.latency_s)
        per_link.append(
            RecoveryOnLink(link=s.description, phases=r.phases, how=r.how, heal_bytes=r.heal_bytes, total_s=r.total_s)
        )
    return RecoveryPlan(
        heartbeat_timeout_s=x.heartbeat_timeout_s,
        state_bytes=x.state_bytes,
        measured_from=x.measured_from,
        links=per_link,
    )
