"""Each cell of a sweep trained as a real ``ftrun train --config DIR/NAME/cells/CELL.toml --json``
in a child process (its run dir ``DIR/NAME/CELL``), ``parallel`` at a time; ``Runner.stop()``
(any thread) stops every running training, each stopping its own children. With ``--warm-start``
the next cell's training starts while a cell trains, parked at its start gate (``Runner``). Torch-free."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from ftrun import grid, layout
from ftrun.launch import zygote
from ftrun.output import atomic_write, wait_until_unlocked
from ftrun.parent_death import die_with_this_process
from ftrun.sweep.evaluate import evaluate
from ftrun.sweep.record import ran_on

if TYPE_CHECKING:
    from rich.text import Text

    from ftrun.config import RunConfig

CELL_RESULT = layout.SWEEP_CELL
CELLS = "cells"  # DIR/NAME/cells/CELL.toml (its configuration) and CELL.log (the training's output)
STOP_WAIT_S = 60.0


def cell_toml(values: dict[str, layout.ConfigValue]) -> str:
    """A flat TOML document of strings, numbers, booleans and lists of strings (JSON spells them
    as TOML does)."""
    return "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items())


def differing(cfg: RunConfig) -> dict[str, layout.ConfigValue]:
    """The fields of ``cfg`` that differ from ``RunConfig()``'s, plus mode, out and run name."""
    from ftrun.config import RunConfig

    default = RunConfig().resolved()
    keep = ("mode", "out", "run_name")
    return {k: v for k, v in cfg.resolved().items() if k in keep or v != default[k]}


class Runner:
    """Runs cells' trainings as children; ``stop()`` (any thread) stops every running one.

    Warm (``warm_order``: the cells in the order they run, one at a time): when a cell starts, the
    next one's ``ftrun train`` starts too with a start gate (``HostsConfig.start_gate``,
    ``cells/CELL.gate``): its lighthouse and groups start, build the model and park before their
    torchft Manager (``ftrun.worker.park``); the gate file opens when its turn comes; only the
    start-up overlaps. With ``share_imports`` (warm or not) the groups' agents are forked by one
    zygote for the sweep (``ftrun.launch.zygote``, started here, stopped by ``close``/``stop``),
    which imported torch and torchft once. Each cell is still its own run: its own ``ftrun
    train``, lighthouse, torchrun agents (each in its own session), ranks, process groups and run dir."""

    def __init__(self, sweep_dir: Path, warm_order: list[grid.Cell] | None = None, share_imports: bool = False) -> None:
        self.sweep_dir = sweep_dir
        self.procs: dict[str, subprocess.Popen[str]] = {}  # running or parked, by cell name
        self.parked: set[str] = set()  # started warm, waiting at their gates
        self.lock = threading.Lock()
        self.stopping = False
        self.warm_order = warm_order
        self.zygote = _start_zygote(sweep_dir) if share_imports else None

    def gate(self, name: str) -> Path:
        return self.sweep_dir / CELLS / f"{name}.gate"

    def is_parked(self, name: str) -> bool:
        with self.lock:
            return name in self.parked

    def _spawn(self, cell: grid.Cell, gated: bool) -> subprocess.Popen[str] | None:
        """Write the cell's config and start ``ftrun train`` on it (None once stopping)."""
        cells = self.sweep_dir / CELLS
        cfg_path, log_path = cells / f"{cell.name}.toml", cells / f"{cell.name}.log"
        assert cell.config is not None  # (a cell that runs)
        values = differing(cell.config)
        if gated:
            self.gate(cell.name).unlink(missing_ok=True)  # an earlier sweep's (--resume): closed again
            values["start_gate"] = str(self.gate(cell.name).resolve())
        atomic_write(cfg_path, cell_toml(values))
        env = dict(os.environ)
        if self.zygote is not None:  # its groups' agents forked from the sweep's pre-imported zygote
            env[zygote.ENV_ZYGOTE] = self.zygote.address
        # --no-check: the sweep checks every cell itself (``evaluate``), once
        cmd = [sys.executable, "-m", "ftrun.cli", "train", "--config", str(cfg_path), "--json", "--no-check"]
        if (self.sweep_dir / cell.name).exists():  # an unfinished cell of an earlier sweep (--resume)
            cmd.append("--overwrite")
        with open(log_path, "w") as log, self.lock:
            if self.stopping:
                return None
            # it dies with the sweep, even a SIGKILLed one (and stops its own children on SIGTERM);
            # the thread running the cell waits for it, so the parent-death signal is not sent early
            p = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_this_process(signal.SIGTERM),
            )
            self.procs[cell.name] = p
            if gated:
                self.parked.add(cell.name)
        return p

    def _park_next(self, cell: grid.Cell) -> None:
        """Start the cell after ``cell`` (warm), parked at its gate, unless its run dir is in use."""
        names = [c.name for c in self.warm_order or []]
        i = names.index(cell.name) + 1 if cell.name in names else len(names)
        if i >= len(names) or names[i] in self.procs:
            return
        nxt = (self.warm_order or [])[i]
        if wait_until_unlocked(self.sweep_dir / nxt.name, 0.0) is None:  # else: cold, at its turn (run_cell)
            self._spawn(nxt, gated=True)

    def train(self, cell: grid.Cell) -> tuple[int, str]:
        """Run ``ftrun train`` on the cell (or open the gate of its parked one); (exit code, its stderr)."""
        with self.lock:
            parked = cell.name in self.parked
            p = self.procs.get(cell.name) if parked else None
        if p is None:
            p = self._spawn(cell, gated=False)
            if p is None:
                return 130, "stopped"
        if self.warm_order is not None:
            self._park_next(cell)  # its start-up beside this cell's training
        if parked:
            with self.lock:
                self.parked.discard(cell.name)
            atomic_write(self.gate(cell.name), "")  # go: its groups build their Managers and train
        try:
            _, err = p.communicate()
        finally:
            with self.lock:
                self.procs.pop(cell.name, None)
        with open(self.sweep_dir / CELLS / f"{cell.name}.log", "a") as log:
            log.write(err)
        return p.returncode, err

    def stop(self) -> None:
        """SIGTERM every running or parked training (it stops its own children), wait, then SIGKILL."""
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
        self.close()

    def close(self) -> None:
        """Stop the zygote, if any (after the trainings whose agents it forked: it reports their exits)."""
        z, self.zygote = self.zygote, None
        if z is not None:
            z.stop()


