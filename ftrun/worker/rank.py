"""One rank's parts, composed in the order a rank needs them (``ftrun.worker.main.main`` runs
them): ``boot`` (parent-death signal, malloc thresholds, the spec), ``start`` (a spare's wait
for its replica id, the rank's identity, its logs), ``build`` (the model and data, the numeric
probe, the start gate, torchft's Manager and what wraps it, the event log, TensorBoard, the
rank's meta file), ``train`` (DiLoCo and the step loop) and ``finish``.

torch and torchft are imported inside the functions, so that ``import ftrun.worker.rank`` stays
cheap (the parent never trains).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ftrun import layout

log = logging.getLogger("ftrun.worker")

if TYPE_CHECKING:
    import torch
    import torchft
    from torch.utils.tensorboard import SummaryWriter

    from ftrun.config import RunConfig
    from ftrun.worker.lifecycle import Lifecycle
    from ftrun.worker.meta import RankMeta
    from ftrun.worker.profiling import AroundFault, RecoveryProfile
    from ftrun.worker.quorum_probe import QuorumProbe
    from ftrun.worker.recorder import StepRecorder
    from ftrun.worker.setup import HealState, RankEnv, Training
    from ftrun.worker.sketch import NumericsProbe
    from ftrun.worker.whereabouts import Whereabouts


@dataclass
class Started:
    """A rank that knows who it is: its identity, run dir, lifecycle log, its recovery profile
    (a relaunched group's, through its first commit) and, for a spare that was assigned, the
    backend, device and training it built while it waited."""

    spec: layout.Spec
    cfg: RunConfig
    run_dir: Path
    env: RankEnv
    life: Lifecycle
    recovery: RecoveryProfile | None
    warm: tuple[str, torch.device, Training] | None


@dataclass
class Rank:
    """Every part of a rank that trains (``build``), as the step loop and ``finish`` use them."""

    started: Started
    backend: str
    device: torch.device
    training: Training
    heal: HealState
    numerics: NumericsProbe | None
    manager: torchft.Manager
    probe: QuorumProbe
    where: Whereabouts
    recorder: StepRecorder
    writer: SummaryWriter | None
    window: tuple[int, int] | None
    traces: list[str]
    meta: RankMeta


def boot(spec_path: str) -> layout.Spec:
    """Before anything allocates: die with the launcher, fix malloc's thresholds (a step's
    tensors reuse heap memory), then read the spec (the config tree, decoded with its type)."""
    from ftrun.worker.malloc import fix_malloc_thresholds
    from ftrun.worker.setup import die_with_parent

    die_with_parent()
    fix_malloc_thresholds()
    return layout.read_spec(Path(spec_path))


def start(spec: layout.Spec, t_entry: float) -> Started:
    """A spare (``--spares``) first builds and waits outside torchft for a replica id; then the
    rank's identity, its log lines and lifecycle log (``start`` at ``t_entry``, a spare's at its
    assignment) and, for a relaunched group, its recovery profile."""
    import torch

    from ftrun import runlog
    from ftrun.worker.lifecycle import Lifecycle
    from ftrun.worker.profiling import RecoveryProfile
    from ftrun.worker.setup import RankEnv
    from ftrun.worker.spare import ENV_SPARE

    cfg, run_dir = spec.config, Path(spec.run_dir)
    torch.set_num_threads(spec.threads)
    spare = os.environ.get(ENV_SPARE)
    warm = None
    if spare is not None:  # a warm spare (--spares): built, then waits outside torchft for a replica id
        t_spawned = t_entry
        warm, t_ready = wait_as_spare(cfg, run_dir, int(spare))
        t_entry = time.time()  # this incarnation starts when the spare is assigned
    env = RankEnv.from_environ()
    runlog.attach(run_dir)
    log.info("%s starting (restart %d, pid %d)", layout.worker_name(env.replica, env.rank), env.restart, os.getpid())
    life = Lifecycle(layout.lifecycle_log(run_dir, env.replica, env.rank), env.restart)
    if spare is not None:  # how long the spare took to be ready (the import tax it paid before the fault)
        life.mark("spare_ready", t_spawned, t_ready)
    life.mark("start", t_entry)
    recovery = None
    if env.restart and cfg.profiling.profile_recovery:  # profiled from here through its first commit
        name = layout.recovery_trace_name(env.replica, env.rank, env.restart)
        recovery = RecoveryProfile(layout.recovery_trace_dir(run_dir) / name)
    return Started(spec, cfg, run_dir, env, life, recovery, warm)


def _numerics_probe(s: Started) -> NumericsProbe | None:
    """The numeric check's sketches (``ftrun.worker.sketch``); --no-sketches: none."""
    if not s.cfg.profiling.sketches:
        return None
    from ftrun.worker.fault_injection import Corruption
    from ftrun.worker.sketch import NumericsProbe

    return NumericsProbe(
        Corruption(s.spec.faults, s.env.replica, s.env.rank, s.run_dir),
        s.cfg.schedule.fragment_sync_delay,
        s.cfg.optimizer.quantize,
        s.cfg.optimizer.bucketize,
    )


