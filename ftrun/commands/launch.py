"""``ftrun launch [OPTIONS] -- SCRIPT.py [ARGS...]``: run any torchft script as R replica groups.

Pipeline: check the flags (``ftrun.launch.script.LaunchSpec``) -> claim the run dir -> start
the lighthouse (unless ``--lighthouse``) and one torchrun job per group (each in
``groups/replica{r}/``, output in ``logs/replica{r}.log``) -> watch them (``ftrun.launch.watch``:
restarts, ``--kill``, ``--timeout``) -> stop everything -> find the chrome traces the script
wrote (``ftrun.trace.harvest``) -> write ``manifest.json`` and ``summary.json`` -> inspect
(``ftrun.check.analyze``, as ``inspect-trace``) unless ``--no-inspect``.

Exit: 0 = every group exited 0 and the inspection passed; 1 = a group failed (named, with its
log) or the inspection failed; 2 = bad input, or no trace found (naming where ftrun looked);
130 = SIGINT/SIGTERM (every child is stopped first). The parent's death reaches the children
through their parent-death signal (``ftrun.launch.procs``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional, Sequence

from ftrun import layout
from ftrun.errors import BadInput, Interrupted, NotChecked, RunFailed, Stopped, raise_on_signal, stop_once_on_signal
from ftrun.launch.groups import start_lighthouse
from ftrun.launch.placement import plan as plan_placement
from ftrun.launch.rundir import claim_named_run_dir
from ftrun.launch.script import LaunchSpec, launch_manifest, script_group
from ftrun.launch.watch import JOINED, LaunchState, LogTail, Quorums, stop_groups, watch
from ftrun.output import atomic_write


def launch(script_and_args: Sequence[str], *, json_out: bool = False, overwrite: bool = False, **flags) -> int:
    """Run the launch (module docstring); ``flags`` as ``LaunchSpec.build`` takes them."""
    spec = LaunchSpec.build(script_and_args, **flags)
    old, signals = stop_once_on_signal()
    try:
        return _launch(spec, json_out, overwrite, signals)
    except Stopped as e:
        signals["stopping"] = True
        raise Interrupted(f"stopped by {e} before the groups started") from None
    finally:
        import signal

        for s, h in old.items():
            signal.signal(s, h)


def _launch(spec: LaunchSpec, json_out: bool, overwrite: bool, signals: dict) -> int:
    from ftrun.torchft_compat import require_supported

    require_supported()  # ftrun's lighthouse is torchft's: an unsupported torchft is refused before anything starts
    placement = plan_placement("auto", range(spec.replicas), spec.nproc_per_replica)  # BadInput before launch
    run_dir, lock = claim_named_run_dir(Path(spec.out), spec.run_name, "launch", overwrite, inputs=[spec.script])
    try:
        return _run(spec, run_dir, placement, json_out, signals)
    finally:
        lock.release()


def _run(spec: LaunchSpec, run_dir: Path, placement, json_out: bool, signals: dict) -> int:
    from ftrun.report.launch_view import LaunchLiveView, print_summary

    state = LaunchState(run_dir, [], kills=spec.kills, restarts=spec.restarts, timeout_s=spec.timeout_s)
    stopped: Optional[str] = None
    t0 = time.time()
    url = spec.lighthouse or ""
    try:
        (run_dir / layout.LOGS).mkdir(parents=True, exist_ok=True)
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
        with LaunchLiveView(enabled=not json_out) as view:
            watch(state, view.refresh)
    except Stopped as e:
        stopped = str(e)
    finally:
        signals["stopping"] = True
        stop_groups(state)
    if state.quorums is not None:
        state.quorums.update()
    stopped = stopped or signals["signal"]
    if stopped:
        raise Interrupted(f"stopped by {stopped}; all children stopped; partial run in {run_dir}")
    raise_on_signal()  # no child left: a signal during the trace search or the check just ends it (exit 130)
    seconds = time.time() - t0

    from ftrun.trace.harvest import find_traces

    dirs = {r: [layout.group_dir(run_dir, r), layout.group_trace_dir(run_dir, r)] for r in range(spec.replicas)}
    found = find_traces(dirs, spec.nproc_per_replica)
    # a relaunched incarnation numbers its profiler steps from 1 again while torchft's manager
    # step was healed: ftrun cannot align such a trace with the schedule, so it is not checked
    relaunched = [t for t in found if t.replica in state.first_restart and t.path.stat().st_mtime >= state.first_restart[t.replica]]
    checked = [t for t in found if t not in relaunched]
    manifest = launch_manifest(spec, run_dir, url, state.groups, state.status, state.fired, checked, seconds)
    manifest["traces_not_checked"] = [{"replica": t.replica, "path": str(t.path.relative_to(run_dir)), "why": "relaunched incarnation"}
                                      for t in relaunched]
    atomic_write(run_dir / layout.MANIFEST, json.dumps(manifest, indent=1))
    unknown = [t for t in found if t.rank is None]
    notes = []
    if unknown:
        notes.append(f"{len(unknown)} trace(s) with no rank in their metadata or path are not checked "
                     f"(the group has {spec.nproc_per_replica} ranks)")
    if relaunched:
        notes.append(f"{len(relaunched)} trace(s) written after a group was relaunched are not checked (a relaunched "
                     "script numbers its steps from 1 again; its step offset is not in the trace)")
    summary = {
        "run_dir": str(run_dir),
        "script": str(spec.script),
        "seconds": round(seconds, 3),
        "groups": state.rows(),
        "quorums_seen": state.quorums.last_id if state.quorums is not None else None,
        "faults_fired": state.fired,
        "traces": [{"replica": t.replica, "rank": t.rank, "path": str(t.path), "rank_source": t.rank_source,
                    "checked": t in checked and t.rank is not None} for t in found],
        "trace_note": "; ".join(notes) or None,
        "failures": list(state.failures),
        "inspection": None,
        "ok": not state.failures,
    }
    report = None
    if not state.failures and spec.inspect:
        if not manifest["traces"]:
            _finish(run_dir, summary, json_out, print_summary)
            looked = ", ".join(str(d) for ds in dirs.values() for d in ds)
            if found:
                raise BadInput(f"no trace to check: {summary['trace_note']}")
            raise BadInput(f"{spec.script.name} wrote no chrome trace (looked for *.json / *.json.gz holding traceEvents under {looked})")
        from ftrun.check.analyze import analyze

        # a verdict needs evidence: every group joined a torchft quorum, every trace holds a
        # torchft send or sync; else nothing was checked, and the launch fails (exit 1)
        absent = [r for r in range(spec.replicas) if not state.quorums_joined.get(r)]
        if absent:
            summary["ok"] = False
            _finish(run_dir, summary, json_out, print_summary)
            logs = ", ".join(str(layout.group_log(run_dir, r)) for r in absent[:2])
            raise RunFailed(f"nothing checked: replica group(s) {', '.join(map(str, absent))} never joined a torchft "
                            f"quorum (no '{JOINED}' in {logs}); does {spec.script.name} use torchft's Manager?")
        try:
            report = analyze([run_dir], step_numbering=spec.step_numbering)
        except NotChecked as e:
            summary["ok"] = False
            _finish(run_dir, summary, json_out, print_summary)
            raise RunFailed(f"nothing checked: {e}") from None
        summary["inspection"] = report.to_json()
        summary["ok"] = report.ok
    _finish(run_dir, summary, json_out, print_summary)
    if report is not None and not json_out:
        from ftrun.report.inspect_view import render

        render(report)
    if state.failures:
        raise RunFailed(state.failures[0])
    return 0 if summary["ok"] else 1


def _finish(run_dir: Path, summary: dict, json_out: bool, print_summary) -> None:
    atomic_write(run_dir / layout.SUMMARY, json.dumps(summary, indent=1, default=str))
    if json_out:
        print(json.dumps(summary, indent=1, default=str))
    else:
        print_summary({**summary, "failures": []})  # the failure is the one error line that follows
