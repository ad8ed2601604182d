"""``manifest.json``: the run as it happened, written by the parent at the end. Torch-free.

``Manifest`` of ``ftrun train``, ``LaunchManifest`` of ``ftrun launch``; read with ``read_manifest``."""

from __future__ import annotations

from pathlib import Path

import msgspec
from msgspec import UNSET, UnsetType

from ftrun.config.parts import RunConfig, ScheduleConfig
from ftrun.errors import BadInput
from ftrun.layout.codec import FORMAT, FormatStamp, read_record
from ftrun.layout.events import RunEvent
from ftrun.layout.faults import FaultMarker, FaultSpec
from ftrun.layout.meta import Fragment
from ftrun.layout.paths import MANIFEST
from ftrun.layout.spec import Link, Network

# manifest.json: every expected send and sync (~120 bytes each, indented), every parameter of every
# fragment, every run event: a 1M-step run with a sync every step is ~250 MB at most
MANIFEST_LIMIT = 512 << 20


class ScheduleInfo(msgspec.Struct):
    """The manifest's schedule: the config's (``ScheduleConfig``, torchft's names) and the run's steps."""

    fragments: int
    sync_every: int
    fragment_sync_delay: int
    steps: int

    @classmethod
    def of(cls, schedule: ScheduleConfig, steps: int) -> ScheduleInfo:
        return cls(schedule.fragments, schedule.sync_every, schedule.fragment_sync_delay, steps)


class ExpectedEvent(msgspec.Struct):
    """A send or sync the schedule expects, assuming every commit succeeds (``ftrun.schedule.Event``)."""

    step: int
    kind: str
    fragment: int
    cycle: int
    manager_step: int


class TraceRef(msgspec.Struct):
    replica: int
    rank: int
    path: str  # relative to the run dir
    window: list[int] | None
    rank_source: str | UnsetType = UNSET  # ftrun launch: how the rank was told (``ftrun.trace.harvest``)


class EventLogRef(msgspec.Struct):
    replica: int
    rank: int
    path: str  # relative to the run dir


class DeviceRef(msgspec.Struct):
    replica: int
    rank: int
    device: str | None


class FaultsInfo(msgspec.Struct):
    planned: list[FaultSpec]
    fired: list[FaultMarker]
    max_restarts: int


class DetectionBound(msgspec.Struct):
    """What bounds how long the survivors take to notice a lost group (manifest ``detection``):
    the lighthouse drops a group whose heartbeats stop after ``heartbeat_timeout_ms`` (a killed
    group), and issues a quorum without a group that heartbeats but does not ask after
    ``join_timeout_ms`` (a stalled group: torchft's heartbeats run on their own thread);
    ``quorum_tick_ms``: how often it decides. None: not known here (``--lighthouse URL``: a
    lighthouse ftrun did not start)."""

    heartbeat_timeout_ms: int | None = None
    join_timeout_ms: int | None = None
    quorum_tick_ms: int | None = None
    lighthouse: str = "ftrun"  # "ftrun": started by this run; "external": --lighthouse URL


class Manifest(msgspec.Struct, kw_only=True):
    """``manifest.json`` of ``ftrun train``: the run as it happened, written by the parent at the
    end."""

    ftrun_version: str
    job_id: str
    run_name: str
    config: RunConfig  # the run's config tree, as spec.json has it
    versions: dict[str, str | None]
    backend: str
    replicas: int
    nproc_per_replica: int = 1
    schedule: ScheduleInfo
    fragments: list[Fragment] = []
    expected: list[ExpectedEvent] = []
    profile_windows: list[list[int]] = []
    traces: list[TraceRef]
    recovery_traces: list[TraceRef] = []  # relaunched groups' profiles (traces/recovery/)
    event_logs: list[EventLogRef] = []
    link: Link | None = None
    devices: list[DeviceRef] = []
    faults: FaultsInfo = msgspec.field(default_factory=lambda: FaultsInfo([], [], 0))
    run_events: list[RunEvent] = []
    wall_s: float | None = None
    format: int = FORMAT
    network: Network | None = None
    detection: DetectionBound | None = None  # what bounded detection (None: not known)


