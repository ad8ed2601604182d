"""One ``ftrun launch`` in a claimed run dir: start, watch, stop, find the traces, write the
manifest and the summary. Torch-free; renders and analyses nothing (``ftrun.commands.launch``
checks the traces and renders).

The parts: ``groups`` (the lighthouse, one torchrun per group: ``script.script_group``) ->
``watch`` (restarts, ``--kill``, ``--timeout``; ``policy``) -> ``trace.harvest`` (the traces
the script wrote) -> ``script.launch_manifest`` and ``LaunchSummary`` (``layout``).
Every child is stopped on success, failure, Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from ftrun import layout
from ftrun.errors import BadInput, Interrupted, RunFailed, Stopped, Stopping, raise_on_signal
from ftrun.launch.autohook.boot import write_hook_dir
from ftrun.launch.groups import start_lighthouse
from ftrun.launch.placement import Placement
from ftrun.launch.script import LaunchSpec, launch_manifest, script_group
from ftrun.launch.tail import LogTail
from ftrun.launch.watch import JOINED, LaunchState, Quorums, stop_groups, watch
from ftrun.output import atomic_write
from ftrun.trace.harvest import FoundTrace, find_traces


@dataclass
class Launched:
    """What a finished launch left: its state, the traces found (``checked``: the ones the
    inspection may read), the manifest written and the summary (``inspection`` still None)."""

    spec: LaunchSpec
    run_dir: Path
    state: LaunchState
    searched: list[Path]
    found: list[FoundTrace]
    checked: list[FoundTrace]
    manifest: layout.LaunchManifest
    summary: layout.LaunchSummary

    def not_checkable(self) -> Exception | None:
        """Why the traces cannot be checked (raise it after the summary is written), else None:
        no trace (``BadInput``); a group that never joined a torchft quorum (``RunFailed``):
        a verdict needs evidence, so nothing checked fails the launch."""
        spec, s = self.spec, self.summary
        if not self.manifest.traces:
            if self.found:
                return BadInput(f"no trace to check: {s.trace_note}")
            looked = ", ".join(str(d) for d in self.searched)
            return BadInput(
                f"{spec.script.name} wrote no chrome trace (looked for *.json / *.json.gz holding "
                f"traceEvents under {looked})"
            )
        absent = [r for r in range(spec.replicas) if not self.state.quorums_joined.get(r)]
        if absent:
            logs = ", ".join(str(layout.group_log(self.run_dir, r)) for r in absent[:2])
            return RunFailed(
                f"nothing checked: replica group(s) {', '.join(map(str, absent))} never joined a torchft "
                f"quorum (no '{JOINED}' in {logs}); does {spec.script.name} use torchft's Manager?"
            )
        return None


def run_launch(
    spec: LaunchSpec,
    run_dir: Path,
    placement: Placement,
    stop: Stopping,
    view: AbstractContextManager,
    refresh: Callable[[LaunchState], None],
) -> Launched:
    """Start the lighthouse (unless ``--lighthouse``) and the groups, watch them (``refresh``
    after every look, inside ``view``), stop every child, then collect (``collect``). Stopped by
    a signal: ``Interrupted`` naming the partial run."""
    state = LaunchState(run_dir, [], kills=spec.kills, restarts=spec.restarts, timeout_s=spec.timeout_s)
    stopped: str | None = None
    t0 = time.time()
    url = spec.lighthouse or ""
    try:
        (run_dir / layout.LOGS).mkdir(parents=True, exist_ok=True)
        write_hook_dir(run_dir)  # the groups' sitecustomize (ftrun.launch.autohook.boot)
        state.started = time.monotonic()
        if spec.lighthouse is None:
            state.lighthouse = start_lighthouse(run_dir, spec.min_replicas)
            url = state.lighthouse.url
            state.quorums = Quorums(LogTail(state.lighthouse.log))
        for r in range(spec.replicas):
            g = script_group(spec, run_dir, r, url, placement.env.get(r) if placement.mode != "cpu" else None)
            layout.group_trace_dir(run_dir, r).mkdir(parents=True, exist_ok=True)
            state.groups.append(g)  # before start(): a signal in between must not orphan it
            g.start()
        with view:
            watch(state, refresh)
    except Stopped as e:
        stopped = str(e)
    finally:
        stop.begin()
        stop_groups(state)
    if state.quorums is not None:
        state.quorums.update()
    stopped = stopped or stop.signal
    if stopped:
        raise Interrupted(f"stopped by {stopped}; all children stopped; partial run in {run_dir}")
    raise_on_signal()  # no child left: a signal during the trace search or the check just ends it (exit 130)
    return collect(spec, run_dir, state, url, time.time() - t0)


def collect(spec: LaunchSpec, run_dir: Path, state: LaunchState, url: str, seconds: float) -> Launched:
    """Find the traces the script wrote, write ``manifest.json`` and build the summary."""
    dirs = {r: [layout.group_dir(run_dir, r), layout.group_trace_dir(run_dir, r)] for r in range(spec.replicas)}
    found = find_traces(dirs, spec.nproc_per_replica)
    # a relaunched incarnation numbers its profiler steps from 1 again while torchft's manager
    # step was healed: ftrun cannot align such a trace with the schedule, so it is not checked
    relaunched = [
        t
        for t in found
        if t.replica in state.first_restart and t.path.stat().st_mtime >= state.first_restart[t.replica]
    ]
    checked = [t for t in found if t not in relaunched]
    manifest = launch_manifest(spec, run_dir, url, state.groups, state.status, state.fired, checked, seconds)
    manifest.traces_not_checked = [
        layout.UncheckedTrace(t.replica, str(t.path.relative_to(run_dir)), "relaunched incarnation") for t in relaunched
    ]
    atomic_write(run_dir / layout.MANIFEST, layout.to_json(manifest, indent=1))
    notes = []
    if unknown := [t for t in found if t.rank is None]:
        notes.append(
            f"{len(unknown)} trace(s) with no rank in their metadata or path are not checked "
            f"(the group has {spec.nproc_per_replica} ranks)"
        )
    if relaunched:
        notes.append(
            f"{len(relaunched)} trace(s) written after a group was relaunched are not checked (a relaunched "
            "script numbers its steps from 1 again; its step offset is not in the trace)"
        )
    summary = layout.LaunchSummary(
        run_dir=str(run_dir),
        script=str(spec.script),
        seconds=round(seconds, 3),
        groups=state.rows(),
        quorums_seen=state.quorums.last_id if state.quorums is not None else None,
        faults_fired=list(state.fired),
        traces=[
            layout.LaunchTrace(
                replica=t.replica,
                rank=t.rank,
                path=str(t.path),
                rank_source=t.rank_source,
                checked=t in checked and t.rank is not None,
            )
            for t in found
        ],
        trace_note="; ".join(notes) or None,
        failures=list(state.failures),
        inspection=None,
        ok=not state.failures,
    )
    return Launched(spec, run_dir, state, [d for ds in dirs.values() for d in ds], found, checked, manifest, summary)
