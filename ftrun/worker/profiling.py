"""torch.profiler set-up for one rank: a step window, torchft's step numbering, tb layout.

``prof.start()`` before the loop and ``prof.step()`` at the top of every iteration, as
torchft's ``train_diloco.py`` does: ``ProfilerStep#k`` then holds training step k (1-based).
The schedule records exactly steps A..B and writes
``traces/replica{r}_rank{g}.{A}.pt.trace.json.gz`` when step B ends (temp + rename). All threads are profiled
(``profile_all_threads``), so spans on helper threads (the emulated link's holds) are kept.
A relaunched group is profiled by ``RecoveryProfile`` instead (no window: its step numbers are
known only once it has rejoined); a surviving group around another group's fault by
``AroundFault`` (``--profile-recovery``).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import torch
from isal import igzip
from torch.profiler import ProfilerAction

from ftrun import layout
from ftrun.layout import trace_name
from ftrun.output import atomic_path


def window_schedule(first: int, last: int) -> Callable[[int], ProfilerAction]:
    def action(step_num: int) -> ProfilerAction:
        if step_num == first - 1:
            return ProfilerAction.WARMUP
        if first <= step_num < last:
            return ProfilerAction.RECORD
        if step_num == last:
            return ProfilerAction.RECORD_AND_SAVE
        return ProfilerAction.NONE

    return action


# the traces' gzip, by ISA-L (the ``isal`` package, which ``ftrun.gunzip`` inflates them with)
# at its default level: a rank compresses its trace after its last step, where a short run (a
# sweep cell) waits on it, and ISA-L's deflate takes a fraction of zlib's time for files about
# half again as large as zlib's level 6 (torch's own ``.gz`` export: zlib's 9, slower still)
TRACE_GZIP_LEVEL = 2


def export_trace(prof, path: Path) -> Path:
    """Write the chrome trace under a temporary name and rename it to ``path`` once complete:
    SIGTERM or a full disk mid-write never leaves a 0-byte or partial trace under its final name
    (``ftrun.output.atomic_path``). A ``.gz`` path is written as torch's export does (plain JSON
    to a temporary file, then compressed: one gzip member, ISA-L's at ``TRACE_GZIP_LEVEL``)."""
    with atomic_path(path, "trace") as tmp:
        if not path.name.endswith(".gz"):
            prof.export_chrome_trace(str(tmp))
            return path
        plain = tmp.with_name(tmp.name + ".json")
        try:
            prof.export_chrome_trace(str(plain))
            with plain.open("rb") as fin, igzip.open(tmp, "wb", compresslevel=TRACE_GZIP_LEVEL) as fout:
                shutil.copyfileobj(fin, fout, 1 << 20)
        finally:
            plain.unlink(missing_ok=True)
    return path


def make_profiler(window: tuple[int, int], trace_dir: Path, replica: int, rank: int, written: list[str]):
    first, last = window
    trace_dir.mkdir(parents=True, exist_ok=True)

    def on_ready(prof: torch.profiler.profile) -> None:
        written.append(export_trace(prof, trace_dir / trace_name(replica, rank, first)).name)

    return torch.profiler.profile(schedule=window_schedule(first, last), on_trace_ready=on_ready, **_profiler_args())


def _profiler_args() -> dict:
    """What every ftrun profile records: CPU (+ CUDA), shapes, all threads."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    args: dict = {"activities": activities, "record_shapes": True}
    try:
        from torch._C._profiler import _ExperimentalConfig
    except ImportError:  # older torch: threads created later are not profiled
        return args
    # trace_only: ftrun only exports the trace, never reads the profiler's Python events, so
    # stopping it skips building them (a torch without the option builds them, as before)
    try:
        args["experimental_config"] = _ExperimentalConfig(profile_all_threads=True, trace_only=True)
    except TypeError:
        try:
            args["experimental_config"] = _ExperimentalConfig(profile_all_threads=True)
        except TypeError:  # older torch: threads created later are not profiled
            pass
    return args


class RecoveryProfile:
    """``--profile-recovery``: a relaunched group profiled from before its torchft Manager is
    built through its first commit (quorum, ``_pg::configure``, the heal's ``recv_checkpoint``
    and the catch-up steps), no step schedule; written by ``finish`` to
    ``traces/recovery/replica{r}_rank{g}.restart{n}.pt.trace.json.gz``, beside the window traces."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._prof: torch.profiler.profile | None = torch.profiler.profile(**_profiler_args())
        self._prof.start()

    @property
    def active(self) -> bool:
        return self._prof is not None

    def finish(self) -> None:
        """Stop and export (once); later calls do nothing."""
        prof, self._prof = self._prof, None
        if prof is not None:
            prof.stop()
            export_trace(prof, self.path)


DROPS_A_GROUP = ("kill", "sigterm", "hang")  # faults that take a group out of the quorum


