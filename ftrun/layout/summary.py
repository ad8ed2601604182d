"""``summary.json``: what a run found (also what --json prints). Torch-free.

``TrainSummary`` of ``ftrun train``, ``LaunchSummary`` of ``ftrun launch``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, Literal

import msgspec

from ftrun.chaos_summary import ChaosSummary
from ftrun.errors import BadInput
from ftrun.layout.codec import FORMAT, FormatStamp, JsonObject, ReadAsDict as ReadAsDict, read_record
from ftrun.layout.manifest import DeviceRef, FiredKill, ScheduleInfo
from ftrun.layout.numerics_check import NumericsCheck
from ftrun.layout.paths import SUMMARY
from ftrun.layout.recovery import FaultHistory, RecoveryRecord
from ftrun.layout.spec import Link

# summary.json: a train summary is kilobytes; a launch summary holds its traces' whole report
# (``inspection``: a row per send and per sync), tens of MB for a long run
SUMMARY_LIMIT = 256 << 20


class ReplicaSummary(msgspec.Struct, kw_only=True):
    """One replica group in ``TrainSummary.replicas`` (``lost``: the fault that killed it for good)."""

    replica: int
    steps: int
    last_step: int | None = None  # None: a summary of an ftrun before the field
    steps_per_s: float | None
    commits: int
    failed_commits: int
    final_loss: float | None
    final_manager_step: int | None
    lost: str | None = None


class SyncedFingerprint(msgspec.Struct):
    """One replica's synced parameters after a commit: their fingerprint and the fragment synced."""

    fingerprint: str
    fragment: int | None


class Disagreement(ReadAsDict, msgspec.Struct):
    """A commit after which the replicas' synced parameters differ (``ftrun.check.agreement``):
    where (rank, manager step, quorum id), then each replica's ("0", "1", ...) fingerprint."""

    _READ_AS: ClassVar[tuple[str, str]] = ("Run.summary.agreement.disagreements[i]", "disagreement")  # (was a dict)
    rank: int
    manager_step: int
    quorum_id: int | None
    replicas: dict[str, SyncedFingerprint]


class AgreementSummary(msgspec.Struct):
    """``ftrun.check.agreement`` of what this run dir saw (one group here: nothing to compare)."""

    ok: bool
    commits_checked: int
    disagreements: list[Disagreement]
    groups_here: int | None = None  # None (both): a summary of an ftrun before the fields
    groups_in_job: int | None = None


class RunCheck(msgspec.Struct, kw_only=True):
    """The check ``train`` and ``launch`` run on what they captured (``ftrun.commands.run_check``;
    the analysis of ``inspect-trace``). ``verdict``: "pass", "fail" or "not checked" (``why``:
    --no-check, no traces captured, ...; never a pass); ``why`` on a "fail": no traces, the
    schedule not checked, but the event logs show failed commits no fault explains; ``line``: the
    verdict line inspect-trace prints for the same run dir (None: not checked); ``problems``: the
    first few problems."""

    verdict: Literal["pass", "fail", "not checked"]
    line: str | None = None
    why: str | None = None
    problems: list[str] = []


class TrainSummary(ReadAsDict, msgspec.Struct, kw_only=True):
    """``summary.json`` of ``ftrun train`` (also what ``--json`` prints; read: ``read_train_summary``).
    ``numerics``: the ``ftrun.check.numerics`` figures; ``faults``: what happened
    (``ftrun.launch.results.fault_history``); ``recovery``: where each fault's recovery time went
    (``ftrun.check.recovery``); ``check``: the check of the captured traces (``RunCheck``; ``ok``
    is false when it FAILed)."""

    run_dir: str
    ok: bool
    wall_s: float
    mode: str
    schedule: ScheduleInfo
    backend: str
    link: Link | None
    devices: list[DeviceRef] = []
    replicas: list[ReplicaSummary]
    agreement: AgreementSummary
    numerics: NumericsCheck | None = None
    failures: list[str]
    traces: list[str]
    traces_note: str | None = None
    manifest: str
    versions: dict[str, str | None] = {}
    faults: FaultHistory = msgspec.field(default_factory=FaultHistory)  # what happened (``FaultHistory``)
    recovery: list[RecoveryRecord] = []  # where each fault's recovery time went (``ftrun.check.recovery``)
    check: RunCheck | None = None  # the check of the captured traces (None: not run yet)
    chaos: ChaosSummary | None = None  # a --chaos run's faults, recoveries and goodput (``ftrun.chaos_summary``)
    format: int = FORMAT


