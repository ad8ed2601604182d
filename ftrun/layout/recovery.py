"""The recovery breakdown's record: ``RecoveryRecord``, one per fault that stopped a group, as
summary.json's ``recovery`` and inspect-trace's ``--json`` hold it (``ftrun.check.recovery``
builds it; the recovery views, the timeline's and Perfetto's recovery lanes, compare's, sweep's
and plan's figures read it). Torch-free.

Times are seconds, rounded to the millisecond; ``spans`` are seconds after the fault
(``fault_at``, unix time). A phase that did not happen is None in ``phases`` and ``spans``, its
reason in ``reasons``; ``sources`` says which record timed each phase ("trace" | "event log")."""

from __future__ import annotations

from typing import ClassVar

import msgspec

from ftrun.layout.codec import ReadAsDict
from ftrun.layout.manifest import DetectionBound


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
    ``survivors``: ``SurvivorLosses`` (None: no surviving group's log here); ``text``: the
    paragraph that says it. Field order is the JSON's."""

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
    text: str = ""

    def phase_s(self, phase: str | None) -> float | None:
        """Seconds ``phase`` held alone (None: it did not happen, or no phase given)."""
        return self.phases.get(phase) if phase is not None else None
