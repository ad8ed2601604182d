"""``ftrun sweep``: the conformance and tuning matrix. Torch-free (each cell trains in a child).

Plan (``ftrun.grid``): the axes (a preset's and ``--axis``'s), their product, each cell
``invalid`` (``ftrun.config.build`` refuses it: torchft's rule or ftrun's), ``unavailable``
(``ftrun.launch.preflight.why_unavailable``) or to run. Each cell to run is a real
``ftrun train --config DIR/NAME/cells/CELL.toml --json`` in a child process, writing its run
dir ``DIR/NAME/CELL``; then the ``inspect-trace`` analysis (``ftrun.check.analyze``, which also
runs the replica-agreement check on the event logs) and ``compare``'s per-run metrics
(``ftrun.check.metrics.run_metrics``). A cell's result is written to ``CELL/sweep-cell.json``;
``--resume`` skips cells that hold one; a sweep locks its dir for its life (``ftrun.dir_lock``),
so a ``--resume`` of a sweep still running is refused. Ctrl-C / SIGTERM stops the running cells' trainings
(each stops its own children), keeps what finished, writes ``sweep.json`` and exits 130.

Exit: 0 when every cell that could run passed, 1 otherwise (each failing cell named with its
first problem), 2 on bad input.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import msgspec

from ftrun import grid, layout
from ftrun.config import build
from ftrun.dir_lock import DirLock
from ftrun.errors import BadInput, Interrupted
from ftrun.json_out import report_json
from ftrun.output import (
    atomic_write,
    check_name,
    check_target,
    check_writable,
    claim_output_dir,
    mark_output_dir,
    wait_until_unlocked,
)
from ftrun.parent_death import die_with_this_process

CELL_RESULT = layout.SWEEP_CELL
CELLS = "cells"  # DIR/NAME/cells/CELL.toml (its configuration) and CELL.log (the training's output)
SWEEP_FILES = ("sweep.json", "sweep.md", "sweep.png")
STOP_WAIT_S = 60.0


def _toml(values: dict[str, Any]) -> str:
    """A flat TOML document of strings, numbers, booleans and lists of strings (JSON spells them
    as TOML does)."""
    return "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items())


def versions() -> dict[str, str]:
    """python, ftrun, torch, torchft (version, distribution, process-group API), as installed
    (read without importing torch: ``ftrun.torchft_compat.installed``)."""
    from ftrun.torchft_compat import versions as found

    return {k: "not installed" if v is None else v for k, v in found().items()}


def machine() -> dict[str, Any]:
    from ftrun.launch.placement import host_devices
    from ftrun.launch.preflight import has_cuda_device

    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "gpus": len(host_devices()),
        "cuda_device": has_cuda_device(),
    }


def _differing(cfg) -> dict[str, Any]:
    """The fields of ``cfg`` that differ from ``RunConfig()``'s, plus mode, out and run name."""
    from ftrun.config import RunConfig

    default = RunConfig().resolved()
    keep = ("mode", "out", "run_name")
    return {k: v for k, v in cfg.resolved().items() if k in keep or v != default[k]}


