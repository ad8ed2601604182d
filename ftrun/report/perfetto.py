"""``inspect-trace --export-perfetto OUT.json``: the inspected traces plus ftrun's verdicts, as one
chrome-JSON trace that Perfetto's UI (ui.perfetto.dev) and chrome://tracing open. Torch-free.

* Every worker (replica, rank) is one process: ``pid`` = its position in the report (1, 2, ...),
  named ``replica R rank G`` by a ``process_name`` metadata event. All its original events are
  kept (every phase, args untouched); only ``pid``/``tid`` are remapped (threads of the
  original trace keep their tid unless two original processes collide, and flow ``id``\\ s get a
  per-worker offset so arrows never join two workers). The original ``process_*`` metadata is
  replaced by ours.
* A thread ``ftrun verdicts`` per worker holds one event per expected or observed send/sync:
  an instant (``ph: "i"``) at the observed time, or for a sync with a measured blocking time a
  span (``ph: "X"``) covering that exposed communication. Names read
  ``send frag 0 ok`` / ``sync frag 1 FAIL: expected step 30, observed 31``; ``args`` carry
  expected and observed step and fragment, manager step, cycle, exposed/hidden/send->done ms,
  serialized collectives, bytes, problem and notes. An event that was expected but not
  observed sits at the start of its expected step. Failed cross-replica checks add a
  ``cross-replica FAIL`` instant on each worker at that step.

* With a recovery breakdown (``inspect-trace`` of a run with a fault), an ``ftrun recovery``
  process: a thread per fault, one span per phase over its own interval (``recovery_events``).

Streaming: one trace file is decoded at a time and its events are written out as they go
(msgspec), so memory stays at about one trace. ``OUT`` ending in ``.gz`` is gzip-compressed.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import IO, Any

import msgspec

from ftrun.check.comm import blocked_from
from ftrun.check.result import CrossCheck, EventResult, Report, WorkerReport
from ftrun.errors import BadInput
from ftrun.layout import RecoveryRecord
from ftrun.output import atomic_open, check_target
from ftrun.report.chrome_events import ChromeEvent, CrossArgs, MetaArgs, RecoveryArgs, VerdictArgs, meta
from ftrun.trace.load import MAX_TRACE_BYTES, decode, read_bytes
from ftrun.trace.spans import TraceSpans

VERDICT_THREAD = "ftrun verdicts"
VERDICT_TID = 9_999_999  # above Linux's pid_max: never a real thread id
SYNTHETIC_TID = 10_000_000  # first tid handed out when two original (pid, tid) pairs collide
FLOW_ID_STRIDE = 1 << 40
DROPPED_METADATA = {"process_name", "process_labels", "process_sort_index"}
NUMBERING_OFFSET = {"top": 0, "end": 1}

_any = msgspec.json.Decoder()
_enc = msgspec.json.Encoder()


def verdict_name(e: EventResult) -> str:
    frag = e.fragment if e.observed_step is not None else e.expected_fragment  # observed: "?" when not identified
    head = f"{e.kind} frag {'?' if frag is None else frag}"
    if e.ok:
        return f"{head} ok"
    parts = []
    if e.expected_step is None:
        parts.append(
            f"unexpected at step {e.observed_step}"
            if e.observed_step is not None
            else "unexpected, outside every step span"
        )
    elif e.observed_step is None:
        parts.append(f"expected step {e.expected_step}, not observed")
    else:
        if e.observed_step != e.expected_step:
            parts.append(f"expected step {e.expected_step}, observed {e.observed_step}")
        if e.fragment is not None and e.expected_fragment is not None and e.fragment != e.expected_fragment:
            parts.append(f"expected fragment {e.expected_fragment}, observed {e.fragment}")
    if not parts:
        parts.append(e.problem or "failed")
    return f"{head} FAIL: {'; '.join(parts)}"


def verdict_args(e: EventResult) -> VerdictArgs:
    """The verdict's ``args``: placement, then the send's or the sync's figures."""
    args = VerdictArgs(
        verdict="ok" if e.ok else "FAIL",
        kind=e.kind,
        replica=e.replica,
        rank=e.rank,
        expected_step=e.expected_step,
        observed_step=e.observed_step,
        fragment=e.fragment,
        expected_fragment=e.expected_fragment,
        evidence=e.evidence,
        manager_step=e.manager_step,
        cycle=e.cycle,
        problem=e.problem,
        notes="; ".join(e.notes) or None,
    )
    if e.send is not None:
        s = e.send
        args.allreduces, args.collectives, args.numel, args.bytes = s.allreduces, s.collectives, s.numel, s.bytes
    elif e.sync is not None:
        y = e.sync
        args.exposed_comm_ms, args.hidden_comm_ms = y.exposed_comm_ms, y.hidden_comm_ms
        args.send_to_done_ms, args.comm_union_ms, args.should_commit_ms = (
            y.send_to_done_ms,
            y.comm_union_ms,
            y.should_commit_ms,
        )
        args.serialized, args.serialized_collectives = y.serialized, y.serialized_collectives
        args.send_captured = y.send_captured
    return args