def _start_zygote(sweep_dir: Path) -> zygote.Server | None:
    """The sweep's zygote (``ftrun.launch.zygote``), its output in ``cells/zygote.log``; None
    where agents are not forked (``ftrun.worker.agent.fork_safe``)."""
    if not zygote.usable():
        return None
    log_path = sweep_dir / CELLS / "zygote.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        return zygote.start(log)


def run_cell(runner: Runner, cell: grid.Cell) -> layout.SweepRow | None:
    """Train and evaluate one cell; its result (also in ``CELL/sweep-cell.json``), or None when stopped."""
    run_dir = runner.sweep_dir / cell.name
    # an earlier sweep's training, still stopping (a parked cell's own training holds it already)
    holder = None if runner.is_parked(cell.name) else wait_until_unlocked(run_dir, STOP_WAIT_S)
    if holder is not None:  # not this cell's result: nothing recorded, a later --resume runs it
        return layout.SweepRow(
            name=cell.name,
            params=cell.params,
            run_dir=str(run_dir),
            verdict="not run",
            problem=f"its run dir is still in use by pid {holder} after {STOP_WAIT_S:g} s (a training of an "
            "earlier sweep?); --resume again once it has ended",
        )
    t0 = time.monotonic()
    rc, err = runner.train(cell)
    if runner.stopping or rc in (130, -signal.SIGTERM, -signal.SIGINT):
        return None
    assert cell.config is not None  # (a cell that runs)
    torch, torchft = ran_on()
    res = msgspec.structs.replace(
        evaluate(cell, run_dir, rc, err),
        wall_s=round(time.monotonic() - t0, 2),
        config=differing(cell.config),
        torch=torch,
        torchft=torchft,
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(run_dir / CELL_RESULT, layout.to_json(sweep_cell(res), indent=1))
    return res


def sweep_cell(row: layout.SweepRow) -> layout.SweepCell:
    """A cell's ``sweep-cell.json``: its sweep.json row without what only the row holds (the
    recovery figures, ``resumed``)."""
    return layout.SweepCell(**{f: getattr(row, f) for f in layout.SweepCell.__struct_fields__})


def run_all(
    runner: Runner,
    todo: list[grid.Cell],
    results: dict[str, layout.SweepRow],
    parallel: int,
    json_out: bool,
    cell_line: Callable[[layout.SweepRow, int, int], Text],
) -> None:
    """Run ``todo`` ``parallel`` at a time with a progress bar (ETA from the measured cell times)
    and one line per finished cell (``cell_line``: ``ftrun.report.sweep_view``'s); each result lands in ``results`` by
    cell name. On any exception (Ctrl-C included) the running trainings are stopped first."""
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
                        progress.console.print(cell_line(res, done_n, len(todo)))
        except BaseException:
            for f in pending:
                f.cancel()
            runner.stop()  # before the pool waits for its threads: their trainings must end
            raise
