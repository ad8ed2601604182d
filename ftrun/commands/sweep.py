"""``ftrun sweep``: the conformance and tuning matrix. Torch-free (each cell trains in a child).

Parse: the axes (a preset's and ``--axis``'s, ``ftrun.grid``), their product, each cell
``invalid`` (``ftrun.config.build`` refuses it: torchft's rule or ftrun's), ``unavailable``
(``ftrun.launch.preflight.why_unavailable``) or to run (``ftrun.sweep.cells.plan``).
Call: ``ftrun.sweep`` trains each cell to run in a child (``ftrun.sweep.runner``), checks it
(``ftrun.sweep.evaluate``) and writes its result to ``CELL/sweep-cell.json``; ``--resume`` re-checks cells that hold one
(``ftrun.sweep.resume``); a sweep locks its dir for its life (``ftrun.dir_lock``), so a
``--resume`` of a sweep still running is refused. Render: ``sweep.json``, ``sweep.md``,
``sweep.png``, ``--junit`` and the table. Ctrl-C / SIGTERM stops the running cells' trainings
(each stops its own children), keeps what finished, writes ``sweep.json`` and exits 130.

Exit: 0 when every cell that could run passed, 1 otherwise (each failing cell named with its
first problem), 2 on bad input.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import msgspec

from ftrun import grid, layout
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
)
from ftrun.sweep.cells import plan
from ftrun.sweep.record import sweep_result
from ftrun.sweep.resume import known_results
from ftrun.sweep.runner import CELLS, Runner, run_all

SWEEP_FILES = ("sweep.json", "sweep.md", "sweep.png")


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
    warm_start: bool = False,
) -> int:
    """``opts``: the ``Overrides`` of sweep's config flags: shared by every cell, but ``out``: the sweep's root.
    A sweep holds its dir's lock (``ftrun.dir_lock``) for its life: a second sweep or ``--resume``
    on the same dir meanwhile is refused (``BadInput`` naming the holder's pid)."""
    from ftrun.report import sweep_view as view

    if parallel < 1:
        raise BadInput(f"--parallel {parallel}: must be at least 1")
    if warm_start and parallel > 1:
        raise BadInput(f"--warm-start with --parallel {parallel}: warm starts run the cells one at a time")
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
        return _sweep(
            preset,
            axes_text,
            opts,
            config,
            name,
            sweep_dir,
            parallel,
            resume,
            metric,
            json_out,
            junit,
            warm_start,
            lock,
        )


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
    warm_start: bool,
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
    results = known_results(sweep_dir, cells, resume)
    todo = [c for c in cells if c.status == "run" and c.name not in results]
    if resume:
        resumed = sum(1 for r in results.values() if r.resumed is True)
        notes.append(f"--resume: {resumed} finished cell(s) kept, {len(todo)} run now")

    def assemble() -> layout.SweepResult:
        return sweep_result(
            cells,
            results,
            sweep_dir=sweep_dir,
            name=name,
            preset=preset,
            axes=axes,
            shared=shared,
            metric=metric,
            parallel=parallel,
            notes=notes,
        )

    if warm_start:
        notes.append(
            "--warm-start: each cell's successor started (imports, model) while it trained, so its timing "
            f"figures (steps/s, exposed communication) are distorted where {os.cpu_count()} CPUs are not to spare"
        )
    # every cell's groups' agents forked from one zygote, which imports torch and torchft once
    runner = Runner(sweep_dir, todo if warm_start else None, share_imports=bool(todo))
    try:
        run_all(runner, todo, results, parallel, json_out, view.cell_line)
        runner.close()
    except KeyboardInterrupt as e:
        runner.stop()
        result = assemble()
        atomic_write(sweep_dir / layout.SWEEP_JSON, report_json(result))
        kept = sum(1 for c in cells if c.status == "run" and c.name in results)
        raise Interrupted(
            f"stopped by {e or 'SIGINT'}; trainings stopped; {kept} finished cell(s) kept in {sweep_dir} "
            "(ftrun sweep --resume ... to finish)"
        ) from None
    return _finish(assemble(), sweep_dir, metric, json_out, junit)


def _finish(result: layout.SweepResult, sweep_dir: Path, metric: str, json_out: bool, junit: Path | None) -> int:
    """A finished sweep's outputs: its picture, then sweep.json (with the picture and the exit
    code), sweep.md, ``--junit``, the table (or ``--json``) and each failing cell on stderr.
    Returns the exit code (``grid.exit_code``)."""
    from ftrun.report import sweep_view as view

    picture: str | None
    try:
        picture = str(view.draw(result, sweep_dir / "sweep.png", metric))
    except Exception as e:  # a picture is not worth losing the sweep's results
        picture = None
        result.notes.append(f"no picture: {type(e).__name__}: {e}")
    code = grid.exit_code([c.verdict for c in result.cells])
    result = msgspec.structs.replace(result, picture=picture, exit_code=code)
    atomic_write(sweep_dir / layout.SWEEP_JSON, report_json(result))
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
        failing = [r for r in result.cells if r.verdict not in ("pass", "invalid", "unavailable")]
        for r in failing:
            err.print(line((f"{r.verdict}: ", "bold red"), r.name, ": ", r.problem or ""))
        if not failing:
            err.print(line(("error: ", "bold red"), "no cell of this grid can run on this host"))
    return code
