"""Where the time goes between a fault and the first commit with the group back. Torch-free.

For each fired fault (manifest ``faults.fired``: replica R, ``fired_at`` = t0), from the run's
own records, each phase measured by its own two clock readings (never one phase derived from
another):

* ``detect``: t0 -> the survivors' first quorum without R: the end of that survivor's
  ``torchft::manager::_client::_quorum`` span (the lighthouse's answer) in its profile around the
  fault (``traces/recovery/replica{s}_rank0.{fault}.pt.trace.json.gz``) or its window trace, else
  ``Quorum.t`` in its step log; when R's new incarnation was back first (a warm spare took its
  replica id, ``--spares``), the quorum it rejoined in. What bounded it: the time the survivors waited in that quorum
  beside the lighthouse's heartbeat and join timeouts (the manifest's ``detection``).
* ``relaunch``: the group's relaunch (``restart`` in ``events/run.jsonl``: its launcher started)
  -> torchft Manager up (``manager_up`` in R's lifecycle log, ``ftrun.worker.lifecycle``).
* ``join``: manager up (a hang: the stall's end) -> the first quorum R's new incarnation
  computed together with another group (``Quorum.t`` in R's step log).
* ``reconfigure``: torchft's process-group ``configure`` for that quorum on R: its
  ``torchft::manager::_pg::configure`` span in R's recovery profile (``traces/recovery/``) where
  traced, else the ``configure`` lifecycle record; every participant's own configure beside it
  (from its traces where they cover it, else its lifecycle record).
* ``heal``: R's ``recv_checkpoint`` (traced span, else lifecycle record; bytes = the state
  dict's tensor bytes, rate over the lifecycle's own timing; source = the quorum's heal
  source, whose ``send_checkpoint`` record gives the bytes it staged). ``sources`` says which.
* ``catch_up``: the end of the last of those phases that happened -> R's first commit.

``total_s`` = R's first commit - t0. The phases can overlap in time (the survivors detect the
loss while R relaunches), so ``phases`` counts each second of [t0, first commit] once: for R's
own chain first (relaunch, join, reconfigure, heal, catch-up: what the first commit waits on),
and for ``detect`` only what that chain does not cover (the survivors' detection is on the
critical path only until R's relaunch begins, or when R waits in its join for it: then it is
the join's). ``spans`` keeps every phase's own interval (seconds after the fault), so a
detection hidden behind the relaunch still shows; ``unaccounted_s`` = seconds no phase covers.
A phase that did not happen is None, with the reason in ``reasons``. Survivors' losses over
[t0, first commit]: failed commits, steps they ran before R was back in their quorum, steps/s
against the same length of time before t0.

Only a fault that stops a group's processes (``STOPS``: kill, sigterm, hang) has a recovery: a
``--fail-commit`` or ``--corrupt-allreduce`` leaves every process running and in its quorum, so
there is nothing to detect, relaunch or rejoin (the commit and numerics checks judge those).
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from ftrun import layout
from ftrun.check import recovery_phases as phases
from ftrun.check.provenance import header
from ftrun.check.recovery_hold import collective_hold
from ftrun.check.recovery_model import (
    ACCOUNT_ORDER,
    PHASES,
    STOPS,
    TOLERANCE,
    GroupSpans,
    Recovery,
    TraceSpans,
    describe,
)
from ftrun.check.recovery_phases import detection_limits
from ftrun.event_log import read_lifecycle
from ftrun.layout import EventRecord, LifecycleEvent, Manifest, Quorum
from ftrun.torchft_compat import LABELS

__all__ = [
    "ACCOUNT_ORDER",
    "PHASES",
    "STOPS",
    "TOLERANCE",
    "GroupSpans",
    "Recovery",
    "TraceSpans",
    "breakdown",
    "describe",
    "detection_limits",
    "recovery_of",
    "recovery_of_run_dir",
]


def read_lifecycles(run_dir: Path, replicas: list[int]) -> dict[int, list[LifecycleEvent]]:
    """Rank 0's lifecycle log of each replica group (missing file: [])."""
    return {r: read_lifecycle(layout.lifecycle_log(run_dir, r, 0)) for r in replicas}


