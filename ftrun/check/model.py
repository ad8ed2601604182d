"""The result of ``ftrun.check.analyze.analyze``: plain dataclasses, JSON-ready via ``to_json``.

``Report.events`` holds one ``EventResult`` per expected or observed send/sync on every
worker, ordered by (replica, rank, step). ``compare`` can reuse the per-sync timings
(``exposed_comm_ms``, ``hidden_comm_ms``, ``send_to_done_ms``, ``should_commit_ms``) and the
per-send ``bytes``, and ``WorkerReport.totals``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class EventResult:
    replica: int
    rank: int
    kind: str  # "send" | "sync"
    fragment: Optional[int]  # observed (from evidence); None when not observable / missing
    expected_fragment: Optional[int]
    expected_step: Optional[int]  # None: unexpected event
    observed_step: Optional[int]  # None: missing event
    ok: bool
    problem: Optional[str] = None  # what is wrong, one phrase; None when ok
    notes: list[str] = field(default_factory=list)  # e.g. "send not captured", "ambiguous ..."
    evidence: str = "none"  # "send sizes" | "send count" | "restore sizes" | "restore count" | "paired send" | "none"
    fragment_checked: bool = False  # the observed fragment was identified from evidence (not ambiguous, not absent)
    fragment_candidates: Optional[list[int]] = None
    manager_step: Optional[int] = None
    cycle: Optional[int] = None
    file: Optional[str] = None
    ts_us: Optional[float] = None
    # sends
    allreduces: Optional[int] = None
    numel: Optional[int] = None
    bytes: Optional[int] = None
    collectives: Optional[int] = None
    # syncs
    exposed_comm_ms: Optional[float] = None
    hidden_comm_ms: Optional[float] = None
    send_to_done_ms: Optional[float] = None
    comm_union_ms: Optional[float] = None
    should_commit_ms: Optional[float] = None
    exposed_data_ms: Optional[float] = None  # = exposed_comm_ms: the fragment's collectives
    exposed_control_ms: Optional[float] = None  # quorum wait before its send + should_commit
    quorum_ms: Optional[float] = None
    serialized: Optional[bool] = None
    serialized_collectives: Optional[int] = None
    send_captured: Optional[bool] = None
    # GPU-aware figures (ftrun.check.gpu_comm): sends' largest queue delay and its cause; syncs'
    # should_commit stream synchronizes (where a CUDA run's CPU blocks), apart from exposed
    queue_delay_ms: Optional[float] = None
    queue_cause: Optional[str] = None
    commit_sync_ms: Optional[float] = None


@dataclass
class WorkerReport:
    replica: int
    rank: int
    source: str  # how (replica, rank) was decided: manifest, file name, file order (+ torchft's process-group name)
    files: list[str]
    step_source: str  # "ftrun" (ftrun::step#S) or "profiler" (ProfilerStep#k)
    step_ranges: list[tuple[int, int]]  # captured training steps per file
    failed_cycles: list[int]
    totals: dict[str, Any] = field(default_factory=dict)
    # the traces' distributedInfo: the default group's rank and size ("global rank 3 of 8"), never the replica
    global_rank: Optional[int] = None
    world_size: Optional[int] = None

    def global_rank_text(self) -> Optional[str]:
        if self.global_rank is None:
            return None
        return f"global rank {self.global_rank}" + (f" of {self.world_size}" if self.world_size is not None else "")


@dataclass
class CrossCheck:
    kind: str
    step: int
    manager_step: Optional[int]
    fragments: dict[str, Optional[int]]  # "replica/rank" -> fragment (None = event absent)
    ok: bool
    problem: Optional[str] = None


@dataclass
class Report:
    verdict: str  # "pass" | "fail"
    mode: str  # "manifest" | "foreign"
    files: list[str]
    replicas: list[int]
    schedule: dict[str, int]
    step_numbering: dict[str, Any]
    workers: list[WorkerReport]
    events: list[EventResult]
    cross_replica: list[CrossCheck]
    run_dir: Optional[str] = None
    notes: list[str] = field(default_factory=list)
    # merged runs: every run dir (the replica groups of one job) and the job's id
    run_dirs: list[str] = field(default_factory=list)
    job_id: Optional[str] = None
    # injected faults that fired (``ftrun.check.faults.FaultMark.to_json``): steps each replica lost
    faults: list[dict[str, Any]] = field(default_factory=list)
    # fingerprints of the synced fragments across the (merged) event logs
    agreement: Optional[dict[str, Any]] = None
    # the numeric check of every sync (``ftrun.check.numerics.Numerics.to_json``): status, checked,
    # tolerance, problems, heals
    numerics: Optional[dict[str, Any]] = None
    # run-level problems (a replica without a trace, replicas that disagree on a fingerprint)
    run_problems: list[str] = field(default_factory=list)
    # the same, by what was checked: "traces" (a replica without one), "agreement" (fingerprints),
    # "commits" (failed commits no fault explains, unless allowed); run_problems is their concatenation
    run_problems_by_class: dict[str, list[str]] = field(default_factory=dict)
    # commits that failed: {replica, rank, sync_step, fragment, source: event_log|inferred, explained_by_fault}
    failed_commits: list[dict[str, Any]] = field(default_factory=list)
    # the overlap slowdown per send and per worker (``ftrun.check.overlap.overlap_of``)
    overlap: dict[str, Any] = field(default_factory=dict)
    # what ran (the manifest's ``versions``: torch, torchft version/distribution/process-group API); None: no manifest
    versions: Optional[dict[str, Any]] = None
    # for renderers, not in the JSON: each trace file's extracted spans (``ftrun.trace.spans.TraceSpans``)
    # and its sends' communication (send start ts -> ``ftrun.check.comm.SendComm``)
    spans: dict[str, Any] = field(default_factory=dict, repr=False)
    comms: dict[str, dict[float, Any]] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return self.verdict == "pass"

    def problems(self) -> list[str]:
        out = [f"replica {e.replica} rank {e.rank}: {e.problem}" for e in self.events if not e.ok]
        out += [c.problem for c in self.cross_replica if not c.ok and c.problem]
        out += self.run_problems
        out += [f"numerics: {p['text']}" for p in (self.numerics or {}).get("problems", [])]
        return out

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(dataclasses.replace(self, spans={}, comms={}))
        del d["spans"], d["comms"]
        d["problems"] = self.problems()
        return d


def numerics_of(report: Report) -> Optional[dict[str, Any]]:
    """The numeric check of the outer steps in its JSON form (``{checked, tolerance, problems}``),
    or None when the report carries none (sketches off, a foreign run, an ftrun without the check):
    then numerics were not checked, and nothing may say they passed."""
    n = report.to_json().get("numerics")
    return n if isinstance(n, dict) and n.get("checked") else None
