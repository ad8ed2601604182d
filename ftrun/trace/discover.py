"""Turn ``inspect-trace`` PATH arguments into trace files, plus the run dir's manifest if any.

* a run dir (holds ``manifest.json``): its traces as listed by the manifest, each with its
  (replica, rank) from the manifest;
* a run dir's ``traces/`` folder or files inside it: treated as that run dir;
* any other folder: every ``*.json`` / ``*.json.gz`` below it (recursively);
* files: used as given.

Identity of non-manifest files is settled later (``ftrun.check.workers``): the file name
(``replica{r}_rank{g}``), then trace metadata, then order. Bad paths raise ``BadInput``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ftrun import layout
from ftrun.errors import BadInput

TRACE_SUFFIXES = (".json", ".json.gz")
NOT_TRACES = {layout.MANIFEST, layout.SUMMARY}


@dataclass
class TraceFile:
    path: Path
    replica: Optional[int] = None
    rank: Optional[int] = None
    source: Optional[str] = None  # "manifest" when known up front


@dataclass
class Inputs:
    files: list[TraceFile]
    run_dir: Optional[Path] = None
    manifest: Optional[dict[str, Any]] = None
    event_logs: dict[tuple[int, int], Path] = field(default_factory=dict)


def is_trace_name(p: Path) -> bool:
    return p.name.endswith(TRACE_SUFFIXES) and p.name not in NOT_TRACES


def run_dir_of(p: Path) -> Optional[Path]:
    """The run dir that ``p`` (a run dir, its traces/ folder, or a trace in it) belongs to."""
    for cand in (p, p.parent, p.parent.parent):
        if (cand / layout.MANIFEST).is_file() and (cand == p or p.is_relative_to(cand / layout.TRACES)):
            return cand
    return None


def load_manifest(run_dir: Path) -> dict[str, Any]:
    path = run_dir / layout.MANIFEST
    try:
        m = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadInput(f"{path}: unreadable manifest ({e})") from None
    if not isinstance(m, dict) or not isinstance(m.get("schedule"), dict):
        raise BadInput(f"{path}: manifest without a 'schedule' object")
    if not isinstance(m.get("traces"), list):
        raise BadInput(f"{path}: manifest without a 'traces' list")
    return m


def _manifest_files(run_dir: Path, m: dict[str, Any]) -> list[TraceFile]:
    out = []
    for t in m["traces"]:
        try:
            out.append(TraceFile(run_dir / t["path"], int(t["replica"]), int(t["rank"]), "manifest"))
        except (TypeError, KeyError, ValueError):
            raise BadInput(f"{run_dir / layout.MANIFEST}: bad traces entry {t!r}") from None
    return out


def _event_logs(run_dir: Path, m: dict[str, Any]) -> dict[tuple[int, int], Path]:
    logs = {}
    for e in m.get("event_logs") or []:
        try:
            logs[(int(e["replica"]), int(e["rank"]))] = run_dir / e["path"]
        except (TypeError, KeyError, ValueError):
            continue
    for f in (run_dir / layout.EVENTS).glob("*.jsonl"):
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
        if p.is_dir():
            found = sorted(q for q in p.rglob("*") if q.is_file() and is_trace_name(q))
            if not found:
                raise BadInput(f"{p}: no trace files (*.json, *.json.gz) in this folder")
            files.extend(TraceFile(q) for q in found)
        else:
            files.append(TraceFile(p))
    if len(run_dirs) > 1:
        raise BadInput(f"{run_dirs[1]}: inspect one run dir at a time (also got {run_dirs[0]})")
    if not run_dirs:
        return Inputs(files)
    rd = run_dirs[0]
    m = load_manifest(rd)
    listed = _manifest_files(rd, m)
    by_path = {t.path.resolve(): t for t in listed}
    chosen = listed
    if files:  # explicit files inside the run dir: only those, with the manifest's identity
        chosen = [by_path.get(f.path.resolve(), f) for f in files]
    if not chosen:
        raise BadInput(f"{rd / layout.MANIFEST}: lists no traces (was the run profiled?)")
    for t in chosen:
        if not t.path.is_file():
            raise BadInput(f"{t.path}: listed in {rd / layout.MANIFEST} but missing")
    return Inputs(chosen, rd, m, _event_logs(rd, m))
