"""Where a run's files live: the run dir's names, the rank environment, and the path of each file. Torch-free."""

from __future__ import annotations

import re
from pathlib import Path

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