class Runner:
    """Runs cells' trainings as children; ``stop()`` (any thread) stops every running one."""

    def __init__(self, sweep_dir: Path) -> None:
        self.sweep_dir = sweep_dir
        self.procs: dict[str, subprocess.Popen] = {}
        self.lock = threading.Lock()
        self.stopping = False

    def train(self, cell: grid.Cell) -> tuple[int, str]:
        """Write the cell's config and run ``ftrun train`` on it; (exit code, its stderr)."""
        cells = self.sweep_dir / CELLS
        cfg_path, log_path = cells / f"{cell.name}.toml", cells / f"{cell.name}.log"
        atomic_write(cfg_path, _toml(_differing(cell.config)))
        # --no-check: the sweep checks every cell itself (``evaluate``), once
        cmd = [sys.executable, "-m", "ftrun.cli", "train", "--config", str(cfg_path), "--json", "--no-check"]
        if (self.sweep_dir / cell.name).exists():  # an unfinished cell of an earlier sweep (--resume)
            cmd.append("--overwrite")
        with open(log_path, "w") as log, self.lock:
            if self.stopping:
                return 130, "stopped"
            # it dies with the sweep, even a SIGKILLed one (and stops its own children on SIGTERM);
            # this thread waits for it below, so the parent-death signal is not sent early
            p = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
                preexec_fn=die_with_this_process(signal.SIGTERM),
            )
            self.procs[cell.name] = p
        try:
            _, err = p.communicate()
        finally:
            with self.lock:
                self.procs.pop(cell.name, None)
        with open(log_path, "a") as log:
            log.write(err)
        return p.returncode, err

    def stop(self) -> None:
        """SIGTERM every running training (it stops its own children), wait, then SIGKILL."""
        with self.lock:
            self.stopping = True
            procs = list(self.procs.values())
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT_S
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def evaluate(cell: grid.Cell, run_dir: Path, rc: int, err: str) -> dict[str, Any]:
    """A trained cell's verdict and metrics (``crashed`` when the training failed before the
    end; a run that finished but whose replicas disagreed is analysed: ``fail``)."""
    from ftrun import layout

    out: dict[str, Any] = {"verdict": "crashed", "problem": None}
    summary, broken = None, None
    if (run_dir / layout.SUMMARY).exists():
        try:
            summary = layout.read_train_summary(run_dir)
        except BadInput as e:  # the cell's problem (one line naming the file), as inspect's below
            broken = str(e)
    if rc != 0 and (summary is None or summary.failures):
        from ftrun.launch.diagnose import ftrun_error

        out["problem"] = ftrun_error(err) or f"ftrun train exited {rc}"
        return out
    if broken is not None:
        return {"verdict": "fail", "problem": broken}
    from ftrun.check.analyze import analyze
    from ftrun.check.metrics import run_metrics

    try:
        report = analyze([run_dir], allow_failed_commits=True)
        m = run_metrics(cell.name, run_dir, report)
    except BadInput as e:
        return {"verdict": "fail", "problem": f"inspect: {e}"}
    v, problem = grid.verdict(report.verdict, report.problems(), report.failed_commits)
    group_error = first_group_error(run_dir, cell.config.hosts.replicas) if v != "pass" else None
    if group_error:
        problem = f"{problem}; first error in {group_error}"
    return {
        "verdict": v,
        "problem": problem,
        "failed_commits": sum(1 for c in report.failed_commits if not c.get("explained_by_fault")),
        "failed_commits_explained": sum(1 for c in report.failed_commits if c.get("explained_by_fault")),
        "numerics": m["numerics"],
        "commits": m["commits"],
        "steps_per_s": m["steps_per_s"],
        "exposed_comm_per_sync_ms": m["per_sync_exposed_ms"],
        "exposed_control_per_sync_ms": m["per_sync_exposed_control_ms"],
        "hidden_share": m["hidden_comm_share"],
        "final_loss": m["final_loss"],
        # the first fault's recovery (ftrun.check.recovery): seconds to the group's first commit, largest phase
        **_recovery_metrics(summary),
        "notes": report.notes,
    }


def _recovery_metrics(summary: layout.TrainSummary | None) -> dict[str, Any]:
    b = summary.recovery if summary is not None else []
    if not b:
        return {"recovery_s": None, "recovery_largest_phase": None, "recovery_largest_phase_s": None}
    big = b[0].get("largest_phase")
    return {
        "recovery_s": b[0].get("total_s"),
        "recovery_largest_phase": big,
        "recovery_largest_phase_s": (b[0].get("phases") or {}).get(big) if big else None,
    }


def first_group_error(run_dir: Path, replicas: int) -> str | None:
    """``logs/replicaR.log: <its failure cause>`` for the first group log holding one (a rank's
    signal or first exception line: what went wrong inside torchft, as found; ftrun works
    around nothing)."""
    from ftrun import layout
    from ftrun.launch.diagnose import failure_cause, read_log

    for r in range(replicas):
        p = layout.group_log(run_dir, r)
        text = read_log(p)
        err = failure_cause(text) if text is not None else ""
        if err:
            return f"{p.relative_to(run_dir)}: {err}"
    return None