class LaunchSchedule(msgspec.Struct):
    """The schedule an ``ftrun launch`` script runs, as given (None: not given; ``steps`` is never known)."""

    fragments: int | None = None
    sync_every: int | None = None
    fragment_sync_delay: int | None = None
    steps: int | None = None


class LaunchGroup(msgspec.Struct):
    replica: int
    cwd: str  # relative to the run dir
    log: str  # relative to the run dir
    state: str | None
    exit_codes: list[int]
    restarts: int


class UncheckedTrace(msgspec.Struct):
    replica: int
    path: str  # relative to the run dir
    why: str


class FiredKill(msgspec.Struct, kw_only=True):
    """A ``--kill`` of ``ftrun launch`` that fired (``ftrun.launch.watch``): the flag's fields
    (``ftrun.fault_flags.LaunchKill``), ``at_s`` after the launch started, what triggered it, and
    the group's incarnation it killed."""

    replica: int
    signal: str
    seconds: float | None = None
    pattern: str | None = None
    at_s: float
    trigger: str
    incarnation: int


class LaunchFaults(msgspec.Struct):
    """``--kill`` flags as given, and the ones that fired."""

    requested: list[str] = []
    fired: list[FiredKill] = []


class LaunchManifest(msgspec.Struct, kw_only=True):
    """``manifest.json`` of ``ftrun launch`` (``kind`` "launch"): what ran and what it wrote."""

    ftrun_version: str
    kind: str = "launch"
    job_id: str
    run_name: str
    script: str
    args: list[str]
    python: str
    versions: dict[str, str | None] = {}  # ``ftrun.torchft_compat.versions``
    env_added: dict[str, str]
    schedule: LaunchSchedule
    step_numbering: str = "top"
    replicas: int
    nproc_per_replica: int
    lighthouse: str
    min_replicas: int
    restarts: int
    timeout_s: float | None  # None: no --timeout
    seconds: float
    groups: list[LaunchGroup]
    launch_faults: LaunchFaults
    traces: list[TraceRef]
    event_logs: list[EventLogRef] = []
    traces_not_checked: list[UncheckedTrace] | UnsetType = UNSET
    format: int = FORMAT

    @property
    def fragments(self) -> list[Fragment]:
        """A launched script's fragments are not known to ftrun."""
        return []


AnyManifest = Manifest | LaunchManifest


class ManifestStamp(msgspec.Struct):
    """What every manifest ftrun wrote has, of any format or kind (``ftrun.output``: is a dir ftrun's?)."""

    ftrun_version: str
    job_id: str


def read_manifest(run_dir: Path) -> AnyManifest:
    """A run dir's manifest.json: a ``Manifest`` (``ftrun train``) or a ``LaunchManifest``
    (``kind`` "launch"), one typed decode; ``BadInput`` (one line) if unreadable, over
    ``MANIFEST_LIMIT`` bytes, of another format (``refuse_format``), or not one."""
    return read_record(Path(run_dir) / MANIFEST, MANIFEST_LIMIT, "manifest", _manifest_type)


def _manifest_type(stamp: FormatStamp) -> type[AnyManifest]:
    return LaunchManifest if stamp.kind == "launch" else Manifest


def read_train_manifest(run_dir: Path) -> Manifest:
    """``read_manifest`` of a run dir that ``ftrun train`` wrote (``BadInput`` for an ``ftrun launch`` one)."""
    m = read_manifest(run_dir)
    if not isinstance(m, Manifest):
        raise BadInput(
            f"{Path(run_dir) / MANIFEST}: an ftrun launch run dir; this reads ftrun train run dirs "
            "(fragments, step logs, link)"
        )
    return m