class _Writer:
    def __init__(self, f: IO[bytes] | gzip.GzipFile) -> None:
        self.f = f
        self.n = 0

    def write(self, ev: ChromeEvent | dict[str, Any]) -> None:  # ftrun's own, or a trace's event as read
        self.f.write(b",\n" if self.n else b"\n")
        self.f.write(_enc.encode(ev))
        self.n += 1


class _Worker:
    """pid/tid remapping and step spans of one worker while its files stream through."""

    def __init__(self, pid: int, index: int) -> None:
        self.pid = pid
        self.flow_offset = index * FLOW_ID_STRIDE
        self.tids: dict[tuple[Any, Any], int] = {}
        self.used: set[int] = {VERDICT_TID}
        self.next_tid = SYNTHETIC_TID
        self.thread_meta: set[tuple[str, int]] = set()
        self.first_ts: float | None = None

    def tid(self, pid: Any, tid: Any) -> int:
        key = (pid, tid)
        got = self.tids.get(key)
        if got is None:
            if isinstance(tid, int) and not isinstance(tid, bool) and 0 <= tid < SYNTHETIC_TID and tid not in self.used:
                got = tid
            else:
                got = self.next_tid
                self.next_tid += 1
            self.used.add(got)
            self.tids[key] = got
        return got


def exposed_from(report: Report, e: EventResult) -> float | None:
    """Where sync ``e``'s exposed wait began (``ftrun.check.comm.blocked_from``: ftrun's wait right
    before perform_sync when there is one), else its ``ts_us``."""
    spans = report.spans.get(e.file) if e.file is not None else None
    sync = next((s for s in spans.syncs if s.span.ts == e.ts_us), None) if spans is not None else None
    return blocked_from(sync) if sync is not None else e.ts_us


def step_starts(spans: list[TraceSpans], offset: int) -> dict[int, float]:
    """Training step -> start of its step span, from the check's extracted spans
    (``Report.spans``); ProfilerStep numbers shifted by the fitted numbering's ``offset``."""
    out: dict[int, float] = {}
    for sp in spans:
        shift = 0 if sp.step_source == "ftrun" else offset
        for s in sp.steps:
            out.setdefault(s.number + shift, s.span.ts)
    return out


def _stream_file(path: Path, w: _Worker, out: _Writer, limit: int) -> int:
    trace = decode(path, read_bytes(path, limit))
    n = 0
    for raw in trace.traceEvents:
        try:
            ev = _any.decode(raw)
        except msgspec.DecodeError:
            continue
        if not isinstance(ev, dict):
            continue
        ph, name = ev.get("ph"), ev.get("name")
        if ph == "M" and name in DROPPED_METADATA:
            continue
        tid = w.tid(ev.get("pid"), ev.get("tid"))
        if ph == "M" and name in ("thread_name", "thread_sort_index"):
            if (name, tid) in w.thread_meta:
                continue
            w.thread_meta.add((name, tid))
        ev["pid"], ev["tid"] = w.pid, tid
        if ph in ("s", "t", "f") and isinstance(ev.get("id"), int):
            ev["id"] = ev["id"] + w.flow_offset
        ts = ev.get("ts")
        if ph == "X" and isinstance(name, str) and isinstance(ts, (int, float)):
            if w.first_ts is None or ts < w.first_ts:
                w.first_ts = ts
        out.write(ev)
        n += 1
    return n