class AroundFault:
    """``--profile-recovery`` on a surviving group: profiled around the quorum change another
    group's fault causes, from just before the quorum without that group through the first
    commit with it back; written to ``traces/recovery/replica{r}_rank{g}.{fault key}.pt.trace.json.gz``
    (``layout.around_fault_trace_name``), beside the relaunched group's recovery trace.

    Per fault of another group (in step order): armed one step before the fault's step (the
    groups step together between quorums) or as soon as its marker says it fired; recording
    whenever no other profile of this process is (``busy``: the step window, a relaunched group's
    own recovery profile: torch runs one profiler at a time), so a recovery that overlaps the
    window is recorded on both sides of it (a second part, ``.2``), the window trace holding the
    middle. Back = a quorum, computed in a step begun after the fault fired, that includes the
    group; done at the next commit. A fault that has not fired ``give_up`` steps after its step
    (its group died earlier) is dropped, its recording discarded. A recording stops for good
    once it holds ``max_steps`` steps with the group not back: the quorum without the group and
    its reconfigure come within a few steps of the fault, while a slow relaunch (survivors wait
    for it past ``--steps``) would otherwise grow one trace with every step, and its stop and
    export with it; the heal source's side is then taken from its lifecycle record. Faults that
    had fired before this process's first step are not watched: it was not one of their survivors."""

    def __init__(
        self,
        specs: list[layout.FaultSpec],
        replica: int,
        rank: int,
        run_dir: Path,
        busy: Callable[[int], bool],
        give_up: int,
        max_steps: int = 400,
    ) -> None:
        self.todo = sorted(
            (f for f in specs if f.replica != replica and f.action in DROPS_A_GROUP), key=lambda f: f.step
        )
        self.replica, self.rank, self.run_dir = replica, rank, run_dir
        self.busy, self.give_up, self.max_steps = busy, give_up, max_steps
        self._prof: torch.profiler.profile | None = None
        self._part = 0
        self._recorded = 0  # steps recorded for the current fault, over its parts
        self._capped = False  # max_steps reached: no more recording for the current fault
        self._fired = False  # the current fault's marker was seen at a step's start
        self._back = False
        self._began_fired = False  # the current step began after the fault fired
        self._first = True  # no step seen yet
        self.written: list[Path] = []

    @property
    def active(self) -> bool:
        return self._prof is not None

    def at_step(self, step: int) -> None:
        """At the top of step ``step`` (after the window profiler's ``prof.step()``)."""
        if self._first:  # a fault that fired before this process trained: it did not survive it
            # (a relaunched group or a warm spare would otherwise record a recovery it was not in,
            # from its own first steps on, and stop between steps to write it)
            self._first = False
            self.todo = [f for f in self.todo if not layout.fault_marker(self.run_dir, f.key).exists()]
        if not self.todo:
            return
        f = self.todo[0]
        if not self._fired and layout.fault_marker(self.run_dir, f.key).exists():
            self._fired = True
        self._began_fired = self._fired
        if not self._fired and step > f.step + self.give_up:  # never fired: its group was gone before
            self._stop(export=False)
            self._next()
            return
        armed = (self._fired or step >= f.step - 1) and not self._capped
        if self._prof is not None and self._recorded >= self.max_steps and not self._back:
            self._stop(export=True)
            self._capped = True
        elif self._prof is not None and self.busy(step + 1):
            self._stop(export=True)  # the window starts next step: it records from there
        elif self._prof is None and armed and not self.busy(step) and not self.busy(step + 1):
            self._part += 1
            self._prof = torch.profiler.profile(**_profiler_args())
            self._prof.start()
        if self._prof is not None:
            self._recorded += 1

    def after_step(self, quorums: list[layout.Quorum], committed: bool) -> None:
        """After the step: the quorums it computed, whether it committed. Only a step begun after
        the fault fired can show the group back (a quorum with the old incarnation was answered
        before it died)."""
        if not self.todo or not self._began_fired:
            return
        if any(self.todo[0].replica in q.participants for q in quorums):
            self._back = True
        if self._back and committed:
            self._stop(export=True)
            self._next()

    def finish(self) -> None:
        """The run ended: what was recorded is written."""
        self._stop(export=True)
        self.todo = []

    def _next(self) -> None:
        self.todo.pop(0)
        self._part, self._fired, self._back, self._began_fired = 0, False, False, False
        self._recorded, self._capped = 0, False

    def _stop(self, export: bool) -> None:
        prof, self._prof = self._prof, None
        if prof is None:
            return
        prof.stop()
        if export:
            name = layout.around_fault_trace_name(self.replica, self.rank, self.todo[0].key, self._part)
            out = layout.recovery_trace_dir(self.run_dir)
            out.mkdir(parents=True, exist_ok=True)
            self.written.append(export_trace(prof, out / name))