def breakdown(
    manifest: Manifest,
    logs: dict[tuple[int, int], list[EventRecord]],
    life: dict[int, list[LifecycleEvent]],
    traced: TraceSpans | None = None,
    around: GroupSpans | None = None,
) -> list[Recovery]:
    """One ``Recovery`` per fired fault that stops a group (``STOPS``), in firing order (module
    docstring). ``traced``: the relaunched groups' recovery profiles' ``_pg::configure`` / ``recv_checkpoint`` spans
    (``recovery_trace_spans``); ``around``: the surviving groups' quorum, configure and
    checkpoint spans (``around_fault_spans``); both preferred to the logs' timings where present."""
    return [
        _one(f, manifest, logs, life, traced or {}, around or {})
        for f in sorted(manifest.faults.fired, key=lambda f: f.fired_at)
        if f.action in STOPS
    ]


def recovery_of(run_dir: Path, manifest: Manifest, logs: dict[tuple[int, int], list[EventRecord]]) -> list[Recovery]:
    """``breakdown`` with the lifecycle logs and recovery traces read from ``run_dir``."""
    groups = sorted({r for r, _ in logs} | {f.replica for f in manifest.faults.fired})
    return breakdown(
        manifest,
        logs,
        read_lifecycles(run_dir, groups),
        recovery_trace_spans(run_dir),
        around_fault_spans(run_dir, manifest, logs),
    )


_INCARNATION_RE = re.compile(r"\.restart(\d+)\.")


WANTED = (LABELS.pg_configure, LABELS.recv_checkpoint, LABELS.send_checkpoint, LABELS.client_quorum)


def _spans_of(path: Path) -> dict[str, list[tuple[float, float]]] | None:
    """The ``WANTED`` spans of one trace as unix times (the trace's ``baseTimeNanoseconds`` + ts);
    None for a trace ftrun cannot read (the logs still have the timings)."""
    from ftrun.errors import BadInput
    from ftrun.trace.load import load_trace
    from ftrun.trace.schema import name_filter, trace_events

    try:
        trace = load_trace(path)
        base_us = header(trace).base_us
        if base_us is None:
            return None
        base = base_us / 1e6
        found: dict[str, list[tuple[float, float]]] = {}
        for e in trace_events(trace, name_filter(WANTED, ())):
            if e.name in WANTED and e.ph == "X":
                found.setdefault(e.name, []).append((base + e.ts / 1e6, base + (e.ts + e.dur) / 1e6))
    except (BadInput, msgspec.ValidationError):
        return None
    return found


def recovery_trace_spans(run_dir: Path) -> TraceSpans:
    """Rank 0's recovery profiles of relaunched groups (``traces/recovery/*.restart{n}.*``)."""
    out: TraceSpans = {}
    for p in sorted(layout.recovery_trace_dir(run_dir).glob("*.pt.trace.json*")):
        w, m = layout.parse_worker(p.name), _INCARNATION_RE.search(p.name)
        if w is None or w[1] != 0 or m is None:
            continue
        found = _spans_of(p)
        if found is not None:
            out[(w[0], int(m[1]))] = {k: sorted(v) for k, v in found.items()}
    return out


def around_fault_spans(run_dir: Path, manifest: Manifest, logs: dict[tuple[int, int], list[EventRecord]]) -> GroupSpans:
    """Rank 0 of every surviving group: its profiles around the faults
    (``traces/recovery/replica{s}_rank0.{fault key}[.part].pt.trace.json.gz``) and those of its
    window traces recorded while a fault's recovery ran (by its step log: the window's steps
    ended after the fault and began before the group's end), merged per group (one clock)."""
    faulted = {f.replica: f.fired_at for f in manifest.faults.fired}
    if not faulted:
        return {}
    first_fault = min(faulted.values())
    paths: dict[int, list[Path]] = {}
    for p in sorted(layout.recovery_trace_dir(run_dir).glob("*.pt.trace.json*")):
        w = layout.parse_worker(p.name)
        if w is not None and w[1] == 0 and layout.AROUND_FAULT_RE.search(p.name):
            paths.setdefault(w[0], []).append(p)
    for t in manifest.traces:
        if t.rank != 0 or not t.window:
            continue
        steps = [
            x.t for x in logs.get((t.replica, 0), []) if x.step is not None and t.window[0] <= x.step <= t.window[1]
        ]
        if steps and max(steps) > first_fault:  # the window ran past a fault: it may hold the quorum change
            paths.setdefault(t.replica, []).append(run_dir / t.path)
    out: GroupSpans = {}
    for s, ps in paths.items():
        merged: dict[str, list[tuple[float, float]]] = {}
        for p in ps:
            for k, v in (_spans_of(p) or {}).items():
                merged.setdefault(k, []).extend(v)
        out[s] = {k: sorted(v) for k, v in merged.items()}
    return out


