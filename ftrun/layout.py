"""Where a run's files live, and the manifest contract. Torch-free.

A run dir ``<out>/<run-name>/`` holds::

    manifest.json                      written by the parent at the end (see below)
    summary.json                       the train summary (also printed by --json)
    traces/replica{r}_rank{g}.{A}.pt.trace.json.gz
                                       torch-profiler chrome traces; A = first profiled step.
                                       torch-tb-profiler reads <worker>.<span>.pt.trace.json[.gz]
    events/replica{r}_rank{g}.jsonl    per-rank event log, one JSON object per training step
    events/run.jsonl                   the parent's log: group exits, restarts, watchdog, signals
    faults/<key>.json                  one per injected fault that fired (step, time)
    meta/replica{r}_rank{g}.json       what each rank measured about itself (fragments, files)
    logs/replica{r}.log                stdout+stderr of the group's elastic launcher
    tb/replica{r}/                     TensorBoard scalars (loss, participants, manager step, step time)
    groups/replica{r}/                 ftrun launch: the group's working directory (its script's files)
    traces/replica{r}/                 ftrun launch: the group's FTRUN_TRACE_DIR

manifest.json keys: ``ftrun_version``, ``job_id``, ``run_name``, ``config`` (resolved),
``versions`` (python, torch, torchft, ftrun), ``backend``, ``replicas``, ``nproc_per_replica``,
``schedule`` ({fragments, sync_every, fragment_sync_delay, steps}), ``fragments`` (list of
{id, params: [{name, numel, shape}], numel, bytes}), ``expected`` (list of {step, kind,
fragment, cycle, manager_step} assuming every commit succeeds), ``profile_windows``
([[A, B], ...]), ``traces`` (list of {replica, rank, path (relative), window}),
``event_logs`` (list of {replica, rank, path}), ``link`` (emulated link or null).

Event log line keys: ``step``, ``manager_step`` (at the step's start), ``manager_step_after``,
``sent`` (fragment or null), ``synced`` (fragment or null), ``commit`` (true/false/null),
``participants``, ``quorum_id``, ``loss``, ``step_time_s``, ``fingerprint`` (hex of the synced
fragment's parameters after a commit, else null), ``t`` (unix time at step end).
"""

from __future__ import annotations

import re
from pathlib import Path

MANIFEST = "manifest.json"
SUMMARY = "summary.json"
TRACES = "traces"
EVENTS = "events"
META = "meta"
LOGS = "logs"
TB = "tb"
GROUPS = "groups"  # ftrun launch: each group's working directory, groups/replica{r}/

WORKER_RE = re.compile(r"replica(\d+)_rank(\d+)")


def worker_name(replica: int, rank: int) -> str:
    return f"replica{replica}_rank{rank}"


def trace_name(replica: int, rank: int, first_step: int) -> str:
    return f"{worker_name(replica, rank)}.{first_step}.pt.trace.json.gz"


def event_log(run_dir: Path, replica: int, rank: int) -> Path:
    return run_dir / EVENTS / f"{worker_name(replica, rank)}.jsonl"


def run_event_log(run_dir: Path) -> Path:
    """Parent's log: group exits, restarts, watchdog, signals (one JSON object per line)."""
    return run_dir / EVENTS / "run.jsonl"


def fault_markers(run_dir: Path) -> list[Path]:
    return sorted((run_dir / "faults").glob("*.json"))


def meta_file(run_dir: Path, replica: int, rank: int) -> Path:
    return run_dir / META / f"{worker_name(replica, rank)}.json"


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
