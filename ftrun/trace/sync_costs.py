"""What a run's window traces say about the costs the link emulator does not replace. Torch-free.

The emulator (``ftrun.worker.link``) runs every collective for real and only holds its
completion: a collective completes at the later of its hold and its real completion. Two real
costs therefore reach the training thread, and ``ftrun plan --check`` models both from these
measurements (``ftrun.plan.Workload``):

* ``real_collective_s``: the pace of the real backend allreduces on loopback (``gloo:all_reduce``
  spans). The process group runs a send's k collectives on ``collective_threads`` worker
  threads (the spans' distinct threads), so its chain — first span's start (it also waits for
  the peer groups to issue theirs) to last span's end, gaps where the threads did not run
  included — is ceil(k / threads) rounds: the median over the traced chains of span / rounds.
  Under the profiler every thread is instrumented (the spans are the evidence), so this is the
  cost on the profiled steps; outside them the emulator times each send's real collectives
  itself (the event log's ``real_s``), which ``ftrun.plan`` prefers where a run has it.
* ``sync_work_s``: the sync's own work on the training thread after its data is in —
  torchft's per-tensor divide callbacks and ftrun's sketches of each result, which run inside
  ``perform_sync``'s ``work.wait()`` calls: ``torchft::local_sgd::wait``'s end minus the later
  of the sync's first wait (ftrun's ``ftrun::sketch::wait`` right before ``perform_sync`` in the
  same step, where the numeric check's sketch of the SUMs follows; else ``perform_sync``'s start:
  ``ftrun.check.comm``'s ``exposed``) and the end of the last collective span (a real allreduce
  or a link hold) that began before it. Mean over the traced syncs; ``per_sync`` holds each traced
  sync's own (replica, step, seconds), the step from the ``ftrun::step#S`` span around it: how
  long each group took after the allreduce that aligned the groups (``ftrun plan --check``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ftrun.torchft_compat import FTRUN_STEP_PREFIX, FTRUN_STEP_RE, LABELS, LINK_HOLD, SKETCH_WAIT
from ftrun.trace.load import load_trace
from ftrun.trace.schema import name_filter, trace_events

REAL = tuple(n for n in LABELS.backend_allreduce if n != LINK_HOLD)
CHAIN_GAP_US = 50e3  # a real allreduce starting this long after the previous one ended begins a new send's chain


@dataclass(frozen=True)
class SyncCosts:
    """Measured from the window traces of one run (None: no trace said)."""

    real_collective_s: float | None
    collective_threads: int
    sync_work_s: float | None
    traced_syncs: int
    traces: int
    per_sync: tuple[tuple[int, int, float], ...] = ()  # (replica, step, sync_work seconds) per traced sync


def _chains(spans: list[tuple[float, float]]) -> list[list[tuple[float, float]]]:
    out: list[list[tuple[float, float]]] = []
    end = None
    for ts, dur in sorted(spans):
        if end is None or ts - end > CHAIN_GAP_US:
            out.append([])
        out[-1].append((ts, dur))
        end = ts + dur if end is None else max(end, ts + dur)
    return out


def _step_at(steps: list[tuple[float, float, int]], ts: float) -> int | None:
    """The training step whose ``ftrun::step#S`` span holds the instant ``ts`` (None: none does)."""
    return next((s for a, d, s in steps if a <= ts <= a + d), None)


def sync_costs(paths: list[Path], replicas: Sequence[int] = ()) -> SyncCosts:
    """``SyncCosts`` over the window traces ``paths`` (every replica's); ``replicas[i]``: the
    replica group of ``paths[i]`` (for ``per_sync``; without it no sync is attributed)."""
    keep = name_filter([*REAL, LINK_HOLD, LABELS.perform_sync, LABELS.wait, SKETCH_WAIT], [FTRUN_STEP_PREFIX])
    durations: list[float] = []
    threads: set = set()
    tails: list[float] = []
    per_sync: list[tuple[int, int, float]] = []
    for k, path in enumerate(paths):
        real, held, syncs, waits, pre = [], [], [], [], []
        steps: list[tuple[float, float, int]] = []
        for e in trace_events(load_trace(path), keep):
            if e.ph != "X":
                continue
            if e.name.startswith(FTRUN_STEP_PREFIX):
                if m := FTRUN_STEP_RE.match(e.name):
                    steps.append((e.ts, e.dur, int(m[1])))
            elif e.name in REAL:
                real.append((e.ts, e.dur))
                threads.add((str(path), e.tid))
            elif e.name == LINK_HOLD:
                held.append((e.ts, e.dur))
            elif e.name == LABELS.perform_sync:
                syncs.append((e.ts, e.dur))
            elif e.name == SKETCH_WAIT:
                pre.append((e.ts, e.dur))
            else:
                waits.append((e.ts, e.dur))
        per_thread = len({e for p, e in threads if p == str(path)}) or 1
        for chain in _chains(real):
            span = max(ts + d for ts, d in chain) - chain[0][0]
            durations.append(span / math.ceil(len(chain) / per_thread))
        done = sorted(real + held)
        for ts, dur in syncs:
            wait_end = max((w + d for w, d in waits if ts <= w <= ts + dur), default=None)
            if wait_end is None:
                continue
            step = _step_at(steps, ts)
            a = next((a for a, _, s in steps if s == step), None)
            first = max((w for w, d in pre if w + d <= ts + 1e-3 and (a is None or w >= a)), default=ts)
            last = max((s + d for s, d in done if s < wait_end and s + d <= wait_end), default=first)
            tails.append(max(0.0, wait_end - max(first, last)) / 1e6)
            if k < len(replicas) and step is not None:
                per_sync.append((replicas[k], step, tails[-1]))
    per_trace = max(1, round(len(threads) / len(paths))) if paths and threads else 1
    return SyncCosts(
        statistics.median(durations) / 1e6 if durations else None,
        per_trace,
        sum(tails) / len(tails) if tails else None,
        len(tails),
        len(paths),
        tuple(per_sync),
    )
