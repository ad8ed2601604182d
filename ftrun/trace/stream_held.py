"""The events an ``inside`` name holds while the streaming reader (``ftrun.trace.stream``) has not
yet seen every container, and which of them start within one. Torch-free."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from itertools import compress, repeat
from operator import and_, attrgetter, eq, le

from ftrun.trace.schema import TraceEvent

_PID, _TID, _TS = attrgetter("pid"), attrgetter("tid"), attrgetter("ts")


class Held:
    """Held events, their ``args`` copied out of their chunk's buffer (which is then freed with
    the chunk's other events), with the pid, tid and ts of each, one list each, read while the
    events are in cache. (Re-encoding them instead, to decode the few released, measured ~9x
    the cost: ~900 ns a held event.)"""

    def __init__(self) -> None:
        self.events: list[TraceEvent] = []
        self.pid: list[int | str] = []
        self.tid: list[int | str] = []
        self.ts: list[float] = []

    def add(self, evs: list[TraceEvent]) -> None:
        for e in evs:
            e.args = e.args.copy()
        self.events += evs
        self.pid += map(_PID, evs)
        self.tid += map(_TID, evs)
        self.ts += map(_TS, evs)

    def pick(self, indices: list[int]) -> list[TraceEvent]:
        """The held events at ``indices``."""
        return list(map(self.events.__getitem__, indices))


def within(held: Held, containers: list[tuple[int | str, int | str, float, float]]) -> list[int]:
    """The indices (ascending) of the held events that start within a container of their pid
    and tid (closed intervals, as ``ftrun.trace.spans`` nests spans); per event only C-level
    work. Events in time order (a kineto trace's, per thread) are sliced out of each span by
    bisection; others are placed one by one."""
    by_thread: dict[tuple[int | str, int | str], list[tuple[float, float]]] = {}
    for pid, tid, start, dur in containers:
        by_thread.setdefault((pid, tid), []).append((start, start + dur))
    n = len(held.ts)
    if not n or not by_thread:
        return []
    out: list[int] = []
    for (pid, tid), spans in by_thread.items():
        evs: Sequence[int]
        if held.pid.count(pid) == n and held.tid.count(tid) == n:  # every held event is of this thread
            evs, ts = range(n), held.ts
        else:
            mine = list(map(and_, map(eq, held.pid, repeat(pid)), map(eq, held.tid, repeat(tid))))
            evs, ts = list(compress(range(n), mine)), list(compress(held.ts, mine))
        unions: list[list[float]] = []  # the spans' union, in order
        for lo, hi in sorted(spans):
            if unions and lo <= unions[-1][1]:
                unions[-1][1] = max(unions[-1][1], hi)
            else:
                unions.append([lo, hi])
        if sorted(ts) == ts:
            for lo, hi in unions:
                out += evs[bisect_left(ts, lo) : bisect_right(ts, hi)]
            continue
        starts = [lo for lo, _ in unions]
        ends = [float("-inf"), *(hi for _, hi in unions)]  # ends[i]: the i-th union's end (1-based)
        # bisect_right: how many unions start at or before ts, so ends[that] ends the one it may lie in
        out += compress(evs, map(le, ts, map(ends.__getitem__, map(bisect_right, repeat(starts), ts))))
    return sorted(out) if len(by_thread) > 1 else out  # (the threads' indices are disjoint)
