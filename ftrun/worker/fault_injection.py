"""Fire ``--kill``/``--hang``/``--fail-commit`` faults inside the target group, exactly at the step. Torch-free.

At the start of step S, rank 0 of replica group R:
* ``kill``: SIGKILLs its launcher (torchrun) and itself; the group's other ranks die through
  their parent-death signal — every process of the group is gone, with no chance to clean up.
* ``sigterm``: SIGTERMs its launcher, which stops its ranks (torchrun's polite shutdown).
* ``hang``: sleeps SECONDS inside the step (every rank of the group).
* ``corrupt`` (``--corrupt-allreduce R@S:KIND``): rank 0's torchft process group computes a wrong
  result for the round synced at step S (``Corruption``, called by ``ftrun.worker.sketch``).
* ``corrupt-sync`` (``--corrupt-sync R@S:KIND``): rank 0 of group R gets one stage of the outer
  step of the round synced at step S wrong (``Corruption``: sign, stale, lr, alpha; called by
  ``ftrun.worker.sketch`` and ``ftrun.worker.sketch_outer``).
* ``fail-commit``: from step S on, at the group's next ``should_commit``, rank 0 reports an error
  to its Manager (``Manager.report_error``, torchft's public API for "this step went wrong"), so it
  votes false and the whole group's commit fails (the vote is a collective inside the group);
  torchft clears the error at the next quorum. The other groups commit as usual.
Each fault fires once per run: a marker ``<run>/faults/<key>.json`` (written before firing)
tells the parent what happened and keeps a restarted group from firing it again.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

from ftrun import chaos_plan, layout
from ftrun.output import atomic_write

log = logging.getLogger(__name__)


class FaultInjector:
    """The planned faults of one rank (module docstring), fired at their step."""

    def __init__(
        self, specs: list[layout.FaultSpec], replica: int, rank: int, run_dir: Path, chaos: bool = False
    ) -> None:
        later = ("corrupt", "corrupt-sync", "fail-commit")  # fired inside the sync (Corruption, wrap_commit)
        self.replica = replica
        self.chaos = chaos  # --chaos: look for the supervisor's request at every step (``chaos_request``)
        self.chaos_seen: set[int] = set()
        self.started = time.time()  # a request older than this incarnation was meant for an earlier one
        self.mine = {f.step: f for f in specs if f.replica == replica and f.action not in later}
        self.commit_faults = sorted(
            (f for f in specs if f.replica == replica and f.action == "fail-commit"), key=lambda f: f.step
        )
        self.rank = rank
        self.run_dir = run_dir
        self.step = 0  # the step being trained (``before_step``)

    def wrap_commit(self, manager: Any) -> None:
        """Route ``manager.should_commit`` through the ``fail-commit`` faults (rank 0 votes)."""
        if not self.commit_faults or self.rank != 0:
            return
        real = manager.should_commit

        def should_commit(*args: Any, **kwargs: Any) -> bool:
            f = next((f for f in self.commit_faults if f.step <= self.step), None)
            if f is not None:
                self.commit_faults.remove(f)
                marker = layout.fault_marker(self.run_dir, f.key)
                if not marker.exists():  # a restarted group does not fire it again
                    self._mark(marker, f, self.step)
                    manager.report_error(
                        RuntimeError(f"ftrun --fail-commit {f.replica}@{f.step}: this rank votes against the commit")
                    )
            return real(*args, **kwargs)

        manager.should_commit = should_commit

    def before_step(self, step: int) -> None:
        self.step = step
        if self.chaos:
            self.chaos_request(step)
        f = self.mine.get(step)
        if f is None:
            return
        self._fire(f, layout.fault_marker(self.run_dir, f.key), step)

    def chaos_request(self, step: int) -> None:
        """``--chaos``: fire the fault the supervisor asks for (``ftrun.chaos_plan.ChaosRequest``),
        once: not again in this incarnation, nor when an earlier incarnation fired it (its marker)
        or the request predates this one (it was meant for the group's previous processes)."""
        got = chaos_plan.read_request(self.run_dir, self.replica)
        if got is None or got[0].index in self.chaos_seen:
            return
        req, written = got
        self.chaos_seen.add(req.index)
        prefix = chaos_plan.marker_prefix(req.index)
        if written < self.started or any(p.name.startswith(prefix) for p in layout.fault_markers(self.run_dir)):
            return
        f = layout.FaultSpec(self.replica, step, req.action, req.seconds)
        key = chaos_plan.marker_key(req.index, req.action, self.replica, step)
        self._fire(f, layout.fault_marker(self.run_dir, key), step)

    def _fire(self, f: layout.FaultSpec, marker: Path, step: int) -> None:
        """Fire a kill, sigterm or hang now (module docstring); ``marker`` records it first."""
        if f.action == "hang":
            if marker.exists() and self.rank == 0:
                return
            if self.rank == 0:
                self._mark(marker, f, step)
            time.sleep(f.seconds)
            return
        if self.rank != 0 or marker.exists():
            return
        self._mark(marker, f, step)
        launcher = os.getppid()
        if f.action == "kill":
            os.kill(launcher, signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)
        else:
            os.kill(launcher, signal.SIGTERM)
            time.sleep(30)  # torchrun stops us; never train past the fault step

    def _mark(self, marker: Path, f: layout.FaultSpec, step: int) -> None:
        marker.parent.mkdir(exist_ok=True)
        fired = layout.FaultMarker(
            f.replica, f.step, f.action, f.seconds, fired_at=time.time(), fired_step=step, pid=os.getpid()
        )
        atomic_write(marker, layout.to_json(fired), "fault marker")  # the parent may read it meanwhile
        log.warning("fault %s fires at step %d", f.key, step)


class Corruption:
    """``--corrupt-allreduce`` faults of this rank, applied to the tensors of one round (tensor
    methods only: this module stays torch-free). ``ftrun.worker.sketch`` calls the hooks in the
    order torchft runs: ``at_issue`` (the tensor handed to the process group, after its sketch),
    ``before_sum`` (the collective's result, before the SUM sketch), ``after_sum`` (after it,
    before torchft's divide callback), ``before_outer_step`` (the averaged grads, before their
    sketch and the outer step). ``sync_step`` names the round; a fault fires once per run."""

    def __init__(self, specs: list[layout.FaultSpec], replica: int, rank: int, run_dir: Path) -> None:
        mine = [f for f in specs if f.action == "corrupt" and f.replica == replica and rank == 0]
        self.by_step = {f.step: f for f in mine}
        # --corrupt-sync: the outer step's stages (``ftrun.worker.sketch_outer``), rank 0 as above
        self.sync_by_step = {
            f.step: f for f in specs if f.action == "corrupt-sync" and f.replica == replica and rank == 0
        }
        self.run_dir = run_dir
        self.keep_sums = any(f.kind == "stale" for f in mine)  # the previous round's SUM, per fragment
        self._last: dict[int, dict] = {}  # fragment -> index -> a SUM tensor of its last round (stale only)
        self._current: dict[int, dict] = {}
        self._fired: set[str] = set()

    def _kind(self, sync_step: int | None, kind: str, sync: bool = False) -> layout.FaultSpec | None:
        if sync_step is None:
            return None
        f = (self.sync_by_step if sync else self.by_step).get(sync_step)
        if (
            f is None
            or f.kind != kind
            or layout.fault_marker(self.run_dir, f.key).exists()
            and f.key not in self._fired
        ):
            return None
        if f.key not in self._fired:
            self._fired.add(f.key)
            marker = layout.fault_marker(self.run_dir, f.key)
            marker.parent.mkdir(exist_ok=True)
            fired = layout.FaultMarker(
                f.replica, f.step, f.action, 0.0, f.kind, fired_at=time.time(), fired_step=sync_step, pid=os.getpid()
            )
            atomic_write(marker, layout.to_json(fired), "fault marker")  # the parent may read it meanwhile
            log.warning("fault %s (%s) fires in the round synced at step %d", f.key, f.kind, sync_step)
        return f

    def at_issue(self, tensor, sync_step: int | None, fragment: int, index: int) -> None:
        """``index``: the tensor's place in the round's collectives, in issue order."""
        if self.keep_sums and index == 0:  # a new round of the fragment: the last one becomes "previous"
            self._last[fragment], self._current[fragment] = self._current.get(fragment, {}), {}
        if self._kind(sync_step, "drop"):
            tensor.zero_()  # the collective reads zeros: this contribution is missing everywhere

    def before_sum(self, tensor, sync_step: int | None, fragment: int, index: int) -> None:
        """Runs on the collective's completion thread, in any order across ``index``."""
        if self.keep_sums:
            prev = self._last.get(fragment, {}).get(index)
            if prev is not None and prev.shape == tensor.shape and self._kind(sync_step, "stale"):
                tensor.copy_(prev)
            self._current.setdefault(fragment, {})[index] = tensor.detach().clone()
        if index == 0 and self._kind(sync_step, "noise"):
            flat = tensor.view(-1)
            i = int(flat.abs().argmax())
            flat[i] = flat[i] * (1 + 1e-3)

    def after_sum(self, tensor, sync_step: int | None, participants: int) -> None:
        if participants > 0 and self._kind(sync_step, "wrong-count"):
            tensor.mul_(
                participants / (participants + 1)
            )  # torchft's / participants then gives SUM / (participants + 1)

    def before_outer_step(self, grads: list, sync_step: int | None) -> None:
        if self._kind(sync_step, "late"):
            for g in grads:
                g.mul_(1.1)

    # --- --corrupt-sync R@S:KIND (``ftrun.fault_flags.SYNC_KINDS``) ---

    def before_issue(self, tensor, sync_step: int | None) -> None:
        """``sign``: the pseudo-gradient negated before the collective (and its sketch) sees it."""
        if self._kind(sync_step, "sign", sync=True):
            tensor.neg_()

    def skip_save(self, sync_step: int | None) -> bool:
        """``stale``: torchft's ``save_parameters`` skipped after this sync's outer step."""
        return self._kind(sync_step, "stale", sync=True) is not None

    def outer_lr_factor(self, sync_step: int | None) -> float | None:
        """``lr``: the outer step of this sync with its lr times this factor."""
        return OUTER_LR_FACTOR if self._kind(sync_step, "lr", sync=True) else None

    def ignore_alpha(self, sync_step: int | None) -> bool:
        """``alpha``: this sync's merge with alpha 0 (the globals kept, the local parameters ignored)."""
        return self._kind(sync_step, "alpha", sync=True) is not None


OUTER_LR_FACTOR = 2.0  # --corrupt-sync lr: the outer step takes 2x the configured lr
