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

Every file ftrun writes there is one of these Structs, written by ``to_json`` (the one encoder,
``ftrun.layout.codec``) and read back by the same type. One module per file: ``paths`` (the names
and where each file lives), ``spec``, ``manifest``, ``summary`` (``recovery``: its recovery
breakdowns), ``events`` (the step, run and lifecycle logs; ``sketches``: the step logs'
numerics), ``numerics_check`` (the numeric check in summary.json and report.json), ``faults``,
``meta``, ``marker``, ``sweep_cell``. The
records ``compare`` and ``sweep`` write beside the run dirs are typed the same way:
``compare_report`` (a compare dir's report.json) and ``sweep_result`` (a sweep dir's sweep.json). This
package re-exports every public name: ``from ftrun.layout import Manifest`` is how to import them.

``FORMAT`` is written into spec.json, manifest.json and summary.json. One rule for a file of
another format, older or newer: ``refuse_format``, one line naming the file, its format and what
to do (exit 2); a file without ``format`` is format 1. There are no compatibility readers: raise
``FORMAT`` when a field changes meaning or goes away; adding an optional field does not need it.
"""

from __future__ import annotations

from ftrun.layout.codec import (
    FORMAT as FORMAT,
    FormatStamp as FormatStamp,
    JsonObject as JsonObject,
    read_record as read_record,
    refuse_format as refuse_format,
    to_json as to_json,
)
from ftrun.layout.compare_report import (
    REPORT_JSON as REPORT_JSON,
    RESULT_LIMIT as RESULT_LIMIT,
    CompareLink as CompareLink,
    CompareReport as CompareReport,
    CompareRun as CompareRun,
    Decomposition as Decomposition,
    ExpectHidden as ExpectHidden,
    Explanation as Explanation,
    NumericsBrief as NumericsBrief,
    Recalibration as Recalibration,
    RepeatRun as RepeatRun,
    RunRecovery as RunRecovery,
    Told as Told,
    read_compare_report as read_compare_report,
)
from ftrun.layout.events import (
    COMMIT_ERROR_CHARS as COMMIT_ERROR_CHARS,
    EventRecord as EventRecord,
    Healed as Healed,
    LifecycleEvent as LifecycleEvent,
    Quorum as Quorum,
    Rejoined as Rejoined,
    RunEvent as RunEvent,
    StepNews as StepNews,
    clip_error as clip_error,
    commit_error_text as commit_error_text,
)
from ftrun.layout.faults import (
    FAULT_MARKER_LIMIT as FAULT_MARKER_LIMIT,
    FaultMarker as FaultMarker,
    FaultSpec as FaultSpec,
    fault_label as fault_label,
    read_fault_markers as read_fault_markers,
)
from ftrun.layout.manifest import (
    MANIFEST_LIMIT as MANIFEST_LIMIT,
    AnyManifest as AnyManifest,
    DetectionBound as DetectionBound,
    DeviceRef as DeviceRef,
    EventLogRef as EventLogRef,
    ExpectedEvent as ExpectedEvent,
    FaultsInfo as FaultsInfo,
    FiredKill as FiredKill,
    LaunchFaults as LaunchFaults,
    LaunchGroup as LaunchGroup,
    LaunchManifest as LaunchManifest,
    LaunchSchedule as LaunchSchedule,
    Manifest as Manifest,
    ManifestStamp as ManifestStamp,
    ScheduleInfo as ScheduleInfo,
    TraceRef as TraceRef,
    UncheckedTrace as UncheckedTrace,
    read_manifest as read_manifest,
    read_train_manifest as read_train_manifest,
)
from ftrun.layout.marker import (
    MARKER_LIMIT as MARKER_LIMIT,
    RunMarker as RunMarker,
    read_run_marker as read_run_marker,
)
from ftrun.layout.meta import (
    RANK_META_LIMIT as RANK_META_LIMIT,
    Fragment as Fragment,
    Param as Param,
    RankMeta as RankMeta,
    read_rank_meta as read_rank_meta,
)
from ftrun.layout.numerics_check import (
    FailedRounds as FailedRounds,
    FirstContribution as FirstContribution,
    HealCheck as HealCheck,
    LargestError as LargestError,
    NumericsCheck as NumericsCheck,
    NumericsProblem as NumericsProblem,
    StageError as StageError,
    StageTally as StageTally,
    Tolerance as Tolerance,
)
from ftrun.layout.paths import (
    AROUND_FAULT_RE as AROUND_FAULT_RE,
    ENV_REPLICA as ENV_REPLICA,
    ENV_RESTART as ENV_RESTART,
    EVENT_LOGS as EVENT_LOGS,
    FAULTS as FAULTS,
    GROUPS as GROUPS,
    LIFECYCLE as LIFECYCLE,
    LOGS as LOGS,
    MANIFEST as MANIFEST,
    META as META,
    OUT_MARKER as OUT_MARKER,
    OWN_ENTRIES as OWN_ENTRIES,
    PROGRESS as PROGRESS,
    READY as READY,
    RECOVERY_TRACES as RECOVERY_TRACES,
    RUN_EVENT_LOG as RUN_EVENT_LOG,
    RUN_MARKER as RUN_MARKER,
    SPEC as SPEC,
    SUMMARY as SUMMARY,
    TB as TB,
    TMP_PREFIX as TMP_PREFIX,
    TRACES as TRACES,
    WORKER_RE as WORKER_RE,
    around_fault_trace_name as around_fault_trace_name,
    event_log as event_log,
    fault_marker as fault_marker,
    fault_markers as fault_markers,
    group_dir as group_dir,
    group_log as group_log,
    group_trace_dir as group_trace_dir,
    lifecycle_log as lifecycle_log,
    meta_file as meta_file,
    parse_worker as parse_worker,
    progress_file as progress_file,
    recovery_trace_dir as recovery_trace_dir,
    recovery_trace_name as recovery_trace_name,
    run_event_log as run_event_log,
    run_log as run_log,
    trace_name as trace_name,
    worker_name as worker_name,
)
from ftrun.layout.recovery import (
    CollectiveHold as CollectiveHold,
    FaultHistory as FaultHistory,
    FaultOutcome as FaultOutcome,
    HealRow as HealRow,
    QuorumChange as QuorumChange,
    RecoveryRecord as RecoveryRecord,
    SurvivorLosses as SurvivorLosses,
)
from ftrun.layout.sketches import (
    LINEAR_OPTIMIZERS as LINEAR_OPTIMIZERS,
    SKETCH_K as SKETCH_K,
    SKETCH_PERIOD as SKETCH_PERIOD,
    SKETCH_SEED as SKETCH_SEED,
    SKETCH_STAGE as SKETCH_STAGE,
    HealNumerics as HealNumerics,
    OuterStep as OuterStep,
    RoundNumerics as RoundNumerics,
    Sketch as Sketch,
)
from ftrun.layout.spec import (
    SPEC_LIMIT as SPEC_LIMIT,
    Link as Link,
    Network as Network,
    Spec as Spec,
    read_spec as read_spec,
)
from ftrun.layout.summary import (
    SUMMARY_LIMIT as SUMMARY_LIMIT,
    AgreementSummary as AgreementSummary,
    Disagreement as Disagreement,
    LaunchGroupRow as LaunchGroupRow,
    LaunchSummary as LaunchSummary,
    LaunchTrace as LaunchTrace,
    ReplicaSummary as ReplicaSummary,
    RunCheck as RunCheck,
    SyncedFingerprint as SyncedFingerprint,
    TrainSummary as TrainSummary,
    read_launch_summary as read_launch_summary,
    read_train_summary as read_train_summary,
)
from ftrun.layout.sweep_cell import (
    SWEEP_CELL as SWEEP_CELL,
    SWEEP_CELL_LIMIT as SWEEP_CELL_LIMIT,
    SWEEP_VERDICTS as SWEEP_VERDICTS,
    AxisValue as AxisValue,
    CellVerdict as CellVerdict,
    ConfigValue as ConfigValue,
    SweepCell as SweepCell,
    read_sweep_cell as read_sweep_cell,
)
from ftrun.layout.sweep_result import (
    SWEEP_JSON as SWEEP_JSON,
    Machine as Machine,
    SweepAxis as SweepAxis,
    SweepResult as SweepResult,
    SweepRow as SweepRow,
    read_sweep_result as read_sweep_result,
)