def run_cell(runner: Runner, cell: grid.Cell) -> dict[str, Any] | None:
    """Train and evaluate one cell; its result (also in ``CELL/sweep-cell.json``), or None when stopped."""
    run_dir = runner.sweep_dir / cell.name
    holder = wait_until_unlocked(run_dir, STOP_WAIT_S)  # an earlier sweep's training, still stopping
    if holder is not None:  # not this cell's result: nothing recorded, a later --resume runs it
        return {
            "name": cell.name,
            "params": cell.params,
            "run_dir": str(run_dir),
            "verdict": "not run",
            "problem": f"its run dir is still in use by pid {holder} after {STOP_WAIT_S:g} s (a training of an "
            "earlier sweep?); --resume again once it has ended",
        }
    t0 = time.monotonic()
    rc, err = runner.train(cell)
    if runner.stopping or rc in (130, -signal.SIGTERM, -signal.SIGINT):
        return None
    res = {
        "name": cell.name,
        "params": cell.params,
        "run_dir": str(run_dir),
        **evaluate(cell, run_dir, rc, err),
        "wall_s": round(time.monotonic() - t0, 2),
        "config": _differing(cell.config),
    }
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(run_dir / CELL_RESULT, layout.to_json(msgspec.convert(res, layout.SweepCell), indent=1))
    return res


def finished(sweep_dir: Path, cell: grid.Cell) -> dict[str, Any] | None:
    """The cell's result from an earlier run of this sweep, re-checked from its run dir, or None.

    ``sweep-cell.json`` says only that the cell finished and with which options: its verdict and
    figures are evaluated again from the run dir (traces corrupted since then fail, whatever the
    file says). ``BadInput`` (one line) when the file is not a cell result (a wrong-typed field,
    an unknown verdict) or the cell was trained with other options (a resumed sweep must not
    mix two configurations)."""
    from ftrun import layout

    p = sweep_dir / cell.name / CELL_RESULT
    if not p.is_file():
        return None
    try:
        rec = layout.read_sweep_cell(p)
    except BadInput as e:
        raise BadInput(f"--resume: {e}") from None
    now = {
        k: v for k, v in json.loads(json.dumps(_differing(cell.config))).items() if k != "out"
    }  # as the file spells it
    then = {k: v for k, v in rec.config.items() if k != "out"}
    if then != now:
        key = next(k for k in sorted(set(now) | set(then)) if now.get(k) != then.get(k))
        raise BadInput(
            f"--resume: cell {cell.name} was trained with {key} = {then.get(key)!r}, this sweep asks for "
            f"{now.get(key)!r} (give the same options, or another --name)"
        )
    run_dir = sweep_dir / cell.name
    fresh = evaluate(cell, run_dir, 1 if rec.verdict == "crashed" else 0, "")
    if fresh["verdict"] == "crashed" and rec.verdict == "crashed" and rec.problem:
        fresh["problem"] = rec.problem  # the training's own error line, from when it ran
    res = {
        "name": cell.name,
        "params": cell.params,
        "run_dir": str(run_dir),
        **fresh,
        "wall_s": rec.wall_s,
        "config": rec.config,
    }
    if fresh["verdict"] != rec.verdict:
        res["recorded_verdict"] = rec.verdict
        res["problem"] = (
            f"re-checked on --resume (recorded {rec.verdict}): {fresh.get('problem') or 'now ' + fresh['verdict']}"
        )
    return res


def plan(
    preset: str | None, axes_text: list[str], shared: dict[str, Any], file_values: dict | None, sweep_dir: Path
) -> tuple[list[grid.Axis], dict[str, Any], list[grid.Cell], list[str]]:
    """Axes, the shared values (user's + preset's), the classified cells, notes. ``BadInput`` on bad input."""
    from ftrun.launch.preflight import has_cuda_device, why_unavailable

    notes: list[str] = []
    user_axes = [grid.parse_axis(t) for t in axes_text]
    from ftrun.torchft_compat import installed, process_group_backends

    p_axes, p_shared = (
        grid.preset_axes(
            preset, {**(file_values or {}), **shared}, has_cuda_device(), process_group_backends(installed())
        )
        if preset
        else ([], {})
    )
    axes = grid.merge_axes(p_axes, user_axes)
    grid.check_shared(axes, shared)
    keys = {a.key for a in axes}
    for k, v in p_shared.items():
        if k not in keys and shared.get(k) is None and k not in (file_values or {}):
            shared[k] = v
    if preset == "tau" and "link" not in keys and not shared.get("link") and not (file_values or {}).get("link"):
        from ftrun.commands.compare import default_link
        from ftrun.launch.placement import threads_per_rank
        from ftrun.link_spec import SYNC_SHARE

        base = build(file_values=file_values, **shared, **{a.key: a.values[0] for a in axes})  # the grid's first cell
        ranks = base.hosts.replicas * base.hosts.nproc_per_replica
        spec, calib = default_link(base, threads_per_rank(ranks))
        shared["link"] = spec.as_flag()
        notes.append(
            f"link {spec.describe()} (emulated): compare's default, plain DiLoCo's sync ~ {SYNC_SHARE:g} of H "
            f"steps of the calibrated step {calib['calibrated_step_s'] * 1e3:.1f} ms"
        )
    cells = grid.product(axes)

    def cell_config(params: dict[str, Any]):
        return build(
            file_values=file_values, **{**shared, **params, "out": str(sweep_dir), "run_name": grid.cell_name(params)}
        )

    grid.classify(cells, cell_config, why_unavailable)
    if all(c.status == "invalid" for c in cells):  # a shared flag (or every value) breaks a rule
        raise BadInput(f"sweep: every cell is invalid, e.g. {cells[0].name}: {cells[0].reason}")
    for c in cells:  # each cell's run dir: DIR/NAME/CELL
        if c.config is not None:
            c.config.out, c.config.run_name = str(sweep_dir), c.name
    return axes, shared, cells, notes


