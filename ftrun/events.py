"""Read the JSON-lines event logs (``events/*.jsonl``; records: ``ftrun.layout.EventRecord``),
and what one rank's log says about its run (``replica_stats``). The one reader; torch-free.

A group killed mid-write leaves a torn last line, and a relaunched group appends after it, so
a torn record (a line starting with ``{`` that does not parse) may also sit mid-file: it is
skipped. Anything else that is not a JSON object is skipped too, unless ``strict``, where a
line that is not even a torn record, or an unreadable file, is ``BadInput`` naming the place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ftrun.errors import BadInput


def parse_lines(lines: list[str] | list[bytes], path: Path | None = None, strict: bool = False) -> list[dict]:
    out: list[dict] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            text = line.decode(errors="replace") if isinstance(line, bytes) else line
            if strict and n != len(lines) and not text.lstrip().startswith("{"):
                raise BadInput(f"{path}:{n}: not a JSON line") from None
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def read_events(path: Path, strict: bool = False) -> list[dict]:
    """Every record of one event log ([] for a missing file unless ``strict``)."""
    try:
        text = path.read_text() if strict else path.read_text(errors="replace")
    except (OSError, UnicodeDecodeError) as e:
        if strict:
            raise BadInput(f"{path}: unreadable event log ({e})") from None
        return []
    return parse_lines(text.splitlines(), path, strict)


def stepped(records: list[dict]) -> list[dict]:
    """The records of training steps (a restarted group's records before it rejoined have no step)."""
    return [x for x in records if x.get("step") is not None]


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
    median_plain_step_s: Optional[float] = None
    final_loss: Optional[float] = None
    final_manager_step: Optional[int] = None
    losses: dict[int, float] = field(default_factory=dict)

    @property
    def steps_per_s(self) -> Optional[float]:
        return self.records / self.train_s if self.train_s else None


def replica_stats(records: list[dict]) -> ReplicaStats:
    recs = stepped(records)
    if not recs:
        return ReplicaStats()
    syncs = [x for x in recs if x.get("synced") is not None]
    plain = sorted(x["step_time_s"] for x in recs if x.get("sent") is None and x.get("synced") is None and not x.get("quorums"))
    return ReplicaStats(
        records=len(recs),
        steps=len({x["step"] for x in recs}),
        last_step=recs[-1]["step"],
        train_s=sum(x["step_time_s"] for x in recs),
        syncs=len(syncs),
        commits=sum(1 for x in recs if x.get("commit")),
        failed_commits=sum(1 for x in recs if x.get("commit") is False),
        exposed_data_s=sum(x.get("exposed_s", 0.0) for x in syncs),
        exposed_control_s=sum(x.get("quorum_s", 0.0) + x.get("commit_s", 0.0) for x in recs),
        median_plain_step_s=plain[len(plain) // 2] if plain else None,
        final_loss=recs[-1]["loss"],
        final_manager_step=recs[-1]["manager_step_after"],
        losses={x["step"]: x["loss"] for x in recs},
    )
