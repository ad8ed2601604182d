"""``analyze(paths, ...) -> Report``: check traces against the expected streaming-DiLoCo schedule.

The library behind ``ftrun inspect-trace`` (and reusable by ``compare``). Everything observed
comes from the traces; the manifest / flags and event logs only supply expectations.

Per worker (replica, rank): every send and sync found in its trace files is placed at the
training step whose span contains its start, its fragment is read from its signature alone
(``ftrun.check.evidence``), its communication timed (``ftrun.check.comm``), and it is matched
against ``Schedule.events`` restricted to the captured steps of each file, shifted by the
failed commits (``ftrun.check.commits``: event log, else inferred from the trace). A sync pairs with
the most recent unsynced send of the same worker (less than one window w earlier); a sync whose
send precedes the captured steps is "send not captured", not a failure. Captured steps = the
contiguous runs of step numbers present in each file. Then all workers are
compared step by step (cross-replica check).

Step numbering for ``ProfilerStep#k`` (ftrun's ``ftrun::step#S`` spans are absolute):
``top`` = k (prof.step() at the loop top, torchft's example), ``end`` = k + 1, ``auto`` = the
one of the two that matches more expected events (ties: top).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from ftrun import layout
from ftrun.check import comm as communication
from ftrun.check import gpu_comm
from ftrun.check.agreement import check_agreement
from ftrun.check.numerics import Numerics, check_numerics
from ftrun.check.faults import Faults, describe, fault_marks
from ftrun.event_log import read_event_log
from ftrun.check import commits as commit_checks
from ftrun.check import provenance
from ftrun.check.evidence import NO_EVIDENCE, Identity, RunIdentities, Signature, restore_signature, send_signature
from ftrun.check.expect import schedule_for
from ftrun.check.model import CrossCheck, EventResult, Report, WorkerReport
from ftrun.check.overlap import overlap_of
from ftrun.check.workers import Worker, assign
from ftrun.errors import BadInput, NotChecked
from ftrun.schedule import Event, Schedule
from ftrun.trace.discover import discover
from ftrun.trace.load import MAX_TRACE_BYTES
from ftrun.trace.spans import Send, Span, Sync, TraceSpans, extract, no_steps
from ftrun.trace.stream import TraceFile

NUMBERINGS = {"top": 0, "end": 1}


@dataclass
class Obs:
    """One observed send or sync on a worker."""

    kind: str
    ts: float
    step: Optional[int]
    manager_step: Optional[int]
    trace: TraceSpans
    send: Optional[Send] = None
    sync: Optional[Sync] = None
    comm: Optional[communication.SendComm] = None  # sends: their communication
    timing: Optional[communication.SyncTiming] = None  # syncs
    paired: Optional["Obs"] = None  # syncs: the send they wait for
    sig: Optional[Signature] = None  # what the trace shows it moved (``ftrun.check.evidence``)
    serial: Optional[int] = None  # sends: collectives queued behind another send's (gpu_comm)
    quorum: Optional[Span] = None  # sends: the quorum wait before it (control plane)
    identity: Identity = NO_EVIDENCE
    queue: Optional[gpu_comm.SendQueue] = None  # sends: queueing of their collectives


@dataclass
class WorkerObs:
    worker: Worker
    ranges: list[tuple[int, int]]
    failed: list[int]
    obs: list[Obs]
    expected: list[Event]
    lost: list[tuple[int, int]] = field(default_factory=list)  # steps lost to a fault: nothing expected
    matches: list[tuple[Optional[Event], Optional[Obs]]] = field(default_factory=list)


def runs(numbers) -> list[tuple[int, int]]:
    """Contiguous runs of step numbers: the captured steps (a file may skip some)."""
    out: list[list[int]] = []
    for n in sorted(set(numbers)):
        if out and n == out[-1][1] + 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return [(a, b) for a, b in out]


class _Steps:
    """Training step of a timestamp in one trace file (``None`` outside every step span)."""

    def __init__(self, trace: TraceSpans, offset: int) -> None:
        off = offset if trace.step_source == "profiler" else 0
        self.steps = trace.steps
        self.starts = [s.span.ts for s in trace.steps]
        self.off = off
        self.ranges = runs(s.number + off for s in trace.steps)

    def at(self, ts: float) -> tuple[Optional[int], Optional[int]]:
        i = bisect_right(self.starts, ts) - 1
        if i >= 0 and ts <= self.steps[i].span.end:
            s = self.steps[i]
            return s.number + self.off, s.manager_step
        return None, None


def _comms(wobs: list[WorkerObs]) -> dict[str, dict[float, communication.SendComm]]:
    """Each trace file's sends' communication, by send start (for renderers)."""
    out: dict[str, dict[float, communication.SendComm]] = {}
    for wo in wobs:
        for o in wo.obs:
            if o.kind == "send" and o.comm is not None:
                out.setdefault(str(o.trace.path), {})[o.send.span.ts] = o.comm
    return out


def _observe(w: Worker, schedule: Schedule, failed: list[int], offset: int, lost: Sequence[tuple[int, int]] = ()) -> WorkerObs:
    obs: list[Obs] = []
    ranges = []
    for t in w.traces:
        steps = _Steps(t, offset)
        ranges.extend(steps.ranges)
        comms = communication.attribute(t.sends, t.collectives)
        queued = gpu_comm.queueing(t, comms)  # serialized = queued behind another send's collective
        step_of = lambda ts, s=steps: s.at(ts)[0]  # noqa: E731
        for i, (send, sc) in enumerate(zip(t.sends, comms)):
            st, ms = steps.at(send.span.ts)
            sig = send_signature([a.shapes for a in send.allreduces], (c.itemsize for _, c in sc.calls if c is not None))
            sq = gpu_comm.send_queue(queued, i)
            obs.append(Obs("send", send.span.ts, st, ms, t, send=send, comm=sc, sig=sig, serial=sq.serialized, queue=sq,
                           quorum=communication.quorum_before(send, t.quorums, step_of)))
        for sync in t.syncs:
            st, ms = steps.at(sync.span.ts)
            sig = restore_signature(sync.restore_copies, sync.restore_shapes)
            obs.append(Obs("sync", sync.span.ts, st, ms, t, sync=sync, sig=sig))
    obs.sort(key=lambda o: o.ts)
    pending: Optional[Obs] = None
    for o in obs:
        if o.kind == "send":
            pending = o
            continue
        p = pending
        if p is not None and o.step is not None and p.step is not None and not (0 <= o.step - p.step < schedule.window):
            p = None
        o.paired, pending = p, None
        o.timing = communication.sync_timing(o.sync, p.comm if p else None, p.serial if p else None, p.quorum if p else None)
    return WorkerObs(w, ranges, failed, obs, _expect(schedule, ranges, failed, lost), list(lost))


def _expect(schedule: Schedule, ranges, failed: Sequence[int], lost) -> list[Event]:
    """Expected events inside the captured steps, outside the steps lost to a fault."""
    last = max((hi for _, hi in ranges), default=0)
    return [
        e for e in schedule.events(last, failed_cycles=failed)
        if any(lo <= e.step <= hi for lo, hi in ranges) and not any(a <= e.step <= b for a, b in lost)
    ]


def _match(wo: WorkerObs, window: int) -> None:
    """Pair expected events with observed ones: same step, then nearest within a window."""
    by_key: dict[tuple[str, Optional[int]], list[Obs]] = {}
    for o in wo.obs:
        by_key.setdefault((o.kind, o.step), []).append(o)
    left_e: list[Event] = []
    pairs: list[tuple[Optional[Event], Optional[Obs]]] = []
    for e in wo.expected:
        got = by_key.get((e.kind, e.step))
        if got:
            pairs.append((e, got.pop(0)))
        else:
            left_e.append(e)
    left_o = [o for lst in by_key.values() for o in lst]
    for e in left_e:
        near = [o for o in left_o if o.kind == e.kind and o.step is not None and abs(o.step - e.step) < window]
        if near:
            o = min(near, key=lambda o: abs(o.step - e.step))
            left_o.remove(o)
            pairs.append((e, o))
        else:
            pairs.append((e, None))
    pairs.extend((None, o) for o in left_o)
    wo.matches = pairs


def _fit_offset(workers: list[Worker], schedule: Schedule, failed: dict, requested: str, faults: Faults) -> tuple[int, dict]:
    if requested != "auto":
        return NUMBERINGS[requested], {"requested": requested, "used": requested}
    scores = {}
    for name, off in NUMBERINGS.items():
        n = 0
        for w in workers:
            wo = _observe(w, schedule, failed[(w.replica, w.rank)], off, faults.lost(w.replica))
            exp = {(e.kind, e.step) for e in wo.expected}
            n += sum((o.kind, o.step) in exp for o in wo.obs) - sum(o.step is None for o in wo.obs)
        scores[name] = n
    used = max(NUMBERINGS, key=lambda k: (scores[k], k == "top"))
    return NUMBERINGS[used], {"requested": "auto", "used": used, "fit": scores}


def _unseen_syncs(wo: WorkerObs, schedule: Schedule) -> bool:
    """Does a sync fall before or between the worker's captured steps (its commit unseen)?"""
    last = max((hi for _, hi in wo.ranges), default=0)
    steps = range(schedule.window, last + 1, schedule.window)
    return any(not any(lo <= s <= hi for lo, hi in wo.ranges) for s in steps)


