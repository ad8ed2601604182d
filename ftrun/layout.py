"""The run-dir contract: where a run's files live and what is in them, as typed Structs. Torch-free.

A run dir ``<out>/<run-name>/`` holds::

    .ftrun-run                         RUN_MARKER: ``RunMarker``, ftrun made this dir (pid, start; ``ftrun.output``)
    spec.json                          SPEC: ``Spec``, what every rank runs (written before launch)
    manifest.json                      MANIFEST: ``Manifest``, written by the parent at the end
                                       (``ftrun launch``: ``LaunchManifest``); read with ``read_manifest``
    summary.json                       SUMMARY: ``TrainSummary`` / ``LaunchSummary`` (also printed by --json)
    traces/replica{r}_rank{g}.{A}.pt.trace.json.gz
                                       torch-profiler chrome traces; A = first profiled step.
                                       torch-tb-profiler reads <worker>.<span>.pt.trace.json[.gz]
    events/replica{r}_rank{g}.jsonl    one ``EventRecord`` per line, one per training step (read: ``ftrun.event_log``)
    events/run.jsonl                   one ``RunEvent`` per line: group exits, restarts, watchdog, signals
    events/lifecycle/replica{r}_rank{g}.jsonl
                                       one ``LifecycleEvent`` per line: every incarnation's start and
                                       manager up, each process-group configure and checkpoint send/recv
    faults/<key>.json                  one ``FaultMarker`` per injected fault that fired
    meta/replica{r}_rank{g}.json       ``RankMeta``: what each rank measured about itself (fragments, files, status)
    progress/replica{r}.txt            "STEP PHASE" of rank 0 of group r, right now (``worker.whereabouts``)
    ready/<worker>                     the ranks' start line (``worker.setup.start_line``)
    logs/replica{r}.log                stdout+stderr of the group's elastic launcher
    logs/lighthouse.log                the lighthouse's output
    logs/ftrun.log                     ftrun's own log (``logging``): the launcher's and every rank's lines
    tb/replica{r}/                     TensorBoard scalars (loss, participants, manager step, step time)
    groups/replica{r}/                 ftrun launch: the group's working directory (its script's files)
    traces/replica{r}/                 ftrun launch: the group's FTRUN_TRACE_DIR
    traces/recovery/replica{r}_rank{g}.restart{n}.pt.trace.json.gz
                                       a relaunched group's profile, start through its first commit

Every file ftrun writes there is one of these Structs, written by ``to_json`` (the one encoder)
and read back by the same type. ``FORMAT`` is written into spec.json and manifest.json. A
manifest without it was written by an ftrun of this format before the field existed and reads
as ``FORMAT``; any other value is
refused by ``check_format`` (one line, exit 2). Raise ``FORMAT`` when a field changes meaning or
goes away; adding an optional field does not need it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from ftrun.config.parts import RunConfig, ScheduleConfig
from ftrun.errors import BadInput
from ftrun.fault_flags import fault_key  # a fault's name: its marker file faults/<key>.json
from ftrun.small_files import read_json

FORMAT = 1

RUN_MARKER = ".ftrun-run"
OUT_MARKER = ".ftrun-out"  # ftrun made this output dir (compare, sweep; ``ftrun.output``)
TMP_PREFIX = ".ftrun-tmp-"  # a file being written (``ftrun.output``): never read as a result
SPEC = "spec.json"
MANIFEST = "manifest.json"
SUMMARY = "summary.json"
TRACES = "traces"
EVENT_LOGS = "events"
RUN_EVENT_LOG = "run.jsonl"
LIFECYCLE = "lifecycle"  # events/lifecycle/: ``LifecycleEvent`` logs
RECOVERY_TRACES = "recovery"  # traces/recovery/: relaunched groups' profiles (``--profile-recovery``)
FAULTS = "faults"
META = "meta"
PROGRESS = "progress"
READY = "ready"
LOGS = "logs"
TB = "tb"
GROUPS = "groups"  # ftrun launch: each group's working directory, groups/replica{r}/
# Everything ftrun itself writes at a run dir's top level (``ftrun.output`` replaces only these).
OWN_ENTRIES = (RUN_MARKER, MANIFEST, SUMMARY, SPEC, TRACES, EVENT_LOGS, META, LOGS, TB, FAULTS, PROGRESS, READY, GROUPS)

# Environment of a rank (set by the parent, ``ftrun.launch.groups`` / ``supervise``).
ENV_REPLICA = "REPLICA_GROUP_ID"  # torchft's name for the replica group
ENV_RESTART = "FTRUN_RESTART"  # how many times this group has been relaunched

WORKER_RE = re.compile(r"replica(\d+)_rank(\d+)")


# --- the files' records -------------------------------------------------------------------


def fault_label(action: str, replica: int, step: int) -> str:
    """A fault as reports show it: ``kill 1@25`` (the ``--kill``/``--hang`` flags' R@S form)."""
    return f"{action} {replica}@{step}"


class Link(msgspec.Struct):
    """An emulated link (``--link``)."""

    bandwidth_bps: float
    latency_s: float
    emulated: bool = True
    describe: str = ""


class FaultSpec(msgspec.Struct):
    """A planned fault (``ftrun.fault_flags.Fault``): ``action`` kill | sigterm | hang | fail-commit |
    corrupt (``--corrupt-allreduce``; ``kind`` says how, ``ftrun.fault_flags.CORRUPT_KINDS``)."""

    replica: int
    step: int
    action: str
    seconds: float = 0.0
    kind: str = ""

    @property
    def key(self) -> str:
        return fault_key(self.action, self.replica, self.step)


class FaultMarker(FaultSpec):
    """``faults/<key>.json``: a fault that fired, written by the rank that fired it, before it fired
    (``fired_step``: the step it fired in; for ``fail-commit`` the sync whose vote it turned)."""

    fired_at: float = 0.0
    fired_step: int = 0
    pid: int = 0


class Network(msgspec.Struct, kw_only=True):
    """How the other hosts of a job reach this host's replica group (``ftrun.launch.network``).
    ``scope``: "loopback" (every group on this host) or "hosts"; ``address``: the group's store
    (torchrun ``--master-addr``) and process-group address; ``interface``: the one holding it;
    ``advertise_host``: what torchft's manager and checkpoint server hand to the other groups;
    ``found``: how the address was chosen; ``env``: ``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME``
    as the groups get them, ``env_from_user`` the ones the user had set (kept as they were)."""

    scope: str
    address: str
    interface: str | None
    advertise_host: str
    found: str
    env: dict[str, str] = {}
    env_from_user: list[str] = []
    store_port: int | None = None  # torchrun --master-port (None: --standalone picks one)


class Spec(msgspec.Struct):
    """``spec.json``: what every rank of the run runs. ``config``: the run's ``RunConfig`` tree
    (``ftrun.config``), decoded with its type (written and read by the same ftrun)."""

    config: RunConfig
    run_dir: str
    job_id: str
    profile_window: list[int] | None
    threads: int
    link: Link | None
    faults: list[FaultSpec]
    quorum_timeout_s: float
    start_barrier: int | None  # ranks writing to this run dir (None: groups on several hosts)
    hostname: str
    format: int = FORMAT
    network: Network | None = None  # None: a spec of an earlier ftrun (loopback)


class Quorum(msgspec.Struct):
    """A quorum torchft computed for this rank (``ftrun.worker.quorum_probe``)."""

    quorum_id: int
    participants: list[int | None]
    replica_rank: int
    max_step: int
    heal: bool
    heal_source: int | None
    t: float


class Healed(msgspec.Struct):
    source_replica: int | None
    peer_step: int
    manager_step: int


class Rejoined(msgspec.Struct):
    local_step: int
    aligned_step: int | None


# What a ``Sketch`` is (``ftrun.worker.sketch`` computes it, ``ftrun.check.numerics`` budgets its
# error): SKETCH_K projections P[j, i] = W[j, i mod SKETCH_PERIOD], W = ±1 drawn from SKETCH_SEED;
# each tensor first summed in float32 over rows of SKETCH_STAGE columns, then in float64.
SKETCH_K = 4
SKETCH_PERIOD = 4093
SKETCH_STAGE = SKETCH_PERIOD * 32
SKETCH_SEED = 22


class Sketch(msgspec.Struct):
    """Linear sketch of one flattened fragment (``ftrun.worker.sketch``): ``proj`` = SKETCH_K fixed
    random projections in float64 (the same on every replica), ``norm`` = its L2 norm (None: not
    measured — the SUM's and the average's, to save a pass), ``numel`` elements, ``dtype`` of
    the tensors sketched."""

    # exactly SKETCH_K: a hand-edited line with another count is not a record (event_log says where)
    proj: Annotated[list[float], msgspec.Meta(min_length=SKETCH_K, max_length=SKETCH_K)]
    norm: float | None
    numel: int
    dtype: str
    stage_rows: int | None = None  # most float32 first-stage rows one column summed (0: none ran)


class OuterStep(msgspec.Struct):
    """The outer optimizer's step and torchft's merge at one committed sync
    (``ftrun.worker.sketch_outer``; checked by ``ftrun.check.numerics_outer``).

    ``optimizer``: its class name; ``lr`` .. ``maximize``: its first param group's hyper-parameters as
    read right before the step; ``first_momentum``: no momentum buffer before it (torch's SGD then sets
    buffer = gradient); ``momentum_after``: the momentum buffers after it (sketched only where the
    check cannot derive them from the averages: the first step with loaded buffers, or after a
    heal). The parameters after the step are not here: the check reads them as the next round's
    ``original`` of the same replica, where ``save_parameters`` stores them.
    ``alpha``: torchft's ``fragment_update_alpha`` (None: a torchft without it);
    ``local_sync``/``merged``: the parameters at the sync before torchft restored the globals, and
    after its merge (sketched only when alpha > 0: with 0 the merge leaves the globals)."""

    optimizer: str
    lr: float
    momentum: float = 0.0
    dampening: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0
    maximize: bool = False
    first_momentum: bool = False
    momentum_after: Sketch | None = None
    alpha: float | None = None
    local_sync: Sketch | None = None
    merged: Sketch | None = None


class RoundNumerics(msgspec.Struct):
    """What one rank's torchft did to one fragment in one round (send .. sync), as sketches.

    Written in two parts: at the send (``phase`` "send": ``contribution`` as the process group
    saw it, zeros when not participating; the quorum) and at the sync (``phase`` "sync": the
    process group's ``sum`` and the ``average`` the outer optimizer stepped on; absent when the
    commit failed or the collective never completed). The send also carries ``original`` and
    ``local`` (the fragment's saved globals and current parameters), the sync ``outer``
    (``OuterStep``: the outer step and the merge, a committed sync only).
    A round is named by (fragment, ``quorum_id``, ``manager_step`` at the send); ``sync_step``
    is the training step of its sync. ``path``: per-param | bucketized | quantized (the path
    torchft took, as the hooks saw it: a ``--quantize`` round torchft ran through the plain allreduce
    is per-param or bucketized); ``collectives``: collectives sketched; ``world``: the process
    group's size; ``unsketched``: why this round's collectives could not be sketched (the
    quantized path on a torchft whose ``allreduce_quantized`` ftrun cannot wrap).
    """

    phase: str
    fragment: int
    manager_step: int
    quorum_id: int | None
    sync_step: int | None = None
    participants: int | None = None
    participating: bool | None = None
    world: int | None = None
    path: str = "per-param"
    collectives: int = 0
    unsketched: str | None = None
    contribution: Sketch | None = None
    sum: Sketch | None = None
    average: Sketch | None = None
    # the send's torchft ``original_parameters`` and current parameters of the fragment: the
    # contribution must be their difference, ``original`` the last commit's globals (``OuterStep``)
    original: Sketch | None = None
    local: Sketch | None = None
    outer: OuterStep | None = None  # the sync's outer step and merge (``ftrun.worker.sketch_outer``)


class HealNumerics(msgspec.Struct):
    """Every fragment's global parameters right after this rank healed (torchft's checkpoint
    transport) at ``manager_step``, as ``fingerprints`` (``EventRecord.fingerprint``'s hash, one
    per fragment): the source's after its last commit of each must be the same, bit for bit
    (``ftrun.check.numerics``)."""

    manager_step: int
    fingerprints: list[str] = []  # (an event log of an ftrun that sketched them instead: not checked)


class EventRecord(msgspec.Struct):
    """One line of ``events/replica{r}_rank{g}.jsonl``: what one rank did in one training step.

    ``step`` is None while a restarted group has not rejoined yet. ``manager_step``: at the
    step's start; ``sent``/``synced``: the fragment sent / synced in this step; ``commit``: the
    sync's commit result; ``fingerprint``: hex hash of the synced fragment's parameters after a
    commit; ``t``: unix time at step end. Timings (seconds, present when measured this step):
    ``send_s``, ``sync_s``, ``exposed_s`` (data plane), ``quorum_s``, ``commit_s`` (control plane),
    ``real_s`` (at a sync on an emulated link: its send's start to the backend's own completion of
    the send's last collective, before the hold) — see ``ftrun.worker.recorder``.
    ``quorums``/``healed``/``rejoined``: membership changes. ``loss``: None where ftrun does not see
    the loss (``ftrun launch``'s hook in a user's script: ``ftrun.launch.autohook.attach``).
    ``numerics``: the step's sketches (``RoundNumerics``: a send and/or a sync), ``heal_numerics``
    after a heal (absent with ``--no-sketches``).
    """

    step: int | None
    manager_step: int
    manager_step_after: int
    participants: int | None
    quorum_id: int | None
    loss: float | None
    step_time_s: float
    restart: int
    sent: int | None
    synced: int | None
    commit: bool | None
    fingerprint: str | None
    t: float
    quorums: list[Quorum] | UnsetType = UNSET
    healed: Healed | UnsetType = UNSET
    rejoined: Rejoined | UnsetType = UNSET
    send_s: float | UnsetType = UNSET
    sync_s: float | UnsetType = UNSET
    exposed_s: float | UnsetType = UNSET
    quorum_s: float | UnsetType = UNSET
    commit_s: float | UnsetType = UNSET
    real_s: float | UnsetType = UNSET
    numerics: list[RoundNumerics] | UnsetType = UNSET
    heal_numerics: HealNumerics | UnsetType = UNSET


class RunEvent(msgspec.Struct):
    """One line of ``events/run.jsonl`` (the parent's log). ``event``: group_done, group_exit,
    restart, group_lost, stall, stopped; the other fields as the event has them."""

    event: str
    t: float
    replica: int | UnsetType = UNSET
    step: int | UnsetType = UNSET
    code: int | UnsetType = UNSET
    restarts: int | UnsetType = UNSET
    incarnation: int | UnsetType = UNSET
    after_step: int | UnsetType = UNSET
    fault: str | None | UnsetType = UNSET
    seconds: float | UnsetType = UNSET
    signal: str | UnsetType = UNSET


class LifecycleEvent(msgspec.Struct, omit_defaults=True):
    """One line of ``events/lifecycle/replica{r}_rank{g}.jsonl`` (``ftrun.worker.lifecycle``):
    what a rank's incarnation went through outside its steps, each with its own clock readings.

    ``event``: ``start`` (the rank's Python entered ftrun's worker), ``manager_up`` (torchft's
    Manager constructed: its server heartbeats the lighthouse), ``configure`` (torchft's
    process-group ``configure`` for quorum ``quorum_id``), ``send_checkpoint`` (this rank staged
    its state for healing peers ``peers``; torchft's HTTP transport serves it afterwards),
    ``recv_checkpoint`` (this rank fetched a peer's state, ``peers`` = [source replica rank]),
    ``gave_up_waiting`` (past ``--steps``, this rank stopped after training step ``step`` at
    ``--quorum-timeout`` without relaunched groups ``peers`` back: ``ftrun.worker.stop``).
    ``t_start``/``t``: unix times at start / end (equal for instants); ``bytes``: tensor bytes of
    the state dict sent or received; ``step``: the manager step torchft healed to;
    ``hold_s``: the emulated link's hold of the transfer (``--link``), inside ``t_start..t``.
    """

    event: str
    incarnation: int
    t_start: float
    t: float
    quorum_id: int | None = None
    bytes: int | None = None
    step: int | None = None
    peers: list[int] | None = None
    hold_s: float | None = None


class Param(msgspec.Struct):
    name: str
    numel: int
    shape: list[int]


class Fragment(msgspec.Struct):
    """One model fragment as the ranks built it (``ftrun.worker.fragments.Fragment.record``)."""

    id: int
    params: list[Param]
    numel: int
    bytes: int


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
    end. (The fields with defaults may be missing from a manifest of an earlier ftrun.)"""

    ftrun_version: str
    job_id: str
    run_name: str
    config: dict[str, Any]
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
    detection: DetectionBound | None = None  # what bounded detection (None: a manifest of an earlier ftrun)


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
    """``manifest.json`` of ``ftrun launch`` (``kind`` "launch"): what ran and what it wrote.
    (``format`` is absent from a manifest of an earlier ftrun: read as ``FORMAT``.)"""

    ftrun_version: str
    kind: str = "launch"
    job_id: str
    run_name: str
    script: str
    args: list[str]
    python: str
    versions: dict[str, str | None] = {}  # ``ftrun.torchft_compat.versions`` (empty: an earlier ftrun)
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
    format: int | UnsetType = UNSET  # written: FORMAT

    @property
    def fragments(self) -> list[Fragment]:
        """A launched script's fragments are not known to ftrun."""
        return []


AnyManifest = Manifest | LaunchManifest


class RunMarker(msgspec.Struct):
    """``.ftrun-run``: ftrun made this run dir, the process that made it (``ftrun.output``); the
    same record marks an output dir of compare or sweep (``.ftrun-out``)."""

    pid: int
    started: float  # unix time


class RankMeta(msgspec.Struct, kw_only=True):
    """``meta/replica{r}_rank{g}.json`` (``ftrun.worker.meta``): what a rank knows about itself.
    ``status``: running | done | failed; on failure ``error`` (its first line, which the parent
    shows), ``error_type`` and ``phase`` (the torchft wait it left: quorum, sync, or step)."""

    replica: int
    rank: int
    pid: int = 0
    status: str = "running"
    group_size: int | None = None
    restart: int = 0
    backend: str | None = None
    device: str | None = None
    fragments: list[Fragment] = []
    versions: dict[str, str | None] = {}
    traces: list[str] = []
    profile_window: list[int] | None = None
    commits: int | None = None
    failed_commits: int | None = None
    final_manager_step: int | None = None
    error: str | None = None
    error_type: str | None = None
    phase: str | None = None


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


class AgreementSummary(msgspec.Struct):
    """``ftrun.check.agreement`` of what this run dir saw (one group here: nothing to compare)."""

    ok: bool
    commits_checked: int
    disagreements: list[dict[str, Any]]
    groups_here: int | None = None  # None (both): a summary of an ftrun before the fields
    groups_in_job: int | None = None


class _ReadAsDict:
    """``summary["key"]``, ``summary.get("key")``: how ``ftrun.api.Run.summary`` read when it was
    the file's dict. Deprecated (``DeprecationWarning``; README, "What is stable"): the field,
    as the JSON has it."""

    __slots__ = ()
    __struct_fields__: tuple[str, ...]

    def __getitem__(self, key: str) -> Any:
        _warn_dict_access(type(self).__name__, f"[{key!r}]")
        if key not in self.__struct_fields__:
            raise KeyError(key)
        return msgspec.to_builtins(getattr(self, key))

    def get(self, key: str, default: Any = None) -> Any:
        _warn_dict_access(type(self).__name__, f".get({key!r})")
        return msgspec.to_builtins(getattr(self, key)) if key in self.__struct_fields__ else default

    def __contains__(self, key: object) -> bool:
        _warn_dict_access(type(self).__name__, f" ({key!r} in summary)")
        return key in self.__struct_fields__


def _warn_dict_access(kind: str, how: str) -> None:
    import warnings

    warnings.warn(
        f"Run.summary is a {kind} (ftrun.layout), no longer a dict: read summary.FIELD, not summary{how}",
        DeprecationWarning,
        stacklevel=3,
    )


class RunCheck(msgspec.Struct, kw_only=True):
    """The check ``train`` and ``launch`` run on what they captured (``ftrun.commands.run_check``;
    the analysis of ``inspect-trace``). ``verdict``: "pass", "fail" or "not checked" (``why``:
    --no-check, no traces captured, ...; never a pass); ``line``: the verdict line inspect-trace
    prints for the same run dir (None: not checked); ``problems``: the first few problems."""

    verdict: Literal["pass", "fail", "not checked"]
    line: str | None = None
    why: str | None = None
    problems: list[str] = []


class TrainSummary(_ReadAsDict, msgspec.Struct, kw_only=True):
    """``summary.json`` of ``ftrun train`` (also what ``--json`` prints; read: ``read_train_summary``).
    ``numerics``: the ``ftrun.check.numerics`` figures; ``faults``: what happened
    (``ftrun.launch.results.recovery``); ``recovery``: where each fault's recovery time went
    (``ftrun.check.recovery``); ``check``: the check of the captured traces (``RunCheck``; ``ok``
    is false when it FAILed). The fields with defaults may be missing from a summary of an
    earlier ftrun."""

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
    numerics: dict[str, Any] | None = None
    failures: list[str]
    traces: list[str]
    traces_note: str | None = None
    manifest: str
    versions: dict[str, str | None] = {}
    faults: dict[str, Any] = {}  # what happened: faults, restarts, heals, quorum changes, commits lost
    recovery: list[dict[str, Any]] = []  # where each fault's recovery time went (``Recovery.to_json``)
    check: RunCheck | None = None  # the check of the captured traces (None: a summary of an ftrun before it)


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
    inspection: dict[str, Any] | None = None
    check: RunCheck | None = None  # its verdict, as ``TrainSummary.check`` (None: an ftrun before the field)
    ok: bool


SWEEP_CELL = "sweep-cell.json"  # ftrun sweep: a finished cell's result, in the cell's run dir
SWEEP_VERDICTS = ("pass", "fail", "failed-commits", "crashed")


class SweepCell(msgspec.Struct, kw_only=True):
    """``CELL/sweep-cell.json``: what ``ftrun sweep`` found for one cell (``--resume`` reads it,
    then re-checks the cell from its run dir). Metrics as ``ftrun.sweep.evaluate.evaluate``."""

    name: str = ""
    params: dict[str, Any] = {}
    run_dir: str | None = None
    verdict: Literal["pass", "fail", "failed-commits", "crashed"]
    problem: str | None = None
    config: dict[str, Any] = {}
    wall_s: float | None = None
    failed_commits: int | None = None
    failed_commits_explained: int | None = None
    commits: float | None = None
    steps_per_s: float | None = None
    exposed_comm_per_sync_ms: float | None = None
    exposed_control_per_sync_ms: float | None = None
    hidden_share: float | None = None
    final_loss: float | None = None
    numerics: dict[str, Any] | None = None  # ``ftrun.check.metrics.numerics_brief`` (None: an earlier ftrun's file)
    notes: list[str] = []


SWEEP_CELL_LIMIT = 16 << 20  # bytes of a sweep-cell.json read at most (one is a few KB: metrics and the config)


def read_sweep_cell(path: Path) -> SweepCell:
    """``BadInput`` (one line naming the file and the field) unless it is a sweep cell result
    (of at most ``SWEEP_CELL_LIMIT`` bytes)."""
    return read_json(Path(path), SWEEP_CELL_LIMIT, "sweep cell result", SweepCell)  # (bounded in depth too)


class ManifestStamp(msgspec.Struct):
    """What every manifest ftrun wrote has, of any format or kind (``ftrun.output``: is a dir ftrun's?)."""

    ftrun_version: str
    job_id: str


# --- reading and writing ------------------------------------------------------------------

_ENCODER = msgspec.json.Encoder()


def to_json(record: msgspec.Struct, indent: int | None = None) -> str:
    """A record as JSON text: one line (event logs), or indented (``indent``) for the files people read."""
    if indent is None:
        return _ENCODER.encode(record).decode()
    return json.dumps(msgspec.to_builtins(record), indent=indent)


# How many bytes each run-dir record is read at most (``ftrun.small_files.read_file``: a FIFO or a
# device is never opened), each far above what a real run writes, so that only a file that is
# not one (a log renamed, a disk image) is refused, before it is decoded into memory:
RANK_META_LIMIT = 64 << 20  # a few KB; its fragments list every parameter (a 10k-tensor model: ~1 MB)
MARKER_LIMIT = 64 << 10  # .ftrun-run: a pid and a time, ~40 bytes
FAULT_MARKER_LIMIT = 64 << 10  # faults/<key>.json: one fault, ~200 bytes
SPEC_LIMIT = 16 << 20  # the config tree, the faults and the network: a few KB
# manifest.json: every expected send and sync (~120 bytes each, indented), every parameter of every
# fragment, every run event: a 1M-step run with a sync every step is ~250 MB at most
MANIFEST_LIMIT = 512 << 20


def read_rank_meta(path: Path) -> RankMeta | None:
    """A rank's meta file; None when it is missing, half-written, over ``RANK_META_LIMIT`` bytes,
    not a regular file or not one (the parent reads it while the rank may be writing, and a rank
    that died early wrote none)."""
    try:
        return read_json(Path(path), RANK_META_LIMIT, "rank meta", RankMeta)
    except BadInput:
        return None


def read_run_marker(run_dir: Path) -> RunMarker | None:
    """A run dir's ``.ftrun-run`` (None: missing, not a regular file, over ``MARKER_LIMIT`` bytes,
    or not one)."""
    try:
        return read_json(Path(run_dir) / RUN_MARKER, MARKER_LIMIT, "run marker", RunMarker)
    except BadInput:
        return None


def read_spec(path: Path) -> Spec:
    """spec.json -> ``Spec`` (a rank's input; ``BadInput``, one line naming the file, if it is
    unreadable, over ``SPEC_LIMIT`` bytes or not one)."""
    return read_json(Path(path), SPEC_LIMIT, "spec", Spec)


def check_format(manifest: dict[str, Any], path: Path) -> None:
    """``BadInput`` (one line) unless the manifest at ``path`` is of this release's ``FORMAT``
    (a manifest without ``format`` predates the field and is read as ``FORMAT``)."""
    got = manifest.get("format", FORMAT)
    if got != FORMAT:
        raise BadInput(
            f"{path}: run dir format {got!r}, this ftrun reads format {FORMAT} (use the ftrun that wrote it)"
        )


def read_manifest(run_dir: Path) -> AnyManifest:
    """A run dir's manifest.json: a ``Manifest`` (``ftrun train``) or a ``LaunchManifest``
    (``kind`` "launch"); ``BadInput`` (one line) if unreadable, over ``MANIFEST_LIMIT`` bytes,
    of another format, or not one."""
    path = Path(run_dir) / MANIFEST
    m = _json_object(path, MANIFEST_LIMIT, "manifest")
    check_format(m, path)
    try:
        if m.get("kind") == "launch":
            return msgspec.convert(m, LaunchManifest)
        return msgspec.convert(m, Manifest)
    except msgspec.ValidationError as e:
        raise BadInput(f"{path}: not an ftrun manifest ({e})") from None


# summary.json: a train summary is kilobytes; a launch summary holds its traces' whole report
# (``inspection``: a row per send and per sync), tens of MB for a long run
SUMMARY_LIMIT = 256 << 20


def _json_object(path: Path, limit: int, what: str) -> dict[str, Any]:
    """The file as a JSON object, bounded (``limit``); ``BadInput`` naming the file: unreadable
    ``what``, or not an ftrun ``what`` (JSON that is not an object)."""
    raw = read_json(path, limit, what)
    if not isinstance(raw, dict):
        raise BadInput(f"{path}: not an ftrun {what} (a JSON {type(raw).__name__}, not an object)")
    return raw


def _summary_object(path: Path) -> dict[str, Any]:
    """summary.json as a JSON object, bounded (``SUMMARY_LIMIT``)."""
    return _json_object(path, SUMMARY_LIMIT, "summary")


def read_train_summary(run_dir: Path) -> TrainSummary:
    """A run dir's summary.json of ``ftrun train``; ``BadInput`` (one line naming the file) if it is
    missing, unreadable, over ``SUMMARY_LIMIT`` bytes, or not one (an ``ftrun launch`` summary too).
    One of an earlier ftrun reads as well: the fields it lacked take their defaults, and its
    ``recovery`` (the fault story with the breakdowns inside, as ``breakdown``) is split into
    ``faults`` (the story) and ``recovery`` (the breakdowns)."""
    path = Path(run_dir) / SUMMARY
    raw = _summary_object(path)
    if "script" in raw and "mode" not in raw:
        raise BadInput(f"{path}: an ftrun launch summary; this reads the summaries of ftrun train run dirs")
    rec = raw.get("recovery")
    if isinstance(rec, dict):  # the earlier shape
        story = {k: v for k, v in rec.items() if k != "breakdown"}
        raw = {**raw, "faults": story, "recovery": list(rec.get("breakdown") or [])}
    try:
        return msgspec.convert(raw, TrainSummary)
    except msgspec.ValidationError as e:
        raise BadInput(f"{path}: not an ftrun train summary ({e})") from None


def read_launch_summary(run_dir: Path) -> LaunchSummary:
    """A run dir's summary.json of ``ftrun launch``; ``BadInput`` (one line naming the file) if it
    is missing, unreadable, over ``SUMMARY_LIMIT`` bytes, or not one (an ``ftrun train`` summary
    too). One of an earlier ftrun reads as well: a group row without ``quorums`` reads None, a
    trace without ``checked`` reads as checked when its rank was known (what that ftrun checked)."""
    path = Path(run_dir) / SUMMARY
    raw = _summary_object(path)
    if "mode" in raw and "script" not in raw:
        raise BadInput(f"{path}: an ftrun train summary; this reads the summaries of ftrun launch run dirs")
    traces = raw.get("traces")
    if isinstance(traces, list):
        raw = {
            **raw,
            "traces": [
                {**t, "checked": t.get("rank") is not None} if isinstance(t, dict) and "checked" not in t else t
                for t in traces
            ],
        }
    try:
        return msgspec.convert(raw, LaunchSummary)
    except msgspec.ValidationError as e:
        raise BadInput(f"{path}: not an ftrun launch summary ({e})") from None


def read_train_manifest(run_dir: Path) -> Manifest:
    """``read_manifest`` of a run dir that ``ftrun train`` wrote (``BadInput`` for an ``ftrun launch`` one)."""
    m = read_manifest(run_dir)
    if not isinstance(m, Manifest):
        raise BadInput(
            f"{Path(run_dir) / MANIFEST}: an ftrun launch run dir; this reads ftrun train run dirs "
            "(fragments, step logs, link)"
        )
    return m


# --- paths -------------------------------------------------------------------------------


def worker_name(replica: int, rank: int) -> str:
    return f"replica{replica}_rank{rank}"


def trace_name(replica: int, rank: int, first_step: int) -> str:
    return f"{worker_name(replica, rank)}.{first_step}.pt.trace.json.gz"


def event_log(run_dir: Path, replica: int, rank: int) -> Path:
    return run_dir / EVENT_LOGS / f"{worker_name(replica, rank)}.jsonl"


def run_event_log(run_dir: Path) -> Path:
    """Parent's log: group exits, restarts, watchdog, signals (one ``RunEvent`` per line)."""
    return run_dir / EVENT_LOGS / RUN_EVENT_LOG


def lifecycle_log(run_dir: Path, replica: int, rank: int) -> Path:
    """One rank's ``LifecycleEvent`` log (every incarnation appends)."""
    return run_dir / EVENT_LOGS / LIFECYCLE / f"{worker_name(replica, rank)}.jsonl"


def recovery_trace_name(replica: int, rank: int, incarnation: int) -> str:
    return f"{worker_name(replica, rank)}.restart{incarnation}.pt.trace.json.gz"


def around_fault_trace_name(replica: int, rank: int, fault_key: str, part: int = 1) -> str:
    """A surviving rank's profile around another group's fault (``ftrun.worker.profiling.AroundFault``):
    ``replica0_rank0.kill-r1-s25.pt.trace.json.gz``; a second part (after the step window) ``....2.pt...``."""
    return f"{worker_name(replica, rank)}.{fault_key}{'' if part <= 1 else f'.{part}'}.pt.trace.json.gz"


AROUND_FAULT_RE = re.compile(r"\.((?:kill|sigterm|hang)-r\d+-s\d+)(?:\.\d+)?\.pt\.trace\.json")


def recovery_trace_dir(run_dir: Path) -> Path:
    return run_dir / TRACES / RECOVERY_TRACES


def fault_marker(run_dir: Path, key: str) -> Path:
    return run_dir / FAULTS / f"{key}.json"


def fault_markers(run_dir: Path) -> list[Path]:
    """``faults/*.json``, without a marker still being written (``TMP_PREFIX``: the parent reads
    this dir while ranks write into it)."""
    return sorted(p for p in (run_dir / FAULTS).glob("*.json") if not p.name.startswith(TMP_PREFIX))


def read_fault_markers(run_dir: Path) -> list[FaultMarker]:
    """The faults that fired in this run dir (``faults/*.json``), in file-name order; ``BadInput``
    (one line naming the file) for one that is unreadable, over ``FAULT_MARKER_LIMIT`` bytes or not one."""
    out = []
    for p in fault_markers(run_dir):
        out.append(read_json(p, FAULT_MARKER_LIMIT, "fault marker", FaultMarker))
    return out


def meta_file(run_dir: Path, replica: int, rank: int) -> Path:
    return run_dir / META / f"{worker_name(replica, rank)}.json"


def progress_file(run_dir: Path, replica: int) -> Path:
    return run_dir / PROGRESS / f"replica{replica}.txt"


def run_log(run_dir: Path) -> Path:
    """ftrun's own log of the run (``ftrun.runlog``)."""
    return run_dir / LOGS / "ftrun.log"


def group_log(run_dir: Path, replica: int) -> Path:
    return run_dir / LOGS / f"replica{replica}.log"


def group_dir(run_dir: Path, replica: int) -> Path:
    """``ftrun launch``: the working directory of replica group ``replica``."""
    return run_dir / GROUPS / f"replica{replica}"


def group_trace_dir(run_dir: Path, replica: int) -> Path:
    """``ftrun launch``: the group's ``FTRUN_TRACE_DIR`` (scripts may write traces there)."""
    return run_dir / TRACES / f"replica{replica}"


def parse_worker(name: str) -> tuple[int, int] | None:
    """(replica, rank) from a file name like ``replica1_rank0.21.pt.trace.json.gz``."""
    m = WORKER_RE.search(name)
    return (int(m[1]), int(m[2])) if m else None