def sweep(
    preset: str | None,
    axes_text: list[str],
    opts: Any,
    config: str | None,
    name: str | None,
    parallel: int,
    resume: bool,
    metric: str,
    json_out: bool,
    junit: Path | None = None,
) -> int:
    """``opts``: the ``Overrides`` of sweep's config flags: shared by every cell, but ``out``: the sweep's root.
    A sweep holds its dir's lock (``ftrun.dir_lock``) for its life: a second sweep or ``--resume``
    on the same dir meanwhile is refused (``BadInput`` naming the holder's pid)."""
    from ftrun.report import sweep_view as view

    if parallel < 1:
        raise BadInput(f"--parallel {parallel}: must be at least 1")
    if metric not in view.METRICS:
        raise BadInput(f"--metric {metric}: choose from {', '.join(view.METRICS)}")
    from ftrun.torchft_compat import require_supported

    require_supported()  # once here, not once per cell
    name = check_name("--name", name or f"sweep-{preset or 'axes'}-{time.strftime('%Y%m%d-%H%M%S')}")
    sweep_dir = Path(opts.out or "profiles") / name
    if sweep_dir.exists() and not resume:
        raise BadInput(f"sweep: {sweep_dir} already exists (pass --resume to finish it, or another --name)")
    if resume and not (sweep_dir / CELLS).is_dir():
        raise BadInput(f"--resume: {sweep_dir} holds no sweep to resume")
    # one sweep per dir for the sweep's life: a --resume of a live sweep would retrain (and
    # remove, --overwrite) a cell the live one just trained but has not recorded yet
    with DirLock() as lock:
        if resume:
            lock.take(sweep_dir, "--resume")
        return _sweep(preset, axes_text, opts, config, name, sweep_dir, parallel, resume, metric, json_out, junit, lock)


