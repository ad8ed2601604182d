"""Warm spare groups (``ftrun train --spares N``): the parent's side. Torch-free.

A spare is one more torchrun job of the worker, started with ``FTRUN_SPARE=K`` (its slot)
instead of a replica id; it builds itself and waits outside torchft (``ftrun.worker.spare``).
The parent alone decides who holds a replica id: when group R must restart, it picks a
waiting spare (``SparePool.choose``: a ready one first, else one still starting,
lowest slot first), writes its assignment once, and the group's ``Group`` record from then on
watches the spare's processes; the relaunch R would have had is started as the next spare
(``SparePool.start``). R's old processes have exited by then (the supervisor acts on the
launcher's exit, and the ranks die with it), so at any time one job holds a replica id.
Every spare is a child like the groups, stopped with them (``stop_spares``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ftrun import layout
from ftrun.launch.groups import Group
from ftrun.launch.procs import stop_tree
from ftrun.worker.spare import ENV_SPARE, SpareAssignment, ready_ranks, write_assignment


def spare_log(run_dir: Path, slot: int) -> Path:
    return run_dir / layout.LOGS / f"spare{slot}.log"


@dataclass
class SparePool:
    """The waiting spares of one run, by slot. ``template``: a group of the run whose command
    line and environment a spare runs with (its replica id replaced by ``FTRUN_SPARE``)."""

    run_dir: Path
    ranks: int  # ranks per group: a spare is ready when all of them wait
    template: Group | None = None
    waiting: list[Group] = field(default_factory=list)  # Group.replica holds the slot
    next_slot: int = 0

    def start(self) -> Group:
        """Start one more spare in a new slot (``template``'s command, its own log)."""
        assert self.template is not None, "SparePool.start needs the run's template group"
        slot = self.next_slot
        self.next_slot += 1
        env = dict(self.template.env)
        env.pop(layout.ENV_REPLICA, None)
        env.pop(layout.ENV_RESTART, None)
        env[ENV_SPARE] = str(slot)
        spare = Group(
            slot,
            list(self.template.argv),
            env,
            spare_log(self.run_dir, slot),
            cwd=self.template.cwd,
            fork=self.template.fork,
        )
        self.waiting.append(spare)  # before start(): a signal in between must not orphan it
        spare.start()
        return spare

    def choose(self, ready: Callable[[int], bool] | None = None) -> Group | None:
        """The spare to take over next: among the live waiting spares, the lowest ready slot,
        else the lowest still starting (it is further along than a fresh relaunch); None: none."""
        is_ready = ready or (lambda slot: ready_ranks(self.run_dir, slot, self.ranks))
        live = [s for s in self.waiting if s.proc is not None and s.proc.poll() is None]
        return next((s for s in live if is_ready(s.replica)), live[0] if live else None)

    def exited(self) -> list[Group]:
        """The waiting spares whose launcher exited (taken out of the pool)."""
        gone = [s for s in self.waiting if s.proc is not None and s.proc.poll() is not None]
        self.waiting = [s for s in self.waiting if s not in gone]
        return gone


def assign(pool: SparePool, spare: Group, g: Group, now: float) -> SpareAssignment:
    """Hand ``spare`` group ``g``'s replica id as its next incarnation: the assignment file
    first (written once; ``write_assignment`` refuses a second), then ``g`` watches the spare's
    processes and log. The spare leaves the pool."""
    a = SpareAssignment(slot=spare.replica, replica=g.replica, incarnation=g.restarts + 1, t=now)
    write_assignment(pool.run_dir, a)
    pool.waiting.remove(spare)
    g.restarts = a.incarnation
    g.env[layout.ENV_RESTART] = str(a.incarnation)  # a later plain relaunch numbers on from here
    g.proc, g.log, g.log_offset = spare.proc, spare.log, spare.log_offset
    return a


def take_over(pool: SparePool, spare: Group, g: Group) -> SpareAssignment:
    """Group ``g`` must restart: waiting ``spare`` (``pool.choose()``) takes its replica id, and
    the relaunch ``g`` would have had starts as the next spare."""
    a = assign(pool, spare, g, time.time())
    pool.start()
    return a


def stop_spares(pool: SparePool | None) -> None:
    """Stop every waiting spare's process tree (a taken-over one is stopped as its group)."""
    if pool is None:
        return
    for s in pool.waiting:
        if s.proc is not None:
            stop_tree(s.proc)
