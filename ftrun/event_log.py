"""Read the JSON-lines event logs: the ranks' step logs (``events/replica{r}_rank{g}.jsonl``, one
``ftrun.layout.EventRecord`` per line) and the parent's run log (``events/run.jsonl``, one
``ftrun.layout.RunEvent`` per line), the ranks' lifecycle logs (``events/lifecycle/``, one
``ftrun.layout.LifecycleEvent`` per line); and what one rank's log says about its run
(``replica_stats``). The one reader; torch-free.

A group killed mid-write leaves a torn last line, and a relaunched group appends after it, so
a torn record (a line starting with ``{`` that does not parse) may also sit mid-file: it is
skipped. Anything else that is not a record is skipped too, unless ``strict``, where a line
that is not even a torn record, a JSON object that is not a record, or an unreadable file, is
``BadInput`` naming the place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, overload

import msgspec

from ftrun.errors import BadInput
from ftrun.layout import EventRecord, LifecycleEvent, RunEvent
from ftrun.small_files import Missing, read_file

# Bytes of one event log read at most: a step's line is ~0.3 KB, ~2 KB with the numerics
# sketches of a send and a sync, so 1 GB holds a million sketched steps of one rank.
EVENT_LOG_LIMIT = 1 << 30

R = TypeVar("R", EventRecord, RunEvent, LifecycleEvent)


@overload
def parse_lines(lines: Sequence[str | bytes], path: Path | None = None, strict: bool = False) -> list[EventRecord]: ...


@overload
def parse_lines(
    lines: Sequence[str | bytes], path: Path | None = None, strict: bool = False, *, record_type: type[R]
) -> list[R]: ...


def parse_lines(
    lines: Sequence[str | bytes], path: Path | None = None, strict: bool = False, record_type: type[Any] = EventRecord
) -> list[Any]:
    """The records of ``lines`` (torn and foreign lines skipped as the module docstring says),
    of ``record_type`` (``EventRecord`` unless given)."""
    out: list[Any] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(msgspec.json.decode(line, type=record_type))
        except msgspec.ValidationError as e:  # JSON, but not a record
            if strict and line.lstrip()[:1] in ("{", b"{"):
                raise BadInput(f"{path}:{n}: not an event record ({e})") from None
        except msgspec.DecodeError:
            text = line.decode(errors="replace") if isinstance(line, bytes) else line
            if strict and n != len(lines) and not text.lstrip().startswith("{"):
                raise BadInput(f"{path}:{n}: not a JSON line") from None
    return out


def _lines(path: Path, strict: bool, what: str) -> list[str]:
    try:
        data = read_file(path, EVENT_LOG_LIMIT, what)
    except Missing:
        if strict:
            raise
        return []
    try:
        text = data.decode() if strict else data.decode(errors="replace")
    except UnicodeDecodeError as e:
        raise BadInput(f"{path}: unreadable {what} ({e})") from None
    return text.splitlines()


def read_event_log(path: Path, strict: bool = False) -> list[EventRecord]:
    """Every step record of one rank's event log ([] for a missing file unless ``strict``)."""
    return parse_lines(_lines(path, strict, "event log"), path, strict)


def read_run_events(path: Path, strict: bool = False) -> list[RunEvent]:
    """Every record of the parent's run log ``events/run.jsonl`` ([] for a missing file unless ``strict``)."""
    return parse_lines(_lines(path, strict, "run log"), path, strict, record_type=RunEvent)


def read_lifecycle(path: Path, strict: bool = False) -> list[LifecycleEvent]:
    """Every record of one rank's lifecycle log ``events/lifecycle/replica{r}_rank{g}.jsonl``."""
    return parse_lines(_lines(path, strict, "lifecycle log"), path, strict, record_type=LifecycleEvent)


def stepped(records: list[EventRecord]) -> list[EventRecord]:
    """The records of training steps (a restarted group's records before it rejoined have no step)."""
    return [x for x in records if x.step is not None]


@dataclass
class ReplicaStats:
    """What one rank's event log says about its whole run (every figure from ``stepped`` records).

    ``records``: step records (a step run twice by a restarted group counts twice); ``steps``:
    distinct steps; ``train_s``: sum of step times; ``exposed_data_s``: sum of the syncs'
    ``exposed_s``; ``exposed_control_s``: sum of ``quorum_s + commit_s``; ``median_plain_step_s``:
    median time of the steps with neither send, sync nor quorum change (pure compute).
    """

    records: int = 0
    steps: int = 0
    last_step: int = 0
    train_s: float = 0.0
    syncs: int = 0
    commits: int = 0
    failed_commits: int = 0
    exposed_data_s: float = 0.0
    exposed_control_s: float = 0.0
    median_plain_step_s: float | None = None
    final_loss: float | None = None
    final_manager_step: int | None = None
    losses: dict[int, float] = field(default_factory=dict)

    @property
    def steps_per_s(self) -> float | None:
        return self.records / self.train_s if self.train_s else None


def replica_stats(records: list[EventRecord]) -> ReplicaStats:
    recs = stepped(records)
    if not recs:
        return ReplicaStats()
    syncs = [x for x in recs if x.synced is not None]
    plain = sorted(x.step_time_s for x in recs if x.sent is None and x.synced is None and not x.quorums)
    steps = [x.step for x in recs if x.step is not None]  # every one of them: recs are stepped
    return ReplicaStats(
        records=len(recs),
        steps=len(set(steps)),
        last_step=steps[-1],
        train_s=sum(x.step_time_s for x in recs),
        syncs=len(syncs),
        commits=sum(1 for x in recs if x.commit),
        failed_commits=sum(1 for x in recs if x.commit is False),
        exposed_data_s=sum(seconds(x.exposed_s) for x in syncs),
        exposed_control_s=sum(seconds(x.quorum_s) + seconds(x.commit_s) for x in recs),
        median_plain_step_s=plain[len(plain) // 2] if plain else None,
        final_loss=recs[-1].loss,
        final_manager_step=recs[-1].manager_step_after,
        losses={s: x.loss for s, x in zip(steps, recs, strict=True)},
    )


def seconds(value: float | msgspec.UnsetType) -> float:
    """A record's optional timing (``send_s``, ``exposed_s``, ...) as seconds, 0 when not measured."""
    return 0.0 if value is msgspec.UNSET else value