def _wait_at_gate(s: Started) -> None:
    """Started warm (sweep --warm-start): the Manager, and so the quorum, waits for the go;
    the late imports are paid while parked, as a spare pays them."""
    from ftrun.worker.park import park_until

    import_late_modules()
    t_park = time.time()
    park_until(Path(s.cfg.hosts.start_gate))
    s.life.mark("parked", t_park, time.time())


def build(s: Started) -> Rank:
    """The rank's model and data, numeric probe, torchft Manager (after the start gate, if any)
    with the link's control hold and the quorum/sync whereabouts around it, the event log,
    TensorBoard's writer (rank 0) and the meta file, written as ``running``."""
    from ftrun.worker.quorum_probe import QuorumProbe
    from ftrun.worker.recorder import StepRecorder
    from ftrun.worker.setup import HealState, build_training, data_stream, make_data, make_manager, pick_device
    from ftrun.worker.whereabouts import Whereabouts

    cfg, env, run_dir, spec = s.cfg, s.env, s.run_dir, s.spec
    if s.warm is None:
        backend, device = pick_device(cfg.hosts.backend, env.local_rank)
        training = build_training(cfg, env, device)
    else:
        backend, device, training = s.warm
        training.data = make_data(cfg, data_stream(env))  # the stream of the replica it now is
    heal = HealState(training)
    numerics = _numerics_probe(s)
    if cfg.hosts.start_gate and not env.restart:
        _wait_at_gate(s)
    t_manager = time.time()
    manager = make_manager(spec, cfg, env, backend, heal, s.life, numerics)
    s.life.mark("manager_up", t_manager, time.time())
    if spec.link is not None:
        from ftrun.worker.link import hold_control

        hold_control(manager, spec.link)
    where = Whereabouts(run_dir, env.replica, enabled=env.rank == 0)
    manager.start_quorum = where.around("quorum", manager.start_quorum)
    recorder = StepRecorder(layout.event_log(run_dir, env.replica, env.rank))
    recorder.attach_manager(manager)
    if spec.link is not None:
        from ftrun.torchft_compat import manager_process_group
        from ftrun.worker.link import emulator_of

        recorder.attach_link(emulator_of(manager_process_group(manager)))
    writer = None
    if env.rank == 0:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(run_dir / layout.TB / f"replica{env.replica}"), max_queue=100)
    # a restarted group gets no window (its step numbers are known only once it has rejoined);
    # its recovery profile (``Started.recovery``) covers its start through its first commit
    window: tuple[int, int] | None = None
    if spec.profile_window and not env.restart:
        first, last = spec.profile_window  # [first, last] steps, as the launcher wrote it
        window = (first, last)
    traces: list[str] = []  # the profiler appends each trace it writes; the meta file lists them
    meta = _meta(s, backend, device, training, window, traces)
    meta.write("running")
    if not env.restart:
        from ftrun.worker.setup import start_line

        start_line(run_dir, spec, layout.worker_name(env.replica, env.rank))
    return Rank(
        started=s,
        backend=backend,
        device=device,
        training=training,
        heal=heal,
        numerics=numerics,
        manager=manager,
        probe=QuorumProbe(manager),
        where=where,
        recorder=recorder,
        writer=writer,
        window=window,
        traces=traces,
        meta=meta,
    )


def _meta(
    s: Started,
    backend: str,
    device: torch.device,
    training: Training,
    window: tuple[int, int] | None,
    traces: list[str],
) -> RankMeta:
    """The rank's meta file (``ftrun.worker.meta``): who it is, where it runs, its fragments,
    versions and profiled window; ``traces`` as the profiler fills it."""
    import torch

    from ftrun.torchft_compat import versions
    from ftrun.worker.fragments import describe_fragments
    from ftrun.worker.meta import RankMeta
    from ftrun.worker.setup import device_label

    env = s.env
    record = layout.RankMeta(
        replica=env.replica,
        rank=env.rank,
        group_size=env.group_size,
        restart=env.restart,
        backend=backend,
        device=device_label(device),
        fragments=describe_fragments(training.fragments),
        versions=versions(torch.__version__),
        traces=traces,
        profile_window=list(window) if window else None,
    )
    return RankMeta(layout.meta_file(s.run_dir, env.replica, env.rank), record)


def _around_fault(r: Rank) -> AroundFault | None:
    """A surviving group's profile around another group's fault (--profile-recovery), unless
    its own window or recovery profile is recording then (one profiler at a time)."""
    s = r.started
    if not s.cfg.profiling.profile_recovery:
        return None
    from ftrun.worker.profiling import AroundFault

    window, recovery = r.window, s.recovery

    def busy(k: int) -> bool:
        return (window is not None and window[0] - 1 <= k <= window[1]) or (recovery is not None and recovery.active)

    return AroundFault(s.spec.faults, s.env.replica, s.env.rank, s.run_dir, busy, give_up=2 * s.cfg.schedule.sync_every)