RECOVERY_PROCESS = "ftrun recovery"


def recovery_events(recs: list[RecoveryRecord], base_ns: float, pid: int) -> list[ChromeEvent]:
    """The recovery breakdowns (``layout.RecoveryRecord``) as one process, a thread per fault
    and a span per phase over its own interval, on the traces' clock (kineto's ``ts`` are
    microseconds after ``baseTimeNanoseconds``)."""
    out = [
        meta("process_name", pid, 0, MetaArgs(name=RECOVERY_PROCESS)),
        meta("process_sort_index", pid, 0, MetaArgs(sort_index=-1)),
    ]
    for i, rec in enumerate(recs):
        tid = i + 1
        out.append(meta("thread_name", pid, tid, MetaArgs(name=rec.fault)))
        for phase, span in rec.spans.items():
            if span is None:
                continue
            held = rec.phases.get(phase)
            out.append(
                ChromeEvent(
                    name=phase + ("" if held is None else f" {held:.2f} s"),
                    cat="ftrun,recovery",
                    ph="X",
                    ts=(rec.fault_at + span[0]) * 1e6 - base_ns / 1e3,
                    dur=max((span[1] - span[0]) * 1e6, 1.0),
                    pid=pid,
                    tid=tid,
                    args=RecoveryArgs(
                        phase=phase,
                        seconds_on_critical_path=held,
                        source=rec.sources.get(phase),
                        total_s=rec.total_s,
                        unaccounted_s=rec.unaccounted_s,
                    ),
                )
            )
    return out


class PerfettoExport(msgspec.Struct):
    """What ``export_perfetto`` wrote: its trace events, verdict events and workers, and where."""

    events: int = 0
    verdicts: int = 0
    workers: int = 0
    path: str = ""


def export_perfetto(
    report: Report,
    out_path: Path,
    recovery: list[RecoveryRecord] | None = None,
    base_ns: float | None = None,
    overwrite: bool = False,
    max_trace_bytes: int = MAX_TRACE_BYTES,
) -> PerfettoExport:
    """Write the chrome-JSON trace (module docstring). Returns counts. ``BadInput`` if unwritable,
    or when ``out_path`` is a file or symlink ftrun did not write and not ``overwrite``
    (``ftrun.output``).
    ``recovery`` + ``base_ns`` (the traces' ``baseTimeNanoseconds``): add an ``ftrun recovery``
    process with each fault's phases (``recovery_events``)."""
    out_path = Path(out_path)
    offset = NUMBERING_OFFSET.get(report.step_numbering.used, 0)
    check_target(out_path, "--export-perfetto", inputs=[Path(f) for wr in report.workers for f in wr.files])
    try:
        out_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise BadInput(f"--export-perfetto {out_path}: cannot write ({err.strerror or err})") from None
    counts = PerfettoExport(path=str(out_path))
    # written to a temporary file, renamed over OUT only when complete (ftrun.output)
    with atomic_open(out_path, "--export-perfetto", overwrite) as raw_f:
        f: IO[bytes] | gzip.GzipFile = (
            gzip.GzipFile(fileobj=raw_f, mode="wb", compresslevel=3) if out_path.name.endswith(".gz") else raw_f
        )
        try:
            f.write(
                b'{"ftrun_export":"inspect-trace --export-perfetto","traceEvents":['
            )  # (ftrun.output knows it by this)
            out = _Writer(f)
            for i, wr in enumerate(sorted(report.workers, key=lambda w: (w.replica, w.rank))):
                _write_worker(report, wr, i, out, offset, max_trace_bytes, counts)
            if recovery and base_ns is not None:
                for ev in recovery_events(recovery, base_ns, len(report.workers) + 1):
                    out.write(ev)
            f.write(b"\n],")
            f.write(b'"displayTimeUnit":"ms","otherData":' + _enc.encode(_other_data(report)) + b"}\n")
        finally:
            if f is not raw_f:
                f.close()
    return counts