def recovery_of_run_dir(run_dir: Path) -> list[Recovery]:
    """``recovery_of`` for an ``ftrun train`` run dir ([] for another kind or a run without faults)."""
    from ftrun.event_log import read_event_log

    m = layout.read_manifest(run_dir)
    if not isinstance(m, Manifest) or not m.faults.fired:
        return []
    logs: dict[tuple[int, int], list[EventRecord]] = {
        (e.replica, e.rank): read_event_log(run_dir / e.path) for e in m.event_logs
    }
    return recovery_of(run_dir, m, logs)


def _one(
    f: layout.FaultMarker,
    manifest: Manifest,
    logs: dict[tuple[int, int], list[EventRecord]],
    life: dict[int, list[LifecycleEvent]],
    traced: TraceSpans,
    around: GroupSpans,
) -> Recovery:
    """Fault ``f``'s recovery: each phase in turn (``ftrun.check.recovery_phases``), then the
    seconds of [t0, first commit] accounted once each, the survivors' losses and the text."""
    fr = phases.fault_records(f, manifest, logs, life, traced, around)
    label = layout.fault_label(f.action, f.replica, f.fired_step or f.step)
    out = Recovery(label, f.replica, f.fired_at, None, dict.fromkeys(PHASES), dict.fromkeys(PHASES), {}, None)
    up = phases.relaunch(fr, out)
    joined = phases.join(fr, out, up)
    phases.detect(fr, out, joined)  # the quorum the group rejoined in may be the survivors' first after the fault
    phases.reconfigure(fr, out, joined)
    phases.heal(fr, out, joined)
    commit = phases.catch_up(fr, out, joined)
    if commit is not None:
        out.total_s = commit.t - f.fired_at
        _account(out, f.fired_at, commit.t)
    else:  # nothing to account against: each phase's own length
        out.phases = {k: None if s is None else s[1] - s[0] for k, s in out.spans.items()}
    out.survivors = _losses(logs, fr.survivors, f.replica, f.fired_at, commit.t if commit is not None else None, joined)
    out.collective_hold = collective_hold(logs, fr.survivors, f.replica, f.fired_at, manifest.config.timeouts.timeout_s)
    out.text = describe(out)
    return out


def _account(out: Recovery, t0: float, t1: float) -> None:
    """Each second of [t0, t1] once, for the first phase in ``ACCOUNT_ORDER`` covering it."""
    covered: list[tuple[float, float]] = []
    for k in ACCOUNT_ORDER:
        s = out.spans[k]
        if s is None:
            continue
        a, b = max(s[0], t0), min(s[1], t1)
        new = 0.0
        if b > a:
            new = _length(covered + [(a, b)]) - _length(covered)
            covered.append((a, b))
        out.phases[k] = new
    out.unaccounted_s = max(0.0, (t1 - t0) - _length(covered))


def _length(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def _losses(
    logs: dict[tuple[int, int], list[EventRecord]],
    survivors: list[int],
    r: int,
    t0: float,
    t1: float | None,
    joined: Quorum | None,
) -> layout.SurvivorLosses | None:
    """What the survivors lost over [t0, t1]: failed commits, steps without R, steps/s before vs
    during (None: no surviving group's log here)."""
    if not survivors:
        return None
    end = t1 if t1 is not None else max((x.t for s in survivors for x in logs[(s, 0)]), default=t0)
    back = joined.t if joined is not None else end
    span = end - t0
    failed, without, before, during = 0, 0, [], []
    for s in survivors:
        recs = [x for x in logs[(s, 0)] if x.step is not None]
        failed += sum(1 for x in recs if x.commit is False and t0 < x.t <= end)
        without = max(without, sum(1 for x in recs if t0 < x.t <= back))
        if span > 0 and recs:
            lo = max(t0 - span, recs[0].t)
            n_before = sum(1 for x in recs if lo < x.t <= t0)
            if t0 > lo:
                before.append(n_before / (t0 - lo))
            during.append(sum(1 for x in recs if t0 < x.t <= end) / span)
    b = sum(before) / len(before) if before else None
    d = sum(during) / len(during) if during else None
    return layout.SurvivorLosses(
        failed_commits=failed,
        steps_without_group=without,
        steps_per_s_before=None if b is None else round(b, 3),
        steps_per_s_during=None if d is None else round(d, 3),
        goodput=round(d / b, 3) if b and d is not None else None,
    )
