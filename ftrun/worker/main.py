"""One training rank, started by torch's elastic launcher: ``-m ftrun.worker.main SPEC.json``.

Per rank: a torchft ``Manager`` (``use_async_quorum=False``) over a reconfigurable process
group, ``torchft.local_sgd.DiLoCo`` over the model's fragments, AdamW inside, Nesterov SGD
outside (``ftrun.worker.setup``). Ranks of one group share the model through DDP; rank g of
every group forms the cross-group torchft process group.

Each training step S (1-based) is: ``prof.step()`` (so ``ProfilerStep#S`` holds step S, as in
torchft's example), the fault hook, then the step body inside ``ftrun::step#S manager_step=M``;
DiLoCo's optimizer post-hook sends/syncs inside ``inner.step()``. After the step, one event-log
line (``ftrun.worker.recorder``) and TensorBoard scalars (handed to the writer in batches).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ftrun.torchft_compat import manager_process_group, participants as quorum_participants, quorum_id

log = logging.getLogger("ftrun.worker")

if TYPE_CHECKING:  # the worker imports torch and torchft only once it runs
    import torch
    import torchft
    from torch.utils.tensorboard import SummaryWriter

    from ftrun.config import RunConfig
    from ftrun.worker.fault_injection import FaultInjector
    from ftrun.worker.lifecycle import Lifecycle
    from ftrun.worker.profiling import AroundFault, RecoveryProfile
    from ftrun.worker.quorum_probe import QuorumProbe
    from ftrun.worker.recorder import StepRecorder
    from ftrun.worker.setup import HealState, RankEnv, Training
    from ftrun.worker.sketch import NumericsProbe
    from ftrun.worker.stop import StopRule
    from ftrun.worker.whereabouts import Whereabouts


def main(spec_path: str) -> int:
    t_entry = time.time()  # the lifecycle's "start": this rank's Python reached ftrun
    from ftrun.worker.setup import die_with_parent

    die_with_parent()
    from ftrun.worker.malloc import fix_malloc_thresholds

    fix_malloc_thresholds()  # before torch allocates: a step's tensors reuse heap memory
    from ftrun import layout

    spec = layout.read_spec(Path(spec_path))  # decodes the config tree with its type (layout.Spec)
    cfg, run_dir = spec.config, Path(spec.run_dir)

    import torch
    from torchft.local_sgd import DiLoCo

    from ftrun.torchft_compat import diloco_fragments, versions
    from ftrun.worker.fault_injection import FaultInjector
    from ftrun.worker.fragments import describe_fragments
    from ftrun.worker.lifecycle import Lifecycle
    from ftrun.worker.meta import RankMeta
    from ftrun.worker.profiling import AroundFault, RecoveryProfile, make_profiler
    from ftrun.worker.quorum_probe import QuorumProbe
    from ftrun.worker.recorder import StepRecorder
    from ftrun.worker.setup import (
        HealState,
        RankEnv,
        build_training,
        data_stream,
        device_label,
        make_data,
        make_manager,
        pick_device,
        start_line,
    )
    from ftrun.worker.spare import ENV_SPARE
    from ftrun.worker.whereabouts import Whereabouts

    torch.set_num_threads(spec.threads)
    spare = os.environ.get(ENV_SPARE)
    warm = None
    if spare is not None:  # a warm spare (--spares): built, then waits outside torchft for a replica id
        t_spawned = t_entry
        warm, t_ready = wait_as_spare(cfg, run_dir, int(spare))
        t_entry = time.time()  # this incarnation starts when the spare is assigned
    env = RankEnv.from_environ()
    from ftrun import runlog

    runlog.attach(run_dir)
    log.info("%s starting (restart %d, pid %d)", layout.worker_name(env.replica, env.rank), env.restart, os.getpid())
    life = Lifecycle(layout.lifecycle_log(run_dir, env.replica, env.rank), env.restart)
    if spare is not None:  # how long the spare took to be ready (the import tax it paid before the fault)
        life.mark("spare_ready", t_spawned, t_ready)
    life.mark("start", t_entry)
    # a relaunched group is profiled from here through its first commit (--profile-recovery)
    recovery = None
    if env.restart and cfg.profiling.profile_recovery:
        recovery = RecoveryProfile(
            layout.recovery_trace_dir(run_dir) / layout.recovery_trace_name(env.replica, env.rank, env.restart)
        )
    if warm is None:
        backend, device = pick_device(cfg.hosts.backend, env.local_rank)
        training = build_training(cfg, env, device)
    else:
        backend, device, training = warm
        training.data = make_data(cfg, data_stream(env))  # the stream of the replica it now is
    heal = HealState(training)
    numerics = None
    if cfg.profiling.sketches:  # the numeric check's sketches (ftrun.worker.sketch); --no-sketches: none
        from ftrun.worker.fault_injection import Corruption
        from ftrun.worker.sketch import NumericsProbe

        numerics = NumericsProbe(
            Corruption(spec.faults, env.replica, env.rank, run_dir),
            cfg.schedule.fragment_sync_delay,
            cfg.optimizer.quantize,
            cfg.optimizer.bucketize,
        )
    if cfg.hosts.start_gate and not env.restart:  # started warm: the Manager (and the quorum) waits for the go
        from ftrun.worker.park import park_until

        import_late_modules()  # as a spare does: paid while parked, not after the go
        t_park = time.time()
        park_until(Path(cfg.hosts.start_gate))
        life.mark("parked", t_park, time.time())
    t_manager = time.time()
    manager = make_manager(spec, cfg, env, backend, heal, life, numerics)
    life.mark("manager_up", t_manager, time.time())
    if spec.link is not None:
        from ftrun.worker.link import hold_control

        hold_control(manager, spec.link)
    probe = QuorumProbe(manager)
    where = Whereabouts(run_dir, env.replica, enabled=env.rank == 0)
    manager.start_quorum = where.around("quorum", manager.start_quorum)

    recorder = StepRecorder(layout.event_log(run_dir, env.replica, env.rank))
    recorder.attach_manager(manager)
    if spec.link is not None:
        from ftrun.worker.link import emulator_of

        recorder.attach_link(emulator_of(manager_process_group(manager)))
    writer = None
    if env.rank == 0:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(run_dir / layout.TB / f"replica{env.replica}"), max_queue=100)
    # a restarted group gets no window (its step numbers are known only once it has rejoined);
    # its recovery profile (RecoveryProfile, above) covers its start through its first commit
    window: tuple[int, int] | None = None
    if spec.profile_window and not env.restart:
        first, last = spec.profile_window  # [first, last] steps, as the launcher wrote it
        window = (first, last)
    traces: list[str] = []
    meta = RankMeta(
        layout.meta_file(run_dir, env.replica, env.rank),
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
    meta.write("running")
    if not env.restart:
        start_line(run_dir, spec, layout.worker_name(env.replica, env.rank))
    try:
        with DiLoCo(
            manager,
            training.fragments,
            training.inner,
            training.outer,
            sync_every=cfg.schedule.sync_every,
            fragment_sync_delay=cfg.schedule.fragment_sync_delay,
            fragment_update_alpha=cfg.schedule.fragment_update_alpha,
            use_bucketization=cfg.optimizer.bucketize,
            should_quantize=cfg.optimizer.quantize,
            backup_device=device,
        ) as diloco:
            if numerics is not None:
                numerics.attach_sums(diloco)  # innermost: inside the event log's timing of the sync
                # inside the event log's timings too: the send's sketch of the contribution is work
                # the send does before the step goes on (outside send_s it fell between the send and
                # the sync, and ftrun plan, which starts the sync's wait at send_s, over-predicted
                # the wait of a sync in the send's own step by that much: 5-27 ms here); the
                # sync's own sketch work after torchft's perform_sync now counts in sync_s alike
                numerics.attach(diloco, manager, training.outer, heal)
            recorder.attach(diloco)
            for frag in diloco_fragments(diloco):
                frag.perform_sync = where.around("sync", frag.perform_sync)
            prof = make_profiler(window, run_dir / layout.TRACES, env.replica, env.rank, traces) if window else None
            faults = FaultInjector(spec.faults, env.replica, env.rank, run_dir, chaos=bool(cfg.faults.chaos))
            faults.wrap_commit(manager)  # --fail-commit; DiLoCo calls manager.should_commit in perform_sync
            around = None
            if (
                cfg.profiling.profile_recovery
            ):  # a surviving group, around another group's fault (one profiler at a time)

                def busy(k: int) -> bool:
                    return (window is not None and window[0] - 1 <= k <= window[1]) or (
                        recovery is not None and recovery.active
                    )

                around = AroundFault(
                    spec.faults, env.replica, env.rank, run_dir, busy, give_up=2 * cfg.schedule.sync_every
                )
            loop = StepLoop(
                cfg,
                env,
                run_dir,
                training,
                manager,
                heal,
                probe,
                where,
                recorder,
                writer,
                faults,
                device,
                numerics,
                recovery,
                around,
                life,
            )
            loop.run(prof)
            loop.flush_scalars()
    except Exception as e:
        meta.failed(e, where.failed_in)
        log.exception("rank failed (in %s)", where.failed_in or "step")
        raise
    log.info(
        "%s done: %d commits, %d failed",
        layout.worker_name(env.replica, env.rank),
        recorder.commits,
        recorder.failed_commits,
    )
    meta.write(
        "done",
        commits=recorder.commits,
        failed_commits=recorder.failed_commits,
        final_manager_step=manager.current_step(),
    )
    recorder.close()
    life.close()
    if writer is not None:
        writer.close()
    manager.shutdown(wait=False)
    return 0


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


TB_EVERY = 20  # steps of TensorBoard scalars handed to the writer at once


class StepLoop:
    """The training loop of one rank; owns step numbering (and realignment after a restart)."""

    def __init__(
        self,
        cfg: RunConfig,
        env: RankEnv,
        run_dir: Path,
        training: Training,
        manager: torchft.Manager,
        heal: HealState,
        probe: QuorumProbe,
        where: Whereabouts,
        recorder: StepRecorder,
        writer: SummaryWriter | None,
        faults: FaultInjector,
        device: torch.device,
        numerics: NumericsProbe | None = None,
        recovery: RecoveryProfile | None = None,
        around: AroundFault | None = None,
        life: Lifecycle | None = None,
    ) -> None:
        self.cfg, self.env, self.run_dir = cfg, env, run_dir
        self.training, self.manager, self.heal, self.probe = training, manager, heal, probe
        self.where, self.recorder, self.writer, self.faults, self.device = where, recorder, writer, faults, device
        self.numerics = numerics
        self.recovery = recovery  # profiling a relaunched group until its first commit
        self.around = around  # profiling this surviving group around another group's fault
        self.life = life  # where a rank that stops waiting for a relaunched group says so
        self.sleep_s = cfg.emulation.step_sleep_ms / 1e3
        self._tb_last: dict = {}
        self._tb_pending: list[tuple[int, list[tuple[str, float]]]] = []  # (step, its scalars)

    def run(self, prof) -> None:
        from torch.profiler import record_function

        from ftrun.torchft_compat import ftrun_step_label
        from ftrun.worker.stop import StopRule

        if prof is not None:
            prof.start()
        step = 1
        rejoining = bool(self.env.restart)  # until the first quorum tells us where the run is
        rule = StopRule(self.cfg.steps, self.cfg.timeouts.quorum_timeout_s)
        while True:
            if prof is not None:
                prof.step()
            if not rejoining:
                if self.around is not None:
                    self.around.at_step(step)
                self.where.set("step", step)
                self.faults.before_step(step)
            self.heal.step = step
            if self.numerics is not None:
                self.numerics.step = step
            mstep = self.manager.current_step()
            t0 = time.perf_counter()
            commits = self.recorder.commits
            profiled = (
                prof is not None
                or (self.recovery is not None and self.recovery.active)
                or (self.around is not None and self.around.active)
            )
            with record_function(ftrun_step_label(step, mstep)) if profiled else contextlib.nullcontext():
                loss = self.train_step()
            dt = time.perf_counter() - t0
            extra = self.membership()
            if rejoining and extra.get("quorums"):
                from ftrun.worker.rejoin import aligned_step
                from ftrun.worker.stop import left_behind

                peer = extra.get("healed", {}).get("peer_step")
                aligned = aligned_step(peer, self.run_dir, self.env.replica)
                extra["rejoined"] = {"local_step": step, "aligned_step": aligned}
                if left_behind(aligned, self.cfg.steps, extra["quorums"], self.env.replica):  # no step left
                    self.log_step(None, mstep, float(loss.detach()), dt, extra)
                    break
                step = aligned if aligned is not None else step
                rejoining = False
            self.log_step(None if rejoining else step, mstep, float(loss.detach()), dt, extra)
            rule.saw(extra.get("quorums") or [], self.recorder.commits > commits)
            if self.around is not None:
                self.around.after_step(extra.get("quorums") or [], self.recorder.commits > commits)
            if self.recovery is not None and self.recorder.commits:
                self.recovery.finish()  # through the first commit with the group back
            if step >= self.cfg.steps if rejoining else self.stops(rule, step):
                break
            step += 1
        if prof is not None:
            prof.stop()
        if self.recovery is not None:
            self.recovery.finish()  # the run ended first: what was recorded
        if self.around is not None:
            self.around.finish()

    def stops(self, rule: StopRule, step: int) -> bool:
        """After step ``step``: the run's last step is done and no relaunched group is on its way
        back (``ftrun.worker.stop``), or the wait for it reached ``--quorum-timeout``."""
        if step < self.cfg.steps:
            return False
        from ftrun import layout
        from ftrun.event_log import read_run_events

        decision = rule.decide(step, read_run_events(layout.run_event_log(self.run_dir)), time.time())
        if decision.gave_up and self.life is not None:
            self.life.mark("gave_up_waiting", time.time(), step=step, peers=list(decision.waiting))
        if decision.waiting and not decision.stop and step == self.cfg.steps:
            log.info("past the last step: waiting for relaunched group(s) %s to commit", decision.waiting)
        return decision.stop

    def train_step(self):
        from ftrun.worker.setup import train_step

        t = self.training
        loss = train_step(t.train_model, t.inner, t.data, self.device)  # DiLoCo's post-hook sends/syncs in inner.step()
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return loss

    def membership(self) -> dict:
        """New quorums and a heal during this step, for the event log."""
        extra: dict = {}
        quorums = self.probe.take()
        if quorums:
            extra["quorums"] = quorums
        if self.heal.healed_from_step is not None:
            src = next((q["heal_source"] for q in reversed(quorums) if q["heal"]), None)
            extra["healed"] = {
                "source_replica": src,
                "peer_step": self.heal.healed_from_step,
                "manager_step": self.manager.current_step(),
            }
            self.heal.healed_from_step = None
        if self.numerics is not None:
            rounds, healed = self.numerics.take()
            if rounds:
                extra["numerics"] = rounds
            if healed is not None:
                extra["heal_numerics"] = healed
        return extra

    def log_step(self, step: int | None, mstep: int, loss: float, dt: float, extra: dict) -> None:
        m = self.manager
        participants = quorum_participants(m)
        self.recorder.end_step(
            step=step,
            manager_step=mstep,
            manager_step_after=m.current_step(),
            participants=participants,
            quorum_id=quorum_id(m),
            loss=loss,
            step_time_s=dt,
            restart=self.env.restart,
            **extra,
        )
        if self.writer is not None and step is not None:
            # loss and step time every step; manager step and participants when they change
            # (TensorBoard joins the points). Handed to TensorBoard's writer TB_EVERY steps at a
            # time: per-step add_scalar calls cost 0.2-0.4 ms a step here (the writer thread
            # wakes for each event), a batch ~0.02 ms a step. A killed group loses < TB_EVERY
            # steps of scalars; its event log has every step.
            values = [("loss", loss), ("step_time_s", dt)]
            for key, value in (("manager_step", m.current_step()), ("participants", participants)):
                if value is not None and self._tb_last.get(key) != value:
                    values.append((key, value))
                    self._tb_last[key] = value
            self._tb_pending.append((step, values))
            if step % TB_EVERY == 0:
                self.flush_scalars()

    def flush_scalars(self) -> None:
        """The pending steps' scalars, one TensorBoard event per step holding all of its scalars
        (what ``add_scalar`` writes as one event each: TensorBoard reads a summary's values
        alike). An event costs its writer thread two CRC-32Cs in pure Python (tensorboard's
        record writer without TensorFlow), so one per step instead of one per scalar halves
        that work: ~40 -> ~20 us CPU per step here."""
        if self.writer is not None and self._tb_pending:
            from torch.utils.tensorboard.summary import Summary  # (tensorboard's proto, as add_scalar's)

            file_writer = self.writer.file_writer  # what add_scalar writes through, made by SummaryWriter()
            assert file_writer is not None
            for step, values in self._tb_pending:
                summary = Summary(value=[Summary.Value(tag=k, simple_value=float(v)) for k, v in values])
                file_writer.add_summary(summary, step)
        self._tb_pending = []


if __name__ == "__main__":
    code = main(sys.argv[1])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # torchft's background threads must not keep the rank alive