def _write_worker(
    report: Report, wr: WorkerReport, i: int, out: _Writer, offset: int, max_trace_bytes: int, counts: PerfettoExport
) -> None:
    """Worker ``wr`` as process ``i + 1``: its name and labels, its traces' events, then its
    verdicts (one per checked event) and the cross-replica failures that name it."""
    pid = i + 1
    w = _Worker(pid, i)
    out.write(meta("process_name", pid, 0, MetaArgs(name=f"replica {wr.replica} rank {wr.rank}")))
    out.write(meta("process_sort_index", pid, 0, MetaArgs(sort_index=i)))
    out.write(meta("process_labels", pid, 0, MetaArgs(labels=f"ftrun {report.verdict.upper()}")))
    out.write(meta("thread_name", pid, VERDICT_TID, MetaArgs(name=VERDICT_THREAD)))
    out.write(meta("thread_sort_index", pid, VERDICT_TID, MetaArgs(sort_index=-1)))
    for file in wr.files:
        counts.events += _stream_file(Path(file), w, out, max_trace_bytes)
    starts = step_starts([report.spans[f] for f in wr.files if f in report.spans], offset)
    fallback = w.first_ts if w.first_ts is not None else 0.0
    for e in report.events:
        if e.replica == wr.replica and e.rank == wr.rank:
            out.write(_verdict_event(report, e, pid, starts, fallback))
            counts.verdicts += 1
    me = f"{wr.replica}/{wr.rank}"
    for c in report.cross_replica:
        if not c.ok and me in c.fragments and c.step in starts:
            out.write(_cross_event(c, pid, starts[c.step]))
            counts.verdicts += 1
    counts.workers += 1


def _verdict_event(report: Report, e: EventResult, pid: int, starts: dict[int, float], fallback: float) -> ChromeEvent:
    """One checked event's verdict on the worker's verdict thread: an instant at its observed
    time (else the start of its expected step), or a slice as long as its exposed communication."""
    ts = e.ts_us
    if ts is None:
        ts = starts.get(e.expected_step if e.expected_step is not None else -1, fallback)
    ev = ChromeEvent(
        name=verdict_name(e), cat="ftrun,verdict", ph="i", s="t", ts=ts, pid=pid, tid=VERDICT_TID, args=verdict_args(e)
    )
    if e.sync is not None and e.ts_us is not None and e.sync.exposed_comm_ms:
        exposed_ts = exposed_from(report, e)
        ev.ph, ev.s, ev.dur = "X", None, max(e.sync.exposed_comm_ms * 1000.0, 1.0)
        ev.ts = exposed_ts if exposed_ts is not None else e.ts_us
    return ev


def _cross_event(c: CrossCheck, pid: int, ts: float) -> ChromeEvent:
    """A cross-replica failure that names this worker, at the start of its step."""
    return ChromeEvent(
        name=f"cross-replica FAIL: {c.kind} at step {c.step}",
        cat="ftrun,verdict",
        ph="i",
        s="t",
        ts=ts,
        pid=pid,
        tid=VERDICT_TID,
        args=CrossArgs(problem=c.problem, fragments=dict(c.fragments), manager_step=c.manager_step),
    )


def _other_data(report: Report) -> dict[str, str]:
    """The trace's ``otherData``: the verdict, the schedule, the first problems, the faults."""
    return {
        "ftrun_verdict": report.verdict,
        "ftrun_schedule": " ".join(f"{k}={v}" for k, v in msgspec.structs.asdict(report.schedule).items()),
        "ftrun_problems": " | ".join(report.problems()[:50]),
        "ftrun_faults": " | ".join(x.text for x in report.faults),
    }
