"""Which worker (replica, rank) each trace file belongs to, and which files go together.

Sources, in order: the run dir's manifest; the file name (``replica{r}_rank{g}``, see
``layout.parse_worker``); else file order for the replica, and for the rank the one torchft's
process-group name states (``torchft_quorum_{q}_rank_{g}``, ``TraceSpans.group_rank``), else 0.
The trace's ``distributedInfo`` is the default group's rank and world size — a DDP job's global
rank, or a torchft replica group's own — never a replica id: it is shown as "global rank 3 of
8" (``Worker.global_rank`` / ``world_size``). Files without manifest or name identity are
grouped by folder and global rank; inside a group, windows whose step ranges do not overlap
belong to one worker (torchft's ``step-60.json``, ``step-120.json``), overlapping ones to
different workers.

Bad input (``BadInput``, naming both files): two traces that one worker cannot both have
written — the same trace twice (identical step spans, whatever the file names), or two traces
identified (by file name) as one worker whose step ranges overlap (a folder mixing two runs).
"""

from __future__ import annotations

from typing import Any

import msgspec

from ftrun.errors import BadInput
from ftrun.layout import parse_worker
from ftrun.trace.discover import TraceFile
from ftrun.trace.spans import TraceSpans

MANIFEST, FILE_NAME, ORDER = "manifest", "file name", "file order"
PG_RANK = "file order; rank from torchft's process-group name"


class Worker(msgspec.Struct):
    replica: int
    rank: int
    source: str
    traces: list[TraceSpans] = msgspec.field(default_factory=list)

    @property
    def global_rank(self) -> int | None:
        """``distributedInfo.rank`` when every trace of the worker states the same one."""
        got = {t.rank for t in self.traces}
        return got.pop() if len(got) == 1 else None

    @property
    def world_size(self) -> int | None:
        got = {t.world_size for t in self.traces}
        return got.pop() if len(got) == 1 else None


def _range(t: TraceSpans) -> tuple[int, int]:
    nums = [s.number for s in t.steps]
    return min(nums), max(nums)


def _fingerprint(t: TraceSpans) -> tuple[Any, ...]:
    return tuple((s.number, s.span.ts, s.span.end) for s in t.steps)


def _refuse_duplicates(spans: list[TraceSpans]) -> None:
    seen: dict[tuple[Any, ...], TraceSpans] = {}
    for t in spans:
        other = seen.setdefault(_fingerprint(t), t)
        if other is not t:
            raise BadInput(
                f"{other.path} and {t.path}: the same trace (identical step spans) given twice; give each trace once"
            )


def _refuse_overlaps(w: Worker) -> None:
    ts = sorted(w.traces, key=lambda t: _range(t))
    for a, b in zip(ts, ts[1:], strict=False):  # neighbours
        if _range(b)[0] <= _range(a)[1]:
            (a0, a1), (b0, b1) = _range(a), _range(b)
            raise BadInput(
                f"{a.path} and {b.path}: both replica {w.replica} rank {w.rank} (by {w.source}) with overlapping steps "
                f"{a0}..{a1} and {b0}..{b1}; traces of two runs mixed? give one run's traces"
            )


def assign(files: list[TraceFile], spans: list[TraceSpans]) -> list[Worker]:
    """Workers sorted by (replica, rank), each with its traces sorted by first step."""
    _refuse_duplicates(spans)
    known: dict[tuple[int, int], Worker] = {}
    loose: dict[tuple[str, int | None], list[TraceSpans]] = {}
    for f, t in zip(files, spans, strict=True):  # a spans per file
        if f.replica is not None and f.rank is not None:
            key, src = (f.replica, f.rank), f.source or MANIFEST
        elif (named := parse_worker(f.path.name)) is not None:
            key, src = named, FILE_NAME
        else:
            loose.setdefault((str(f.path.parent), t.rank), []).append(t)
            continue
        known.setdefault(key, Worker(key[0], key[1], src)).traces.append(t)

    lanes: list[tuple[int | None, list[TraceSpans]]] = []
    for (_, rank), group in loose.items():
        mine: list[list[TraceSpans]] = []
        for t in sorted(group, key=lambda t: _range(t)[0]):
            lo = _range(t)[0]
            for lane in mine:
                if _range(lane[-1])[1] < lo:
                    lane.append(t)
                    break
            else:
                mine.append([t])
        lanes.extend((rank, lane) for lane in mine)

    for w in known.values():
        if w.source == FILE_NAME:  # a manifest's identity is the run's own; a file name may mix runs
            _refuse_overlaps(w)

    nxt = max((r for r, _ in known), default=-1) + 1
    for _, lane in lanes:
        ranks = {t.group_rank for t in lane}
        rank = ranks.pop() if len(ranks) == 1 else None
        w = Worker(nxt, rank if rank is not None else 0, PG_RANK if rank is not None else ORDER, lane)
        nxt += 1
        known[(w.replica, w.rank)] = w
    for w in known.values():
        w.traces.sort(key=lambda t: _range(t)[0])
    return [known[k] for k in sorted(known)]
