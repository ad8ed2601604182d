"""Turn ``inspect-trace`` PATH arguments into trace files, plus the run dir's manifest if any.

* a run dir (holds ``manifest.json``): its traces as listed by the manifest, each with its
  (replica, rank) from the manifest;
* a run dir's ``traces/`` folder or files inside it: treated as that run dir;
* any other folder: every ``*.json`` / ``*.json.gz`` below it (recursively);
* files: used as given.

Several run dirs are accepted when they are the replica groups of ONE job (multi-host runs
write ``<name>-group{K}`` per host): same ``job_id``, same schedule, no replica in two of them.
They are merged into one input: union of traces and event logs, every manifest kept in
``Inputs.manifests``. Run dirs of different jobs raise ``BadInput`` (one line).

A run dir that ftrun started but never finished (its run marker, no manifest: an interrupted
or crashed run) is named as such: its ``traces/`` are used if any, never its ``spec.json`` or
``meta/*.json``; with none, ``BadInput`` ("interrupted run: no traces were written"). The same
file given twice is ``BadInput`` naming it.

Identity of non-manifest files is settled later (``ftrun.check.workers``): the file name
(``replica{r}_rank{g}``), then trace metadata, then order. Bad paths raise ``BadInput``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ftrun import layout
from ftrun.errors import BadInput
from ftrun.event_log import read_event_log

TRACE_SUFFIXES = (".json", ".json.gz")
NOT_TRACES = {layout.MANIFEST, layout.SUMMARY, layout.SPEC}


@dataclass
class TraceFile:
    path: Path
    replica: int | None = None
    rank: int | None = None
    source: str | None = None  # "manifest" when known up front


@dataclass
class Inputs:
    files: list[TraceFile]
    run_dir: Path | None = None
    manifest: layout.AnyManifest | None = None
    event_logs: dict[tuple[int, int], Path] = field(default_factory=dict)
    run_dirs: list[Path] = field(default_factory=list)  # every merged run dir (groups of one job)
    manifests: list[layout.AnyManifest] = field(default_factory=list)  # their manifests, same order
    whole_run: bool = False  # run dirs (or traces/ folders) given, not hand-picked trace files
    interrupted: list[Path] = field(default_factory=list)  # ftrun run dirs without a manifest (stopped early)

    @property
    def job_id(self) -> str | None:
        return self.manifest.job_id if self.manifest is not None else None

    def groups(self) -> list[int]:
        """Replica groups whose event logs the merged run dirs hold (the groups that ran there)."""
        return sorted({r for r, _ in self.event_logs})


def is_trace_name(p: Path) -> bool:
    """A trace file's name (never one of ftrun's own files, nor a file still being written)."""
    return p.name.endswith(TRACE_SUFFIXES) and p.name not in NOT_TRACES and not p.name.startswith(layout.TMP_PREFIX)


def _run_dir_bookkeeping(q: Path, top: Path) -> bool:
    """``q`` (found below ``top``) is one of an ftrun run dir's own files outside ``traces/``
    (meta/, events/, ...): never a trace."""
    for d in q.parents:
        if (d / layout.RUN_MARKER).is_file() or (d / layout.MANIFEST).is_file():
            return q.parent != d / layout.TRACES
        if d == top:
            return False
    return False


def run_dir_of(p: Path) -> Path | None:
    """The run dir that ``p`` (a run dir, its traces/ folder, or a trace in it) belongs to."""
    for cand in (p, p.parent, p.parent.parent):
        if (cand / layout.MANIFEST).is_file() and (cand == p or p.is_relative_to(cand / layout.TRACES)):
            return cand
    return None


def _manifest_files(run_dir: Path, m: layout.AnyManifest) -> list[TraceFile]:
    return [TraceFile(run_dir / t.path, t.replica, t.rank, "manifest") for t in m.traces]


def event_log_paths(run_dir: Path, m: layout.AnyManifest) -> dict[tuple[int, int], Path]:
    """(replica, rank) -> the event log of each rank of run dir ``run_dir`` (manifest ``m``): the
    manifest's, then any other in ``events/``."""
    logs = {(e.replica, e.rank): run_dir / e.path for e in m.event_logs}
    for f in (run_dir / layout.EVENT_LOGS).glob("*.jsonl"):
        w = layout.parse_worker(f.name)
        if w is not None:
            logs.setdefault(w, f)
    return logs