def train(r: Rank) -> None:
    """torchft's ``DiLoCo`` over the fragments, the probes and wrappers attached to it (numeric
    sketches innermost, then the event log's timings, the sync whereabouts, the fault injector),
    then the step loop (``ftrun.worker.step_loop.StepLoop``) through the last step."""
    from torchft.local_sgd import DiLoCo

    from ftrun.torchft_compat import diloco_fragments
    from ftrun.worker.fault_injection import FaultInjector
    from ftrun.worker.profiling import make_profiler
    from ftrun.worker.step_loop import StepLoop

    s, cfg, t = r.started, r.started.cfg, r.training
    with DiLoCo(
        r.manager,
        t.fragments,
        t.inner,
        t.outer,
        sync_every=cfg.schedule.sync_every,
        fragment_sync_delay=cfg.schedule.fragment_sync_delay,
        fragment_update_alpha=cfg.schedule.fragment_update_alpha,
        use_bucketization=cfg.optimizer.bucketize,
        should_quantize=cfg.optimizer.quantize,
        backup_device=r.device,
    ) as diloco:
        if r.numerics is not None:
            r.numerics.attach_sums(diloco)  # innermost: inside the event log's timing of the sync
            # inside the event log's timings too: the send's sketch of the contribution is work
            # the send does before the step goes on (outside send_s it fell between the send and
            # the sync, and ftrun plan, which starts the sync's wait at send_s, over-predicted
            # the wait of a sync in the send's own step by that much); the sync's own sketch
            # work after torchft's perform_sync counts in sync_s alike
            r.numerics.attach(diloco, r.manager, t.outer, r.heal)
        r.recorder.attach(diloco)
        for frag in diloco_fragments(diloco):
            frag.perform_sync = r.where.around("sync", frag.perform_sync)
        env = s.env
        prof = make_profiler(r.window, s.run_dir / layout.TRACES, env.replica, env.rank, r.traces) if r.window else None
        faults = FaultInjector(s.spec.faults, env.replica, env.rank, s.run_dir, chaos=bool(cfg.faults.chaos))
        faults.wrap_commit(r.manager)  # --fail-commit; DiLoCo calls manager.should_commit in perform_sync
        loop = StepLoop(
            cfg,
            env,
            s.run_dir,
            t,
            r.manager,
            r.heal,
            r.probe,
            r.where,
            r.recorder,
            r.writer,
            faults,
            r.device,
            r.numerics,
            s.recovery,
            _around_fault(r),
            s.life,
        )
        loop.run(prof)
        loop.flush_scalars()


def finish(r: Rank) -> None:
    """The meta file says ``done`` with the commits; logs and the writer closed; the Manager
    shut down without waiting for its threads."""
    log.info(
        "%s done: %d commits, %d failed",
        layout.worker_name(r.started.env.replica, r.started.env.rank),
        r.recorder.commits,
        r.recorder.failed_commits,
    )
    r.meta.done(r.recorder.commits, r.recorder.failed_commits, r.manager.current_step())
    r.recorder.close()
    r.started.life.close()
    if r.writer is not None:
        r.writer.close()
    r.manager.shutdown(wait=False)


def wait_as_spare(cfg: RunConfig, run_dir: Path, slot: int) -> tuple[tuple[str, torch.device, Training], float]:
    """A warm spare's rank: pick its device, build the model, optimizers and (for a group of
    several ranks) its DDP group, import what a rank imports later, then wait for the parent to
    assign it a replica id (``ftrun.worker.spare``). No torchft Manager exists until then.
    Returns ((backend, device, training), the unix time it was ready)."""
    from ftrun.worker.setup import RankEnv, build_training, pick_device
    from ftrun.worker.spare import wait_for_assignment

    import_late_modules()
    e = os.environ
    env = RankEnv(0, 0, int(e.get("RANK", 0)), int(e.get("WORLD_SIZE", 1)), int(e.get("LOCAL_RANK", 0)))
    backend, device = pick_device(cfg.hosts.backend, env.local_rank)
    training = build_training(cfg, env, device)  # its data stream is replaced once the replica is known
    t_ready = time.time()
    wait_for_assignment(run_dir, slot, env.rank)
    return (backend, device, training), t_ready


def import_late_modules() -> None:
    """What a rank imports only once it trains (TensorBoard's writer, the profiler, the numerics
    probe, the rejoin and stop rules): a spare pays for them before it is needed."""
    import torch.profiler  # noqa: F401
    import torch.utils.tensorboard  # noqa: F401
    import torch.utils.tensorboard.summary  # noqa: F401

    import ftrun.event_log  # noqa: F401
    import ftrun.worker.rejoin  # noqa: F401
    import ftrun.worker.sketch  # noqa: F401
    import ftrun.worker.stop  # noqa: F401