class LaunchGroupRow(msgspec.Struct, kw_only=True):
    """One group in ``LaunchSummary.groups`` (and the live view): a group that exited non-zero
    shows its error (``ftrun.launch.diagnose.describe``) as ``last_line``; ``quorums``: the quorums
    it joined (None: a summary of an ftrun before the column)."""

    replica: int
    state: str
    exit_codes: list[int]
    restarts: int
    quorums: int | None = None
    last_line: str


class LaunchTrace(msgspec.Struct):
    """A trace ``ftrun launch`` found; ``checked``: whether its report covers it (a summary of an
    ftrun before the field reads it as the rule of then: checked when its rank is known)."""

    replica: int
    rank: int | None
    path: str
    rank_source: str
    checked: bool


class LaunchSummary(msgspec.Struct, kw_only=True):
    """``summary.json`` of ``ftrun launch`` (also what ``--json`` prints; read: ``read_launch_summary``).
    ``inspection``: the report of the traces (``ftrun.check``'s ``Report.to_json``; None: not inspected)."""

    run_dir: str
    script: str
    seconds: float
    groups: list[LaunchGroupRow]
    quorums_seen: int | None
    faults_fired: list[FiredKill]
    traces: list[LaunchTrace]
    trace_note: str | None
    failures: list[str]
    inspection: JsonObject | None = None  # (the check's record, as builtins: codec.JsonObject)
    check: RunCheck | None = None  # its verdict, as ``TrainSummary.check`` (None: not checked)
    ok: bool
    format: int = FORMAT


def _train_only(path: Path) -> Callable[[FormatStamp], type[TrainSummary]]:
    def pick(stamp: FormatStamp) -> type[TrainSummary]:
        if stamp.script is not None and stamp.mode is None:
            raise BadInput(f"{path}: an ftrun launch summary; this reads the summaries of ftrun train run dirs")
        return TrainSummary

    return pick


def _launch_only(path: Path) -> Callable[[FormatStamp], type[LaunchSummary]]:
    def pick(stamp: FormatStamp) -> type[LaunchSummary]:
        if stamp.mode is not None and stamp.script is None:
            raise BadInput(f"{path}: an ftrun train summary; this reads the summaries of ftrun launch run dirs")
        return LaunchSummary

    return pick


def read_train_summary(run_dir: Path) -> TrainSummary:
    """A run dir's summary.json of ``ftrun train``, one typed decode; ``BadInput`` (one line naming
    the file) if it is missing, unreadable, over ``SUMMARY_LIMIT`` bytes, of another format
    (``refuse_format``), or not one (an ``ftrun launch`` summary too)."""
    path = Path(run_dir) / SUMMARY
    return read_record(path, SUMMARY_LIMIT, "summary", _train_only(path), "train summary")


def read_launch_summary(run_dir: Path) -> LaunchSummary:
    """A run dir's summary.json of ``ftrun launch``, one typed decode; ``BadInput`` (one line naming
    the file) if it is missing, unreadable, over ``SUMMARY_LIMIT`` bytes, of another format
    (``refuse_format``), or not one (an ``ftrun train`` summary too)."""
    path = Path(run_dir) / SUMMARY
    return read_record(path, SUMMARY_LIMIT, "summary", _launch_only(path), "launch summary")
