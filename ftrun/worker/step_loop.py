"""The training loop of one rank (``StepLoop``): each step's profiler tick, fault hook, body
inside ``ftrun::step#S manager_step=M``, event-log line and TensorBoard scalars; step numbering
and realignment after a restart. ``ftrun.worker.rank`` builds its parts and runs it."""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ftrun.layout import Healed, Rejoined, StepNews
from ftrun.torchft_compat import participants as quorum_participants, quorum_id

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
            commits, failed = self.recorder.commits, self.recorder.failed_commits
            profiled = (
                prof is not None
                or (self.recovery is not None and self.recovery.active)
                or (self.around is not None and self.around.active)
            )
            with record_function(ftrun_step_label(step, mstep)) if profiled else contextlib.nullcontext():
                loss = self.train_step()
            dt = time.perf_counter() - t0
            news = self.membership()
            if rejoining and news.quorums:
                from ftrun.worker.rejoin import aligned_step
                from ftrun.worker.stop import left_behind

                peer = news.healed.peer_step if news.healed is not None else None
                aligned = aligned_step(peer, self.run_dir, self.env.replica)
                news.rejoined = Rejoined(local_step=step, aligned_step=aligned)
                if left_behind(aligned, self.cfg.steps, news.quorums, self.env.replica):  # no step left
                    self.log_step(None, mstep, float(loss.detach()), dt, news)
                    break
                step = aligned if aligned is not None else step
                rejoining = False
            self.log_step(None if rejoining else step, mstep, float(loss.detach()), dt, news)
            rule.saw(news.quorums, self.recorder.commits > commits, self.recorder.failed_commits > failed)
            if self.around is not None:
                self.around.after_step(news.quorums, self.recorder.commits > commits)
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

    def membership(self) -> StepNews:
        """New quorums, a heal and the numeric check's sketches during this step, for the event log."""
        news = StepNews(quorums=self.probe.take())
        if self.heal.healed_from_step is not None:
            src = next((q.heal_source for q in reversed(news.quorums) if q.heal), None)
            news.healed = Healed(
                source_replica=src, peer_step=self.heal.healed_from_step, manager_step=self.manager.current_step()
            )
            self.heal.healed_from_step = None
        if self.numerics is not None:
            news.numerics, news.heal_numerics = self.numerics.take()
        return news

    def log_step(self, step: int | None, mstep: int, loss: float, dt: float, news: StepNews) -> None:
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
            news=news,
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
