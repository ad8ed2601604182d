"""torch.profiler set-up for one rank: a step window, torchft's step numbering, tb layout.

``prof.start()`` before the loop and ``prof.step()`` at the top of every iteration, as
torchft's ``train_diloco.py`` does: ``ProfilerStep#k`` then holds training step k (1-based).
The schedule records exactly steps A..B and writes
``traces/replica{r}_rank{g}.{A}.pt.trace.json.gz`` when step B ends (temp + rename). All threads are profiled
(``profile_all_threads``), so spans on helper threads (the emulated link's holds) are kept.
A relaunched group is profiled by ``RecoveryProfile`` instead (no window: its step numbers are
known only once it has rejoined).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch
from torch.profiler import ProfilerAction

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


def export_trace(prof, path: Path) -> Path:
    """Write the chrome trace under a temporary name and rename it to ``path`` once complete:
    SIGTERM or a full disk mid-write never leaves a 0-byte or partial trace under its final name
    (``ftrun.output.atomic_path``; the temporary keeps the ``.gz`` ending torch compresses by)."""
    with atomic_path(path, "trace") as tmp:
        prof.export_chrome_trace(str(tmp))
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

        args["experimental_config"] = _ExperimentalConfig(profile_all_threads=True)
    except (ImportError, TypeError):  # older torch: threads created later are not profiled
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
            prof.export_chrome_trace(str(self.path))