def _syncs_seen(wo: WorkerObs, ids: RunIdentities) -> list[commit_checks.SyncSeen]:
    """Each observed sync with the classes of its send, its restore and the next send."""
    out = []
    obs = sorted(wo.obs, key=lambda o: o.ts)
    for i, o in enumerate(obs):
        if o.kind != "sync" or o.step is None:
            continue
        nxt = next((x for x in obs[i + 1:] if x.kind == "send"), None)
        out.append(commit_checks.SyncSeen(
            o.step, ids.cls(o.paired), ids.cls(o), ids.cls(nxt), nxt.step if nxt is not None else None, o.sync.committed,
        ))
    return out


def _result(wo: WorkerObs, e: Optional[Event], o: Optional[Obs], schedule: Schedule) -> EventResult:
    w = wo.worker
    kind = e.kind if e is not None else o.kind
    r = EventResult(
        replica=w.replica, rank=w.rank, kind=kind, fragment=None,
        expected_fragment=e.fragment if e else None,
        expected_step=e.step if e else None,
        observed_step=o.step if o else None,
        ok=True,
        manager_step=(o.manager_step if o and o.manager_step is not None else (e.manager_step if e else None)),
        cycle=e.cycle if e else (schedule.cycle_of(o.step) if o and o.step else None),
    )
    if o is not None:
        i = o.identity
        r.fragment, r.evidence, r.fragment_checked = i.fragment, i.evidence, i.checked
        r.fragment_candidates = list(i.candidates) if i.candidates else None
        r.file, r.ts_us = str(o.trace.path), o.ts
        if o.comm is not None:
            sc = o.comm
            r.allreduces = len(sc.calls)
            r.numel, r.bytes = sc.numel, sc.bytes
            r.collectives = sum(c is not None for _, c in sc.calls) + len(sc.holds)
        if o.queue is not None and o.queue.max_delay_ms is not None:
            r.queue_delay_ms, r.queue_cause = _r(o.queue.max_delay_ms), o.queue.cause
        if o.timing is not None:
            t = o.timing
            r.exposed_comm_ms, r.hidden_comm_ms = _r(t.exposed_ms), _r(t.hidden_ms)
            r.send_to_done_ms, r.comm_union_ms = _r(t.send_to_done_ms), _r(t.comm_union_ms)
            r.should_commit_ms = _r(t.should_commit_ms)
            r.commit_sync_ms = _r(gpu_comm.commit_sync_ms(o.sync))
            r.exposed_data_ms, r.exposed_control_ms, r.quorum_ms = _r(t.exposed_data_ms), _r(t.exposed_control_ms), _r(t.quorum_ms)
            r.serialized_collectives = t.serialized_collectives
            r.serialized = bool(t.serialized_collectives) if t.serialized_collectives is not None else None
            r.send_captured = o.paired is not None
            if o.paired is None:
                send_step = schedule.send_step(e.cycle) if e else None
                lo = min((lo for lo, hi in wo.ranges if o.step is not None and lo <= o.step <= hi), default=None)
                if send_step is not None and lo is not None and send_step < lo:
                    r.notes.append("send not captured (before the profiled steps)")
                else:
                    r.notes.append("no send before this sync")
            elif o.paired.comm is not None and not o.paired.comm.complete and o.paired.trace.collectives:
                r.notes.append("collectives of its send not all captured")
    fr = "?" if r.fragment is None else r.fragment
    if e is None:
        r.ok = False
        where = f"at step {o.step}" if o.step is not None else "outside every step span"
        r.problem = f"unexpected {kind} (fragment {fr}) {where}"
        return r
    if o is None:
        r.ok = False
        r.problem = f"{kind} of fragment {e.fragment} missing at step {e.step}"
        return r
    problems = []
    if o.step != e.step:
        problems.append(f"{kind} of fragment {e.fragment} expected at step {e.step}, observed at step {o.step}")
    i = o.identity
    if i.problem:
        problems.append(f"{kind} at step {o.step}: {i.problem}")
    elif i.checked and i.fragment != e.fragment:
        problems.append(f"{kind} at step {o.step}: fragment {fr}, expected fragment {e.fragment}")
    if problems:
        r.ok, r.problem = False, "; ".join(problems)
    return r


