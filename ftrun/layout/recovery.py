"""What a run's faults did, as summary.json holds it. Torch-free.

``FaultHistory`` (summary.json's ``faults``): what happened, from the logs alone — each fired
fault and whether its group came back, restarts, heals, quorum changes, commits lost
(``ftrun.launch.results.fault_history`` builds it). ``RecoveryRecord`` (summary.json's
``recovery``, inspect-trace's ``--json``): where the time went, one per fault that stopped a
group (``ftrun.check.recovery`` builds it; the recovery views, the timeline's and Perfetto's
recovery lanes, compare's, sweep's and plan's figures read it).

Times are seconds, rounded to the millisecond; ``spans`` are seconds after the fault
(``fault_at``, unix time). A phase that did not happen is None in ``phases`` and ``spans``, its
reason in ``reasons``; ``sources`` says which record timed each phase ("trace" | "event log")."""

from __future__ import annotations

from typing import ClassVar

import msgspec

from ftrun.layout.codec import ReadAsDict
from ftrun.layout.events import Healed
from ftrun.layout.faults import FaultMarker
from ftrun.layout.manifest import DetectionBound


class FaultOutcome(FaultMarker):
    """A fired fault (its ``FaultMarker``) and what became of its group: ``recovered_s``: fault ->
    the group's own first commit in a full quorum after it healed (None: never back);
    ``rejoined_after_end``: the step it rejoined at, after the run's last step ``last_step`` (None:
    not so); ``cause``: why a relaunched group never came back (its one line; None otherwise)."""

    recovered_s: float | None = None
    rejoined_after_end: int | None = None
    last_step: int | None = None
    cause: str | None = None


class HealRow(msgspec.Struct):
    """A heal seen in a group's rank-0 step log: the group, the step it healed in, then its
    ``layout.Healed`` record's fields (source replica, peer step, manager step)."""

    replica: int
    step: int | None
    source_replica: int | None
    peer_step: int
    manager_step: int

    @classmethod
    def of(cls, replica: int, step: int | None, h: Healed) -> HealRow:
        return cls(replica, step, h.source_replica, h.peer_step, h.manager_step)


class QuorumChange(msgspec.Struct):
    """A quorum the first group here computed (``observer``: its replica id) and at which step."""

    observer: int
    step: int | None
    quorum_id: int
    participants: list[int | None]


class FaultHistory(ReadAsDict, msgspec.Struct, kw_only=True):
    """summary.json's ``faults``: every fired fault that took a group out of the quorum
    (``FaultOutcome``; a hang or corruption is not listed: nothing left), ``extra_steps`` trained
    past ``--steps`` while the groups waited for a relaunched one (``ftrun.worker.stop``), the
    launcher's ``restarts``, the ``heals``, the first group's ``quorum_changes``, and the commits
    lost (``commits_lost``: how many manager steps failed to commit, listed in
    ``failed_commit_manager_steps``)."""

    _READ_AS: ClassVar[tuple[str, str]] = ("Run.summary.faults", "faults")  # (was a dict)
    faults: list[FaultOutcome] = []
    extra_steps: int = 0
    restarts: int = 0
    heals: list[HealRow] = []
    quorum_changes: list[QuorumChange] = []
    commits_lost: int = 0
    failed_commit_manager_steps: list[int] = []


class CollectiveHold(msgspec.Struct):
    """Survivors whose sync of a round the faulted group was in (sent before the fault) failed
    only after torchft's process-group timeout (``ftrun.check.recovery_hold``): ``replicas``
    held, ``held_s`` the longest (the round's send -> the failed sync's end), ``timeout_s`` the
    run's ``timeout_s`` (torchft's Manager and process-group timeout), ``error``: a held
    survivor's commit error when it names a timeout (else None); ``released_s``: seconds after
    the fault the last held survivor's sync ended."""

    replicas: list[int]
    held_s: float
    released_s: float
    timeout_s: float
    error: str | None = None


class SurvivorLosses(msgspec.Struct):
    """What the groups that survived a fault lost between it and the group's first commit:
    failed commits, the most steps one ran before the group was back in its quorum, steps/s
    during the recovery against the same length of time before it, and their ratio (None:
    not measured)."""

    failed_commits: int
    steps_without_group: int
    steps_per_s_before: float | None
    steps_per_s_during: float | None
    goodput: float | None


class RecoveryRecord(ReadAsDict, msgspec.Struct, kw_only=True):
    """Where one fault's recovery time went (``ftrun.check.recovery``'s module docstring says how
    each phase is measured). ``phases``: seconds of [fault, first commit] each phase holds alone;
    ``total_s``: fault -> the group's first commit (None: never back); ``detect_limits``: what
    bounded detection (the manifest's ``detection``, else the configured heartbeat timeout);
    ``reconfigure_participants`` / ``participant_sources``: each participant's (its replica id, as
    JSON keys are text) own configure and where it was timed; ``relaunch_detail``: the relaunch's
    parts (``launcher_to_rank_s``, ``rank_to_manager_s``, ``manager_s``; {} when not known);
    ``survivors``: ``SurvivorLosses`` (None: no surviving group's log here);
    ``collective_hold``: survivors held in a sync with the group until torchft's process-group
    timeout (``CollectiveHold``; None: no such evidence); ``text``: the paragraph that says it.
    Field order is the JSON's. The written form of one fault's
    ``ftrun.check.recovery_model.Recovery`` (its ``record()``), which keeps the unrounded unix-time
    values while the breakdown is measured and read (its docstring says why the two are not one)."""

    _READ_AS: ClassVar[tuple[str, str]] = ("Run.summary.recovery[i]", "recovery")  # (was a dict)
    fault: str  # "kill 1@25"
    replica: int
    fault_at: float
    phases: dict[str, float | None]
    unaccounted_s: float | None
    total_s: float | None
    heal_bytes: int | None = None
    heal_source: int | None = None
    heal_bytes_sent: int | None = None
    heal_rate_bps: int | None = None
    heal_link_hold_s: float | None = None
    largest_phase: str | None = None
    spans: dict[str, tuple[float, float] | None] = {}
    sources: dict[str, str] = {}
    relaunch_detail: dict[str, float] = {}
    reasons: dict[str, str] = {}
    detect_bound: str = ""
    detect_limits: DetectionBound | None = None
    reconfigure_participants: dict[str, float] = {}
    participant_sources: dict[str, str] = {}
    heal_send_s: float | None = None
    heal_send_source: str | None = None
    survivors: SurvivorLosses | None = None
    collective_hold: CollectiveHold | None = None
    text: str = ""

    def phase_s(self, phase: str | None) -> float | None:
        """Seconds ``phase`` held alone (None: it did not happen, or no phase given)."""
        return self.phases.get(phase) if phase is not None else None