def discover(paths: list[Path]) -> Inputs:
    """Resolve PATH arguments (see the module docstring)."""
    if not paths:
        raise BadInput("inspect-trace: give at least one PATH")
    files: list[TraceFile] = []
    run_dirs: list[Path] = []
    interrupted: list[Path] = []
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise BadInput(f"{p}: no such file or directory")
        rd = run_dir_of(p)
        if rd is not None:
            if rd not in run_dirs:
                run_dirs.append(rd)
            if p.is_dir():
                continue
            files.append(TraceFile(p))
            continue
        if p.is_dir() and ((p / layout.RUN_MARKER).is_file() or (p / layout.SPEC).is_file()):  # ftrun's, no manifest
            found = sorted(q for q in (p / layout.TRACES).glob("*") if q.is_file() and is_trace_name(q))
            if not found:
                raise BadInput(f"{p}: interrupted run: no traces were written (no {layout.MANIFEST})")
            files.extend(TraceFile(q) for q in found)
            interrupted.append(p)
        elif p.is_dir():
            found = sorted(
                q for q in p.rglob("*") if q.is_file() and is_trace_name(q) and not _run_dir_bookkeeping(q, p)
            )
            if not found:
                raise BadInput(f"{p}: no trace files (*.json, *.json.gz) in this folder")
            files.extend(TraceFile(q) for q in found)
        else:
            files.append(TraceFile(p))
    seen: dict[Path, Path] = {}
    for f in files:
        first = seen.setdefault(f.path.resolve(), f.path)
        if first is not f.path:
            raise BadInput(f"{f.path}: given twice (also as {first}); give each trace once")
    if not run_dirs:
        return Inputs(files, interrupted=interrupted)
    manifests = [layout.read_manifest(rd) for rd in run_dirs]
    _check_one_job(run_dirs, manifests)
    chosen: list[TraceFile] = []
    logs: dict[tuple[int, int], Path] = {}
    explicit = {f.path.resolve() for f in files}
    for rd, m in zip(run_dirs, manifests, strict=True):  # a manifest per run dir
        listed = _manifest_files(rd, m) + _unlisted(rd, m)
        if files:  # explicit files inside the run dir: only those, with the manifest's identity
            chosen += [t for t in listed if t.path.resolve() in explicit]
        else:
            chosen += listed
        for k, v in event_log_paths(rd, m).items():
            logs.setdefault(k, v)
    if files:
        known = {t.path.resolve() for t in chosen}
        chosen += [f for f in files if f.path.resolve() not in known]
    if not chosen:
        raise BadInput(_why_no_traces(run_dirs[0], manifests[0], logs))
    for t in chosen:
        if not t.path.is_file():
            rd = run_dir_of(t.path) or run_dirs[0]
            raise BadInput(f"{t.path}: listed in {rd / layout.MANIFEST} but missing")
    return Inputs(chosen, run_dirs[0], manifests[0], logs, run_dirs, manifests, whole_run=not files)


def _why_no_traces(run_dir: Path, m: layout.AnyManifest, logs: dict[tuple[int, int], Path]) -> str:
    """The cause, as the run dir tells it, of a manifest that lists no trace."""
    where = run_dir / layout.MANIFEST
    if isinstance(m, layout.LaunchManifest):
        return f"{where}: lists no traces (the script wrote no chrome trace ftrun could find)"
    windows = [w for w in m.profile_windows if len(w) == 2]
    if not windows:
        return f"{where}: lists no traces: the run was not profiled (--profile none)"
    first, last = min(w[0] for w in windows), max(w[1] for w in windows)
    reached = max((r.step for p in logs.values() for r in read_event_log(p) if r.step is not None), default=None)
    if reached is None or reached < last:
        got = "before its first step" if reached is None else f"at step {reached}"
        return (
            f"{run_dir}: the run ended {got}, before the end of its profiled window (steps {first}-{last}), "
            "so no trace was written; nothing to check"
        )
    return f"{where}: lists no traces, though the run reached its profiled window (steps {first}-{last})"


def _unlisted(run_dir: Path, m: layout.AnyManifest) -> list[TraceFile]:
    """Trace files in ``traces/`` that the manifest does not list (a restarted group rewrites its
    meta file, so an earlier incarnation's finished trace may be missing from the manifest)."""
    listed = {(run_dir / t.path).resolve() for t in m.traces}
    groups = {e.replica for e in m.event_logs}
    out = []
    for q in sorted((run_dir / layout.TRACES).glob("*.pt.trace.json*")):
        if q.name.startswith(layout.TMP_PREFIX):
            continue  # a trace still being written (or cut short by a signal): not a result
        w = layout.parse_worker(q.name)
        if w is not None and q.resolve() not in listed and (not groups or w[0] in groups):
            out.append(TraceFile(q, w[0], w[1], "manifest"))
    return out


SCHEDULE_KEYS = ("fragments", "sync_every", "fragment_sync_delay", "steps")


def _check_one_job(run_dirs: list[Path], manifests: list[layout.AnyManifest]) -> None:
    """Several run dirs must be the replica groups of one job (module docstring)."""
    if len(run_dirs) < 2:
        return
    a, ma = run_dirs[0], manifests[0]
    seen: dict[int, Path] = {}
    for rd, m in zip(run_dirs, manifests, strict=True):  # a manifest per run dir
        if not ma.job_id or m.job_id != ma.job_id:
            raise BadInput(
                f"{rd}: not a replica group of the same job as {a} (job_id {m.job_id!r} vs {ma.job_id!r}); "
                "inspect the run dirs of one job together"
            )
        sa, sb = ({k: getattr(x.schedule, k) for k in SCHEDULE_KEYS} for x in (ma, m))
        if sa != sb or m.replicas != ma.replicas:
            diff = ", ".join(f"{k}={sb[k]} vs {sa[k]}" for k in SCHEDULE_KEYS if sa[k] != sb[k]) or (
                f"replicas={m.replicas} vs {ma.replicas}"
            )
            raise BadInput(f"{rd}: schedule differs from {a} ({diff}); not replica groups of one job")
        for e in m.event_logs:
            if seen.setdefault(e.replica, rd) != rd:
                raise BadInput(
                    f"{rd}: replica group {e.replica} is also in {seen[e.replica]}; give each group's run dir once"
                )