def _r(x: Optional[float]) -> Optional[float]:
    return round(x, 3) if x is not None else None


def _cross(wobs: list[WorkerObs], results: list[EventResult]) -> list[CrossCheck]:
    if len(wobs) < 2:
        return []
    seen: dict[tuple[str, int], dict[str, Optional[int]]] = {}
    mstep: dict[tuple[str, int], Optional[int]] = {}
    for r in results:
        if r.observed_step is None:
            continue
        key = (r.kind, r.observed_step)
        seen.setdefault(key, {})[f"{r.replica}/{r.rank}"] = r.fragment
        if mstep.get(key) is None:
            mstep[key] = r.manager_step
    out = []
    for (kind, step), frags in sorted(seen.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        for wo in wobs:
            name = f"{wo.worker.replica}/{wo.worker.rank}"
            lost = any(a <= step <= b for a, b in wo.lost)
            if name not in frags and any(lo <= step <= hi for lo, hi in wo.ranges) and not lost:
                frags[name] = None
        if len(frags) < 2:
            continue
        absent = [k for k, v in frags.items() if v is None and not _observed(results, k, kind, step)]
        values = {v for v in frags.values() if v is not None}
        ok = not absent and len(values) <= 1
        cc = CrossCheck(kind, step, mstep.get((kind, step)), dict(sorted(frags.items())), ok)
        if not ok:
            desc = ", ".join(
                f"replica {k.split('/')[0]} rank {k.split('/')[1]}: "
                + ("none" if k in absent else f"fragment {'?' if v is None else v}")
                for k, v in sorted(frags.items())
            )
            m = f" (manager step {cc.manager_step})" if cc.manager_step is not None else ""
            cc.problem = f"replicas disagree on the {kind} at step {step}{m}: {desc}"
        out.append(cc)
    return out


def _observed(results: list[EventResult], name: str, kind: str, step: int) -> bool:
    r, g = (int(x) for x in name.split("/"))
    return any(x.replica == r and x.rank == g and x.kind == kind and x.observed_step == step for x in results)


def _totals(results: list[EventResult]) -> dict:
    def s(field_: str) -> float:
        return round(sum(getattr(r, field_) or 0.0 for r in results), 3)

    syncs = [r for r in results if r.kind == "sync" and r.observed_step is not None]
    return {
        "events": len(results),
        "ok": sum(r.ok for r in results),
        "failed": sum(not r.ok for r in results),
        "sends": sum(r.kind == "send" and r.observed_step is not None for r in results),
        "syncs": len(syncs),
        "exposed_comm_ms": s("exposed_comm_ms"),
        "hidden_comm_ms": s("hidden_comm_ms"),
        "send_to_done_ms": s("send_to_done_ms"),
        "should_commit_ms": s("should_commit_ms"),
        "exposed_data_ms": s("exposed_data_ms"),
        "exposed_control_ms": s("exposed_control_ms"),
        "bytes": sum(r.bytes or 0 for r in results),
        "serialized_syncs": sum(bool(r.serialized) for r in syncs),
    }


def analyze(
    paths: Sequence[Path],
    *,
    fragments: Optional[int] = None,
    sync_every: Optional[int] = None,
    fragment_sync_delay: Optional[int] = None,
    step_numbering: Optional[str] = "top",
    allow_failed_commits: bool = False,
    merge_jobs: bool = False,
    max_trace_bytes: int = MAX_TRACE_BYTES,
) -> Report:
    """Check the traces under ``paths`` (run dir, folder or files). ``BadInput`` on bad input;
    ``NotChecked`` when they hold no evidence to judge (``ftrun.check.provenance``).

    A failed commit no injected fault explains fails the verdict unless ``allow_failed_commits``;
    traces of different runs are refused unless ``merge_jobs``; each file is read up to
    ``max_trace_bytes`` (``ftrun.trace.load``).
    """
    inputs = discover([Path(p) for p in paths])
    if step_numbering is None:  # not given: what the run recorded (ftrun launch), else top
        step_numbering = inputs.manifest.step_numbering if isinstance(inputs.manifest, layout.LaunchManifest) else "top"
    if step_numbering not in (*NUMBERINGS, "auto"):
        raise BadInput(f"--step-numbering {step_numbering!r}: expected top, end or auto")
    # evidence first: a trace that is not torchft's, or traces of two runs, are refused before
    # any schedule is asked for (flags cannot make them checkable)
    spans, headers = [], {}
    for f in inputs.files:
        trace = TraceFile(f.path, max_trace_bytes)  # read in chunks; the header keys kept in trace.meta
        spans.append(extract(f.path, trace, require_steps=False))
        headers[f.path] = provenance.header(trace.meta)
        del trace
    provenance.require_torchft(spans)
    for sp in spans:
        if not sp.steps:  # a torchft trace without step spans: nothing to place its events in
            raise no_steps(sp.path)
    workers = assign(inputs.files, spans)
    logs = {k: read_event_log(p, strict=True) for k, p in sorted(inputs.event_logs.items())}
    provenance.check_one_run(workers, headers, logs, merge_jobs)
    schedule = schedule_for(inputs, fragments, sync_every, fragment_sync_delay)
    trace_notes = _once(spans)
    faults = fault_marks(inputs.run_dirs, inputs.manifests, logs) if inputs.manifest is not None else Faults()
    failed_commits = commit_checks.from_logs(logs)
    heals = _heal_steps(logs)
    failed = {(w.replica, w.rank): _failed_cycles(w.replica, failed_commits, faults, schedule, heals) for w in workers}
    offset, numbering = _fit_offset(workers, schedule, failed, step_numbering, faults)
    wobs = [_observe(w, schedule, failed[(w.replica, w.rank)], offset, faults.lost(w.replica)) for w in workers]
    mode = "manifest" if inputs.manifest is not None else "foreign"
    ids = RunIdentities(inputs.manifest, wobs, schedule)
    inferred = _infer_failed(wobs, {r for r, _ in logs}, ids, schedule)
    for wo in wobs:
        _match(wo, schedule.window)
    ids.label(wobs)
    notes = list(trace_notes) + ids.notes(wobs)
    blind = [o for wo in wobs for o in wo.obs if o.kind == "sync" and o.sync.committed is None]
    if not logs and blind and (schedule.fragments < 2 or not ids.distinct):
        why = "every send carries the same fragment" if schedule.fragments < 2 else "the sends' signatures do not tell the fragments apart"
        notes.append(f"failed commits cannot be inferred from this trace ({why}) and there is no event log")
    if not logs and any(_unseen_syncs(wo, schedule) for wo in wobs):
        notes.append("no event log: commits before and between the captured steps are assumed to have succeeded")
    for wo, s, how in inferred:
        sync = next((o for o in wo.obs if o.kind == "sync" and o.step == s), None)
        frag = sync.identity.fragment if sync is not None else None
        failed_commits.append(commit_checks.FailedCommit(wo.worker.replica, wo.worker.rank, s, frag, "inferred", how))
    commit_checks.explain(failed_commits, faults, schedule)

    results, reports = _results(wobs, schedule)
    cross = _cross(wobs, results)
    if step_numbering == "auto":
        notes.append(f"step numbering: fitted '{numbering['used']}'")
    traced = {w.replica for w in workers}
    for m in faults.marks:
        m.has_trace = m.replica in traced
        m.text = describe(m)
    by_class: dict[str, list[str]] = {"traces": _missing_traces(inputs, traced, faults, notes), "agreement": [], "commits": []}
    agreement = None
    if logs:
        ag = check_agreement(logs)
        agreement = {"ok": ag.ok, "commits_checked": ag.commits_checked, "disagreements": ag.disagreements}
        by_class["agreement"] = _disagreements(ag)
    unseen = [f"replica {wo.worker.replica} rank {wo.worker.rank}" for wo in wobs if not wo.obs]
    if unseen or not results:  # never PASS on zero evidence (require_torchft makes this rare)
        raise NotChecked(f"nothing checked: no torchft send or sync observed for {', '.join(unseen) or 'any worker'}")
    ok = all(r.ok for r in results) and all(c.ok for c in cross)
    if not allow_failed_commits:
        by_class["commits"] = _unexplained_failed_commits(failed_commits)
    run_problems = [p for ps in by_class.values() for p in ps]
    numerics = run_numerics(inputs, logs)
    ok = ok and not run_problems and numerics.ok
    report = Report(
        verdict="pass" if ok else "fail",
        mode=mode,
        files=[str(f.path) for f in inputs.files],
        replicas=sorted({w.replica for w in workers}),
        schedule={
            "fragments": schedule.fragments,
            "sync_every": schedule.sync_every,
            "fragment_sync_delay": schedule.fragment_sync_delay,
            "window": schedule.window,
        },
        step_numbering=numbering,
        workers=reports,
        events=results,
        cross_replica=cross,
        run_dir=str(inputs.run_dir) if inputs.run_dir else None,
        notes=notes,
        run_dirs=[str(p) for p in inputs.run_dirs],
        job_id=inputs.job_id,
        faults=[m.to_json() for m in faults.marks] + [v.to_json() for v in faults.votes],
        agreement=agreement,
        numerics=numerics.to_json(),
        run_problems=run_problems,
        run_problems_by_class=by_class,
        failed_commits=[c.to_json() for c in sorted(failed_commits, key=lambda c: (c.replica, c.rank, c.sync_step))],
        versions=dict(inputs.manifest.versions) if inputs.manifest is not None and inputs.manifest.versions else None,
        spans={str(f.path): sp for f, sp in zip(inputs.files, spans)},
        comms=_comms(wobs),
    )
    report.overlap = overlap_of(report)
    return report


def run_numerics(inputs, logs: dict[tuple[int, int], list[layout.EventRecord]]) -> Numerics:
    """The numeric check (``ftrun.check.numerics``) of the merged event logs; nothing is checked
    when only some of the job's groups were given, or the run had ``--no-sketches``."""
    m = inputs.manifest
    sketches_on = m.config.get("sketches") if isinstance(m, layout.Manifest) else None
    partial = None
    if isinstance(m, layout.Manifest) and logs and len(inputs.groups()) < m.replicas:
        partial = (f"only replica group(s) {inputs.groups()} of the job's {m.replicas} given "
                   "(give every group's run dir)")
    return check_numerics(logs, sketches_on, partial)


def _heal_steps(logs: dict[tuple[int, int], list[layout.EventRecord]]) -> dict[int, list[int]]:
    """replica -> the steps at which its event logs record a heal."""
    out: dict[int, list[int]] = {}
    for (r, _), recs in logs.items():
        out.setdefault(r, []).extend(rec.step for rec in recs if rec.healed and rec.step is not None)
    return out


def _once(spans: list[TraceSpans]) -> list[str]:
    """What the traces cannot tell, each kind of note said once: the first file's, with how many
    more files said the same (a note's kind: its text after the file name, numbers aside)."""
    first: dict[str, str] = {}
    more: dict[str, int] = {}
    for sp in spans:
        for n in sp.notes:
            kind = re.sub(r"[0-9.]+", "#", n.split(": ", 1)[-1])
            if kind in first:
                more[kind] += 1
            else:
                first[kind], more[kind] = n, 0
    return [n + (f" (likewise in {more[k]} more trace file(s))" if more[k] else "") for k, n in first.items()]


def _failed_cycles(replica: int, failed_commits: list[commit_checks.FailedCommit], faults: Faults, schedule: Schedule,
                   heals: Optional[dict[int, list[int]]] = None) -> list[int]:
    """The cycles whose commit failed for ``replica`` — so that it sends the same fragment again —:
    its own failed commits, except those inside steps it lost to a fault and those it healed past
    (a replica whose commit failed while others committed is behind them at the next quorum and
    heals to their manager step, so it moves on with them: ``heals``, replica -> heal steps from
    the event logs, a heal within one window w after the sync), plus the others' failed commits
    while it was away (it healed past them)."""
    healed = (heals or {}).get(replica, [])
    mine = sorted({schedule.cycle_of(c.sync_step) for c in failed_commits if c.replica == replica
                   and not any(c.sync_step < h <= c.sync_step + schedule.window for h in healed)})
    lost = faults.lost(replica)
    if lost:
        away = {schedule.cycle_of(c.sync_step) for c in failed_commits
                if c.replica != replica and any(a <= c.sync_step <= b for a, b in lost)}
        mine = sorted({c for c in mine if not any(a <= schedule.sync_step(c) <= b for a, b in lost)} | away)
    return mine


def _infer_failed(wobs: list[WorkerObs], logged: set[int], ids: RunIdentities, schedule: Schedule) -> list[tuple[WorkerObs, int, str]]:
    """Failed commits of the replicas without an event log, inferred from their traces:
    (worker, sync step, how). Updates each such worker's failed cycles and expectations."""
    inferred: list[tuple[WorkerObs, int, str]] = []
    for wo in wobs:
        if wo.worker.replica in logged:
            continue  # the event log says which commits failed
        steps = commit_checks.infer(_syncs_seen(wo, ids), schedule, ids.distinct)
        if steps:
            wo.failed = sorted(set(wo.failed) | {schedule.cycle_of(s) for s, _ in steps})
            wo.expected = _expect(schedule, wo.ranges, wo.failed, wo.lost)
            inferred += [(wo, s, how) for s, how in steps]
    return inferred


def _results(wobs: list[WorkerObs], schedule: Schedule) -> tuple[list[EventResult], list[WorkerReport]]:
    """Per worker: one result per matched (expected, observed) pair, and the worker's report."""
    results: list[EventResult] = []
    reports: list[WorkerReport] = []
    for wo in wobs:
        mine = [_result(wo, e, o, schedule) for e, o in wo.matches]
        mine.sort(key=lambda r: (r.expected_step or r.observed_step or 0, r.kind == "sync"))
        results.extend(mine)
        w = wo.worker
        reports.append(
            WorkerReport(
                replica=w.replica, rank=w.rank, source=w.source,
                files=[str(t.path) for t in w.traces],
                step_source=w.traces[0].step_source,
                step_ranges=wo.ranges, failed_cycles=wo.failed, totals=_totals(mine),
                global_rank=w.global_rank, world_size=w.world_size,
            )
        )
    return results, reports


def _missing_traces(inputs, traced: set[int], faults: Faults, notes: list[str]) -> list[str]:
    """Run problems: a replica group of the run without a trace that no fault explains. Notes a
    job of which only some groups were given."""
    problems: list[str] = []
    if inputs.manifest is not None and inputs.whole_run:
        for r in inputs.groups():
            if r not in traced and not faults.explains_missing_trace(r):
                problems.append(f"no trace for replica {r} (no fault explains it)")
        total = inputs.manifest.replicas
        if len(inputs.run_dirs) >= 1 and inputs.groups() and len(inputs.groups()) < total:
            notes.append(
                f"job has {total} replica groups; inspected group(s) {inputs.groups()} "
                "(give every group's run dir to check them all)"
            )
    return problems


def _disagreements(ag) -> list[str]:
    """Run problems: replicas whose synced parameters differ after a commit (``check_agreement``)."""
    out = []
    for d in ag.disagreements:
        seen = ", ".join(
            f"replica {r}: fragment {v['fragment']} {str(v['fingerprint'])[:12]}" for r, v in sorted(d["replicas"].items())
        )
        out.append(f"replicas disagree on the synced parameters after manager step {d['manager_step']} (rank {d['rank']}): {seen}")
    return out


def _unexplained_failed_commits(failed_commits: list[commit_checks.FailedCommit]) -> list[str]:
    """Run problems: per worker, the failed commits no injected fault explains."""
    by_worker: dict[tuple[int, int], list[commit_checks.FailedCommit]] = {}
    for c in failed_commits:
        if not c.explained:
            by_worker.setdefault((c.replica, c.rank), []).append(c)
    out = []
    for (rep, rank), cs in sorted(by_worker.items()):
        how = "; ".join(sorted({f"{c.source.replace('_', ' ')}: {c.evidence}" for c in cs}))
        out.append(
            f"replica {rep} rank {rank}: {len(cs)} commit(s) failed (sync steps {', '.join(str(c.sync_step) for c in cs)}; "
            f"{how}) and no injected fault explains it (--allow-failed-commits to accept)"
        )
    return out
