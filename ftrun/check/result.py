"""What the check found (``ftrun.check.analyze.analyze``): msgspec Structs, JSON-ready via ``to_json``.

``Report.events`` holds one ``EventResult`` per expected or observed send/sync on every
worker, ordered by (replica, rank, step): where it was expected and observed, its verdict, and
its figures — ``SendFigures`` (a send's payload and queueing) or ``SyncFigures`` (the timing of
a sync and the send it waited for). ``compare`` reuses the per-sync timings and the per-send
``bytes``, and ``WorkerReport.totals``. In the JSON an event is one flat row (``EVENT_KEYS``):
the figures of the other kind, or of an event not observed, are null.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import msgspec

from ftrun.check.comm import SendComm
from ftrun.check.commits import FailedCommit
from ftrun.check.fired_faults import FaultRow, VoteRow
from ftrun.layout import Disagreement, JsonObject, NumericsCheck
from ftrun.schedule import Schedule
from ftrun.trace.spans import TraceSpans


class SendFigures(msgspec.Struct, frozen=True):
    """One observed send: what it moved and how its collectives queued (``ftrun.check.figures``)."""

    allreduces: int  # torchft manager.allreduce calls
    numel: int | None  # elements moved; None without tensor sizes
    bytes: int | None  # None without sizes or element size
    collectives: int  # attributed collective spans (backend span or NCCL kernel) + link holds
    queue_delay_ms: float | None = None  # largest start - issue of its collectives (ftrun.check.gpu_comm)
    queue_cause: str | None = None  # that delay's cause


class SyncFigures(msgspec.Struct, frozen=True):
    """One observed sync and the send it waited for, in ms (``ftrun.check.comm``'s definitions)."""

    exposed_comm_ms: float
    hidden_comm_ms: float | None
    send_to_done_ms: float | None
    comm_union_ms: float | None
    should_commit_ms: float | None
    exposed_data_ms: float  # = exposed_comm_ms: the fragment's collectives
    exposed_control_ms: float  # quorum wait before its send + should_commit
    quorum_ms: float | None
    serialized: bool | None
    serialized_collectives: int | None
    send_captured: bool
    # should_commit's stream synchronizes (where a CUDA run's CPU blocks), apart from exposed
    commit_sync_ms: float | None = None
    # in flight while the training thread still issued the send (prepare_sync): not hidden
    issuing_comm_ms: float | None = None


_SEND_KEYS = SendFigures.__struct_fields__
_SYNC_KEYS = SyncFigures.__struct_fields__


class EventResult(msgspec.Struct):
    replica: int
    rank: int
    kind: str  # "send" | "sync"
    fragment: int | None  # observed (from evidence); None when not observable / missing
    expected_fragment: int | None
    expected_step: int | None  # None: unexpected event
    observed_step: int | None  # None: missing event
    ok: bool
    problem: str | None = None  # what is wrong, one phrase; None when ok
    notes: list[str] = msgspec.field(default_factory=list)  # e.g. "send not captured", "ambiguous ..."
    evidence: str = "none"  # "send sizes" | "send count" | "restore sizes" | "restore count" | "paired send" | "none"
    fragment_checked: bool = False  # the observed fragment was identified from evidence (not ambiguous, not absent)
    fragment_candidates: list[int] | None = None
    # what names ``fragment``: "manifest", "log" (torchft's own log line), "class" (a signature
    # class labelled by the schedule: not an identity, ``fragment_checked`` false) or "none"
    fragment_basis: str = "none"
    manager_step: int | None = None
    cycle: int | None = None
    file: str | None = None
    ts_us: float | None = None
    send: SendFigures | None = None  # an observed send's figures
    sync: SyncFigures | None = None  # an observed sync's figures

    def row(self) -> EventRow:
        """One flat row: the placement and verdict, then every figure (null: not of this kind, or not observed)."""
        place = {f: getattr(self, f) for f in _PLACEMENT_KEYS}
        place["notes"] = list(self.notes)
        place["fragment_candidates"] = list(self.fragment_candidates) if self.fragment_candidates is not None else None
        send = {f: getattr(self.send, f) for f in _SEND_KEYS} if self.send is not None else {}
        sync = {f: getattr(self.sync, f) for f in _SYNC_KEYS} if self.sync is not None else {}
        return EventRow(**place, **send, **sync)


_PLACEMENT_KEYS = tuple(f for f in EventResult.__struct_fields__ if f not in ("send", "sync"))


class EventRow(msgspec.Struct, kw_only=True):
    """An event as ``report.json`` writes it (``EventResult.row``): one flat row, its keys in the
    published order (``EVENT_KEYS``): the placement and verdict, the send figures, the sync
    figures, then the GPU-aware ones of each; null where the event is of the other kind or was
    not observed."""

    replica: int
    rank: int
    kind: str
    fragment: int | None
    expected_fragment: int | None
    expected_step: int | None
    observed_step: int | None
    ok: bool
    problem: str | None
    notes: list[str]
    evidence: str
    fragment_checked: bool
    fragment_candidates: list[int] | None
    fragment_basis: str
    manager_step: int | None
    cycle: int | None
    file: str | None
    ts_us: float | None
    allreduces: int | None = None
    numel: int | None = None
    bytes: int | None = None
    collectives: int | None = None
    exposed_comm_ms: float | None = None
    hidden_comm_ms: float | None = None
    send_to_done_ms: float | None = None
    comm_union_ms: float | None = None
    should_commit_ms: float | None = None
    exposed_data_ms: float | None = None
    exposed_control_ms: float | None = None
    quorum_ms: float | None = None
    serialized: bool | None = None
    serialized_collectives: int | None = None
    send_captured: bool | None = None
    queue_delay_ms: float | None = None
    queue_cause: str | None = None
    commit_sync_ms: float | None = None
    issuing_comm_ms: float | None = None


EVENT_KEYS = EventRow.__struct_fields__


class WorkerTotals(msgspec.Struct):
    """One worker's totals (``ftrun.check.figures.totals``): its events and their verdicts, its
    observed sends and syncs, the syncs' figures summed (ms), the bytes its sends moved."""

    events: int = 0
    ok: int = 0
    failed: int = 0
    sends: int = 0
    syncs: int = 0
    exposed_comm_ms: float = 0.0
    hidden_comm_ms: float = 0.0
    send_to_done_ms: float = 0.0
    should_commit_ms: float = 0.0
    exposed_data_ms: float = 0.0
    exposed_control_ms: float = 0.0
    bytes: int = 0
    serialized_syncs: int = 0


class WorkerReport(msgspec.Struct):
    replica: int
    rank: int
    source: str  # how (replica, rank) was decided: manifest, file name, file order (+ torchft's process-group name)
    files: list[str]
    step_source: str  # "ftrun" (ftrun::step#S) or "profiler" (ProfilerStep#k)
    step_ranges: list[tuple[int, int]]  # captured training steps per file
    failed_cycles: list[int]
    totals: WorkerTotals = msgspec.field(default_factory=WorkerTotals)
    # the traces' distributedInfo: the default group's rank and size ("global rank 3 of 8"), never the replica
    global_rank: int | None = None
    world_size: int | None = None

    def global_rank_text(self) -> str | None:
        if self.global_rank is None:
            return None
        return f"global rank {self.global_rank}" + (f" of {self.world_size}" if self.world_size is not None else "")


class CrossCheck(msgspec.Struct):
    kind: str
    step: int
    manager_step: int | None
    fragments: dict[str, int | None]  # "replica/rank" -> fragment (None = event absent)
    ok: bool
    problem: str | None = None


class StepNumbering(msgspec.Struct):
    """How the check numbered ``ProfilerStep``s (``ftrun.check.match.choose_numbering``): the
    numbering asked for, the traces' evidence, whether it proves one, and the one used."""

    requested: str  # "top" | "end" | "auto"
    evidence: str
    proven: bool
    used: str = ""  # "top" | "end" | "ftrun::step"


class AgreementCheck(msgspec.Struct):
    """The replicas' fingerprints after each commit (``ftrun.check.agreement``), as the report
    records it: ``ok`` (none differ), how many commits were compared, and those that differ."""

    ok: bool
    commits_checked: int
    disagreements: list[Disagreement]


class SendOverlap(msgspec.Struct):
    """One send's overlap slowdown (``ftrun.check.overlap``): its overlapped steps' median duration
    against its worker's steps without a send in flight, their ratio and its spread (None: too few)."""

    replica: int
    rank: int
    fragment: int | None
    send_step: int | None
    sync_step: int | None
    overlapped_steps: int
    median_overlapped_ms: float | None
    median_other_ms: float | None
    slowdown: float | None
    slowdown_spread: float | None


class WorkerOverlap(msgspec.Struct):
    """The same over all of one worker's sends."""

    replica: int
    rank: int
    overlapped_steps: int
    other_steps: int
    median_overlapped_ms: float | None
    median_other_ms: float | None
    slowdown: float | None
    slowdown_spread: float | None


class Overlap(msgspec.Struct):
    """``Report.overlap`` (``ftrun.check.overlap.overlap_of``): per send and per worker; empty
    lists when the traces hold no send/sync pair."""

    per_send: list[SendOverlap] = msgspec.field(default_factory=list)
    workers: list[WorkerOverlap] = msgspec.field(default_factory=list)


class ReportSchedule(msgspec.Struct):
    """The schedule the check held the traces to, by torchft's names, and its window w = H/F."""

    fragments: int
    sync_every: int
    fragment_sync_delay: int
    window: int

    @classmethod
    def of(cls, schedule: Schedule) -> ReportSchedule:
        return cls(schedule.fragments, schedule.sync_every, schedule.fragment_sync_delay, schedule.window)


E = TypeVar("E")  # EventResult in the report, EventRow in its JSON


class ReportBody(msgspec.Struct, Generic[E]):
    """What the check found, the fields ``Report`` and its JSON record (``ReportJson``) share, in
    the JSON's order; ``events``: ``EventResult``s in the report, flat ``EventRow``s in the JSON."""

    verdict: str  # "pass" | "fail"
    mode: str  # "manifest" | "foreign"
    files: list[str]
    replicas: list[int]
    schedule: ReportSchedule
    step_numbering: StepNumbering
    workers: list[WorkerReport]
    events: list[E]
    cross_replica: list[CrossCheck]
    run_dir: str | None = None
    notes: list[str] = msgspec.field(default_factory=list)
    # merged runs: every run dir (the replica groups of one job) and the job's id
    run_dirs: list[str] = msgspec.field(default_factory=list)
    job_id: str | None = None
    # injected faults that fired (``ftrun.check.fired_faults``): steps each replica lost
    faults: list[FaultRow | VoteRow] = msgspec.field(default_factory=list)
    # fingerprints of the synced fragments across the (merged) event logs
    agreement: AgreementCheck | None = None
    # the numeric check of every sync (``ftrun.check.numerics``): status, checked, tolerance, problems, heals
    numerics: NumericsCheck | None = None
    # run-level problems (a replica without a trace, replicas that disagree on a fingerprint)
    run_problems: list[str] = msgspec.field(default_factory=list)
    # the same, by what was checked: "traces" (a replica without one), "agreement" (fingerprints),
    # "commits" (failed commits no fault explains, unless allowed); run_problems is their concatenation
    run_problems_by_class: dict[str, list[str]] = msgspec.field(default_factory=dict)
    # commits that failed (replica, rank, sync_step, fragment, source: event_log|inferred, explained_by_fault)
    failed_commits: list[FailedCommit] = msgspec.field(default_factory=list)
    # the overlap slowdown per send and per worker (``ftrun.check.overlap.overlap_of``)
    overlap: Overlap = msgspec.field(default_factory=Overlap)
    # what ran (the manifest's ``versions``: torch, torchft version/distribution/process-group API); None: no manifest
    versions: dict[str, str | None] | None = None


class ReportJson(ReportBody[EventRow]):
    """``report.json`` / ``inspect-trace --json``: the report's fields, its events as flat rows,
    and every problem in one list (``Report.problems``)."""

    problems: list[str] = msgspec.field(default_factory=list)


class Report(ReportBody[EventResult]):
    """What ``ftrun.check.analyze.analyze`` found; ``record()`` is its JSON."""

    # for renderers, not in the JSON: each trace file's extracted spans (``ftrun.trace.spans.TraceSpans``)
    # and its sends' communication (send start ts -> ``ftrun.check.comm.SendComm``)
    spans: dict[str, TraceSpans] = msgspec.field(default_factory=dict)
    comms: dict[str, dict[float, SendComm]] = msgspec.field(default_factory=dict)

    def __repr__(self) -> str:  # not the spans and comms it carries for renderers
        return f"Report(verdict={self.verdict!r}, mode={self.mode!r}, files={self.files!r}, events={len(self.events)})"

    @property
    def ok(self) -> bool:
        return self.verdict == "pass"

    def problems(self) -> list[str]:
        out = [f"replica {e.replica} rank {e.rank}: {e.problem}" for e in self.events if not e.ok]
        out += [c.problem for c in self.cross_replica if not c.ok and c.problem]
        out += self.run_problems
        out += [f"numerics: {p.text}" for p in self.numerics.problems] if self.numerics is not None else []
        return out

    def record(self) -> ReportJson:
        """The report as its JSON writes it (``ReportJson``): the same values, events as rows."""
        shared = {f: getattr(self, f) for f in ReportJson.__struct_fields__ if f not in ("events", "problems")}
        return ReportJson(**shared, events=[e.row() for e in self.events], problems=self.problems())

    def to_json(self) -> JsonObject:
        """``record()`` as JSON-ready builtins (dicts, lists, scalars): the public API's
        ``Report.to_json`` and launch's summary ``inspection``."""
        out: JsonObject = msgspec.to_builtins(self.record())
        return out


def numerics_of(report: Report) -> NumericsCheck | None:
    """The numeric check of the outer steps, or None when it checked nothing and found nothing
    wrong (sketches off, a foreign run, an ftrun without the check): then numerics were not
    checked, and nothing may say they passed. A check with problems is returned even when no sync
    counted as checked (a sketch or record missing)."""
    n = report.numerics
    return n if n is not None and n.counts() else None
