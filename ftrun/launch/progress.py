"""Follow the per-rank event logs while a run is going (what the live view and watchdog read)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ftrun.event_log import parse_lines
from ftrun.launch.tail import LogTail
from ftrun.layout import EventRecord


@dataclass
class GroupProgress:
    """What rank 0 of one replica group has reported so far: counters and latest values only,
    never the records themselves (the parent follows a run of any length in constant memory;
    the records stay on disk in the event log, where every reader finds them)."""

    replica: int
    step: int = 0
    manager_step: int = 0
    loss: float | None = None
    commits: int = 0
    failed_commits: int = 0
    last_sync: str = "-"
    participants: int | None = None
    records: int = 0  # how many records were fed (a count: the parent keeps no records)


class EventLogTail:
    """Incrementally reads one JSONL event log (complete lines only)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lines = LogTail(path)

    def read_new(self) -> list[EventRecord]:
        return parse_lines(self._lines.read_new())


def update(progress: GroupProgress, records: list[EventRecord]) -> None:
    """Fold ``records`` into ``progress``'s counters and latest values; keeps no reference to them."""
    for rec in records:
        progress.records += 1
        if rec.step is None:  # a restarted group, not yet realigned by a quorum
            progress.last_sync = f"rejoining (restart {rec.restart})"
            continue
        progress.step = rec.step
        progress.manager_step = rec.manager_step_after
        progress.loss = rec.loss
        progress.participants = rec.participants
        if rec.synced is not None:
            ok = rec.commit
            progress.commits += bool(ok)
            progress.failed_commits += ok is False
            progress.last_sync = f"frag {rec.synced} @ {rec.step} {'ok' if ok else 'FAILED'}"