def _sweep(
    preset: str | None,
    axes_text: list[str],
    opts: Any,
    config: str | None,
    name: str,
    sweep_dir: Path,
    parallel: int,
    resume: bool,
    metric: str,
    json_out: bool,
    junit: Path | None,
    lock: DirLock,
) -> int:
    """``sweep``'s work once its options are checked; a new sweep takes ``lock`` once its dir exists."""
    from ftrun import config as cfgmod
    from ftrun.report import sweep_view as view

    if junit is not None:  # the sweep dir is ftrun's (cells, --resume): the report goes elsewhere
        check_target(junit, "--junit", inputs=[Path(config)] if config else [], reading=[sweep_dir])
        check_writable(junit, "--junit")  # nor onto a user's file (ftrun.output)
    file_values = cfgmod.load_toml(config) if config else None
    shared = {k: v for k, v in cfgmod.given(opts).items() if k != "out"}  # by key, as the grid's cells (ftrun.grid)
    axes, shared, cells, notes = plan(preset, axes_text, shared, file_values, sweep_dir)
    if parallel > 1:
        notes.append(
            f"--parallel {parallel}: cells ran {parallel} at a time on {os.cpu_count()} CPUs, so their timing "
            "figures (steps/s, exposed communication) are distorted by each other"
        )
    if resume:
        mark_output_dir(sweep_dir, "--resume")  # the sweep being finished: ftrun's (it holds cells/)
    else:
        claim_output_dir(sweep_dir, "sweep", SWEEP_FILES)
        lock.take(sweep_dir, "sweep")
    (sweep_dir / CELLS).mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Any]] = {}
    for c in cells:
        if c.status != "run":
            results[c.name] = {
                "name": c.name,
                "params": c.params,
                "verdict": c.status,
                "problem": c.reason,
                "run_dir": None,
            }
        elif resume and (done := finished(sweep_dir, c)) is not None:
            results[c.name] = {**done, "resumed": True}
    todo = [c for c in cells if c.status == "run" and c.name not in results]
    if resume:
        resumed = sum(1 for r in results.values() if r.get("resumed"))
        notes.append(f"--resume: {resumed} finished cell(s) kept, {len(todo)} run now")

    def assemble() -> dict[str, Any]:
        listed = [
            results.get(c.name)
            or {
                "name": c.name,
                "params": c.params,
                "verdict": "not run",
                "problem": "stopped before it finished",
                "run_dir": None,
            }
            for c in cells
        ]
        counts: dict[str, int] = {}
        for r in listed:
            counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
        return {
            "sweep_dir": str(sweep_dir),
            "name": name,
            "preset": preset,
            "axes": [{"key": a.key, "values": list(a.values)} for a in axes],
            "shared": {k: v for k, v in shared.items()},
            "metric": metric,
            "parallel": parallel,
            "machine": machine(),
            "versions": versions(),
            "notes": notes,
            "counts": counts,
            "cells": listed,
        }

    runner = Runner(sweep_dir)
    try:
        _run_all(runner, todo, results, parallel, json_out, view)
    except KeyboardInterrupt as e:
        runner.stop()
        result = assemble()
        atomic_write(sweep_dir / "sweep.json", report_json(result))
        kept = sum(1 for c in cells if c.status == "run" and c.name in results)
        raise Interrupted(
            f"stopped by {e or 'SIGINT'}; trainings stopped; {kept} finished cell(s) kept in {sweep_dir} "
            "(ftrun sweep --resume ... to finish)"
        ) from None
    result = assemble()
    try:
        result["picture"] = str(view.draw(result, sweep_dir / "sweep.png", metric))
    except Exception as e:  # a picture is not worth losing the sweep's results
        result["picture"] = None
        result["notes"].append(f"no picture: {type(e).__name__}: {e}")
    code = grid.exit_code(result["cells"])
    result["exit_code"] = code
    atomic_write(sweep_dir / "sweep.json", report_json(result))
    atomic_write(sweep_dir / "sweep.md", view.markdown(result))
    if junit is not None:
        from ftrun.report.junit import sweep_junit

        atomic_write(junit, sweep_junit(result), "--junit")
    if json_out:
        print(report_json(result))
    else:
        view.print_sweep(result)
    if code:
        from ftrun.console import console, line

        err = console(stderr=True, soft_wrap=True)
        failing = [r for r in result["cells"] if r["verdict"] not in ("pass", "invalid", "unavailable")]
        for r in failing:
            err.print(line((f"{r['verdict']}: ", "bold red"), r["name"], ": ", r.get("problem") or ""))
        if not failing:
            err.print(line(("error: ", "bold red"), "no cell of this grid can run on this host"))
    return code


def _run_all(runner: Runner, todo: list[grid.Cell], results: dict, parallel: int, json_out: bool, view) -> None:
    """Run ``todo`` ``parallel`` at a time with a progress bar (ETA from the measured cell times)
    and one line per finished cell."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from ftrun.console import console

    if not todo:
        return
    err = console(stderr=True)  # at its width (80 in a log): a long problem wraps, nothing is cut
    progress = Progress(
        TextColumn("sweep"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=err,
        disable=json_out,
        transient=True,
    )
    with progress, ThreadPoolExecutor(max_workers=parallel) as pool:
        task = progress.add_task("cells", total=len(todo))
        pending = {pool.submit(run_cell, runner, c): c for c in todo}
        done_n = 0
        try:
            while pending:
                done, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                for f in done:
                    c = pending.pop(f)
                    res = f.result()
                    if res is None:
                        continue
                    results[c.name] = res
                    done_n += 1
                    progress.advance(task)
                    if not json_out:
                        progress.console.print(view.cell_line(res, done_n, len(todo)))
        except BaseException:
            for f in pending:
                f.cancel()
            runner.stop()  # before the pool waits for its threads: their trainings must end
            raise
