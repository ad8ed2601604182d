"""Where rank 0 of a group is right now: ``<run>/progress/replica{r}.txt`` = "STEP PHASE".

Phases: ``step`` (computing), ``quorum`` (in torchft's start_quorum: waiting for the other
groups), ``sync`` (in perform_sync: waiting for the fragment's allreduce and the commit). The
parent's watchdog reads it to tell a group that hangs from the groups that wait for it.

Cost: the file is opened once and rewritten in place with one ``os.pwrite`` of a fixed-width,
space-padded record (a write-then-rename per phase change cost ~2.5 ms on this machine's
filesystem, several times per training step). A reader that races a write sees the old or the
new record (one small write at offset 0), or at worst a mix that fails to parse: ``read``
then returns None, as for a missing file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ftrun import layout
from ftrun.errors import BadInput
from ftrun.small_files import read_file

WIDTH = 32  # bytes per record: "STEP PHASE", space-padded
PROGRESS_LIMIT = 4 << 10  # bytes of a progress file read at most (one is one record of WIDTH)


class Whereabouts:
    def __init__(self, run_dir: Path, replica: int, enabled: bool) -> None:
        self.path = layout.progress_file(run_dir, replica)
        self.enabled = enabled
        self.step = 0
        self.failed_in: str | None = None  # the phase an exception left, if one did
        self._fd: int | None = None
        self._last = ""
        if enabled:
            self.path.parent.mkdir(exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)

    def set(self, phase: str, step: int | None = None) -> None:
        if step is not None:
            self.step = step
        if self._fd is not None:
            text = f"{self.step} {phase}"
            if text != self._last:
                os.pwrite(self._fd, text.ljust(WIDTH).encode()[:WIDTH], 0)
                self._last = text

    def around(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self.set(phase)
            try:
                return fn(*args, **kwargs)
            except BaseException:
                self.failed_in = self.failed_in or phase
                raise
            finally:
                self.set("step")

        return wrapped


def read(run_dir: Path, replica: int) -> tuple[int, str] | None:
    try:
        text = read_file(layout.progress_file(run_dir, replica), PROGRESS_LIMIT, "progress").decode()
        step, phase = text.split()
        return int(step), phase
    except (BadInput, ValueError):  # (UnicodeDecodeError is a ValueError)
        return None
