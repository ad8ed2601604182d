"""``meta/replica{r}_rank{g}.json`` (``layout.RankMeta``): what a rank knows about itself, for the parent.

Written at start (status ``running``), at the end (``done``, with commits) or on an error
(``failed``: ``error`` = the error's first line, which the parent shows; ``error_type``; and
``phase`` = the torchft wait it left, ``quorum`` or ``sync``, or ``step``). The parent tells
failures apart by these fields, never by the text of a log.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from ftrun import layout
from ftrun.output import atomic_write


class RankMeta:
    """The rank's meta record (``layout.RankMeta``) and where it goes. The record holds the lists
    it was given: one the rank keeps filling (``traces``, as the profiler writes them) is written
    as it stands at each ``write``."""

    def __init__(self, path: Path, record: layout.RankMeta) -> None:
        self.path = path
        # torch's version is a str subclass the encoder refuses: plain text
        versions = {k: None if v is None else str(v) for k, v in record.versions.items()}
        self.record = msgspec.structs.replace(record, pid=os.getpid(), versions=versions)
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, status: str) -> None:
        """The record as it stands, with ``status`` (running | done | failed)."""
        self.record = msgspec.structs.replace(self.record, status=status)
        atomic_write(self.path, layout.to_json(self.record, indent=1))  # the parent may read it meanwhile

    def done(self, commits: int, failed_commits: int, final_manager_step: int | None) -> None:
        """``done``, with the rank's commit counts and the Manager's last step."""
        self.record = msgspec.structs.replace(
            self.record, commits=commits, failed_commits=failed_commits, final_manager_step=final_manager_step
        )
        self.write("done")

    def failed(self, e: BaseException, phase: str | None = None) -> None:
        """``failed``, with the error's first line, its type and the torchft wait it left (module docstring)."""
        self.record = msgspec.structs.replace(
            self.record,
            error=f"{type(e).__name__}: {e}".strip().splitlines()[0][:500],
            error_type=type(e).__name__,
            phase=phase or "step",
        )
        self.write("failed")
