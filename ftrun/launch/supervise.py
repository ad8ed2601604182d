"""Watch the replica groups of a run: restarts, lost groups, the watchdog, stopping. Torch-free.

A group that exits non-zero is relaunched while it has restarts left (``--restarts``); a group
killed on purpose with none left is *lost* and the others carry on; any other exit fails the
run (naming the group, its error and its log) and the rest is stopped. A group that makes no
progress for ``--stall-timeout`` seconds fails the run; among stalled groups the one stuck
outside torchft's waits is blamed (``ftrun.worker.whereabouts``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from ftrun import layout
from ftrun.config import RunConfig
from ftrun.errors import RunFailed
from ftrun.launch import policy
from ftrun.launch.chaos import ChaosMonkey
from ftrun.launch.diagnose import failure_cause, last_line, read_log
from ftrun.launch.groups import Group, Lighthouse
from ftrun.launch.native_store import NativeStore
from ftrun.launch.procs import stop_tree
from ftrun.launch.progress import EventLogTail, GroupProgress, update
from ftrun.launch.spares import SparePool, stop_spares, take_over
from ftrun.worker import whereabouts

log = logging.getLogger(__name__)


@dataclass
class RunState:
    cfg: RunConfig
    run_dir: Path
    job_id: str
    groups: list[Group] = field(default_factory=list)
    lighthouse: Lighthouse | None = None
    native_store: NativeStore | None = None  # --backend gloo-native's bootstrap store (launch.native_store)
    progress: dict[int, GroupProgress] = field(default_factory=dict)
    tails: dict[int, EventLogTail] = field(default_factory=dict)
    started: float = 0.0
    ended: float = 0.0
    failures: list[str] = field(default_factory=list)
    lost: dict[int, str] = field(default_factory=dict)  # replica -> fault that killed it for good
    run_event_log: Path | None = None  # events/run.jsonl
    network: layout.Network | None = None  # how other hosts reach this host's groups (launch.network)
    spares: SparePool | None = None  # the warm spares (--spares; launch.spares), None without
    chaos: ChaosMonkey | None = None  # --chaos: the faults it fires (launch.chaos)

    def log_run_event(self, event: str, **fields) -> None:
        """Run-level event log (events/run.jsonl): group exits, restarts, watchdog, stop. A write
        that fails (a full disk) fails the run with one line (``RunFailed``): the run's record
        of what happened would be incomplete, so it must not go on as if it were not."""
        rec = layout.RunEvent(event=event, t=time.time(), **fields)
        path = self.run_event_log
        assert path is not None  # commands/train makes every RunState with its run event log
        try:
            with path.open("a") as f:
                f.write(layout.to_json(rec) + "\n")
        except OSError as e:
            raise RunFailed(
                f"cannot write {self.run_event_log} ({e.strerror or e}); the run stopped, partial run in {self.run_dir}"
            ) from None
        log.info("%s %s", event, " ".join(f"{k}={v}" for k, v in fields.items()))

    def fail(self, message: str) -> None:
        """The run failed: ``message`` is the one line the user sees."""
        self.failures.append(message)
        log.error("%s", message)


def group_error(
    run_dir: Path, replica: int, ranks: int, since: int = 0, log_path: Path | None = None
) -> tuple[str, str | None]:
    """(reason, phase): the first error a rank of the group wrote to its meta file and the
    torchft wait it failed in (``quorum``, ``sync``, ``step``). A rank that died before it could
    write one (killed, or failed before Python ran ftrun): its log's ``failure_cause`` (``log_path``,
    default the group's log — a spare that took the group over writes its own — from byte
    ``since``: the last incarnation), phase None."""
    for g in range(ranks):
        meta = layout.read_rank_meta(layout.meta_file(run_dir, replica, g))
        if meta is not None and meta.error:
            return meta.error, meta.phase
    text = read_log(log_path or layout.group_log(run_dir, replica), since)
    if text is None:
        return "", None
    return failure_cause(text) or "no error message in the log", None


def _fired_fault(run_dir: Path, replica: int) -> str | None:
    for f in layout.read_fault_markers(run_dir):
        if f.replica == replica and f.action in ("kill", "sigterm"):
            return f"{'SIGKILL' if f.action == 'kill' else 'SIGTERM'} at step {f.step}"
    return None


EXIT_POLL_S = 0.01  # how often the supervisor's tick looks for a launcher's exit (a waitpid per group)

PHASES = {
    "step": "computing, not in a torchft wait",
    "quorum": "waiting for a quorum",
    "sync": "waiting in a fragment sync",
}


def _culprit(state: RunState, r: int, pending: dict, last_progress: dict, now: float) -> int:
    """Among stalled groups, blame one that is stuck outside torchft's waits (the others wait for it)."""
    stalled = [k for k in pending if now - last_progress[k] > state.cfg.timeouts.stall_timeout_s * 0.5]
    for k in stalled:
        w = whereabouts.read(state.run_dir, k)
        if w is not None and w[1] == "step":
            return k
    return r


def supervise(state: RunState, on_tick) -> None:
    """Wait for every group. A group that dies is restarted while it has restarts left
    (``--restarts``), else the run fails (and the rest is stopped). A group that makes no
    progress for ``--stall-timeout`` seconds fails the run (the watchdog)."""
    cfg = state.cfg
    pending = {g.replica: g for g in state.groups}
    last_progress = {r: time.monotonic() for r in pending}
    started: set[int] = set()  # groups that logged a step: before that, start-up (imports, first quorum) is slow
    startup_grace_s = max(cfg.timeouts.stall_timeout_s, 180.0)
    gate = Path(cfg.hosts.start_gate) if cfg.hosts.start_gate else None  # parked groups (ftrun.worker.park)
    while pending:
        now = time.monotonic()
        if gate is not None:
            if gate.exists():  # the go: the run (its wall time, the watchdog) starts now
                gate, state.started = None, time.time()
            last_progress = dict.fromkeys(last_progress, now)
        _read_progress(state, last_progress, started, now)
        on_tick(state)
        for s in state.spares.exited() if state.spares is not None else []:  # never assigned: not replaced
            state.log_run_event("spare_exit", spare=s.replica, code=s.process.returncode)
        if state.chaos is not None:
            state.chaos.tick(state.groups)
        if (dead := policy.lighthouse_failed(state.lighthouse)) is not None:
            state.fail(dead)
            return
        for r, g in sorted(pending.items(), key=lambda kv: last_progress[kv[0]]):
            code = g.process.poll()
            if code is None:
                if now - last_progress[r] > (cfg.timeouts.stall_timeout_s if r in started else startup_grace_s):
                    r = _culprit(state, r, pending, last_progress, now)
                    state.log_run_event(
                        "stall", replica=r, step=state.progress[r].step, seconds=cfg.timeouts.stall_timeout_s
                    )
                    state.fail(_stall_message(state, r, pending))
                    return
                continue
            failure = _on_exit(state, r, g, code, pending)
            if failure is not None:
                state.fail(failure)
                return
            if r in pending:  # relaunched: its start-up grace and progress clock begin again
                started.discard(r)
                last_progress[r] = time.monotonic()
        if pending:  # (the last group's exit ends the wait at once: a short run's result waits on it)
            _nap(list(pending.values()), 0.2)


def _read_progress(state: RunState, last_progress: dict[int, float], started: set[int], now: float) -> None:
    """Each group's new log lines: its progress record, its last-progress time, whether it has
    logged a step yet; the chaos driver sees them too."""
    for r, tail in state.tails.items():
        new = tail.read_new()
        if new:
            last_progress[r] = now
            started.add(r)
        update(state.progress[r], new)
        if state.chaos is not None:
            state.chaos.saw(r, new)


def _stall_message(state: RunState, r: int, pending: dict[int, Group]) -> str:
    """The watchdog's line for group ``r``: where it is stuck, who waits for it, its last log line."""
    g, step = pending[r], state.progress[r].step
    where = whereabouts.read(state.run_dir, r)
    inside = f", inside step {where[0]} ({PHASES.get(where[1], where[1])})" if where else ""
    waiting = [
        k for k in pending if k != r and (whereabouts.read(state.run_dir, k) or (0, ""))[1] in ("quorum", "sync")
    ]
    return (
        f"replica group {r} made no progress for {state.cfg.timeouts.stall_timeout_s:g} s "
        f"(stuck after step {step}{inside})"
        + (f"; group(s) {', '.join(map(str, waiting))} wait for it in torchft" if waiting else "")
        + f"; last log line: {last_line(read_log(g.log) or '')!r}; see {g.log}"
    )


def _on_exit(state: RunState, r: int, g: Group, code: int, pending: dict[int, Group]) -> str | None:
    """Group ``r``'s launcher exited with ``code``: done (removed from ``pending``), relaunched (on
    a warm spare when one is ready; stays pending), lost by an injected fault (removed), or the
    run's failure line (returned)."""
    g.exit_codes.append(code)
    update(state.progress[r], state.tails[r].read_new())  # the steps it logged before exiting
    step = state.progress[r].step
    fault = _fired_fault(state.run_dir, r)
    granted = state.chaos.restarts_granted(r) if state.chaos is not None else 0
    outcome = policy.on_exit(code, g.restarts, state.cfg.faults.max_restarts + granted, fault)
    if outcome == "done":
        del pending[r]
        state.log_run_event("group_done", replica=r, step=step)
        return None
    state.log_run_event("group_exit", replica=r, code=code, step=step, restarts=g.restarts)
    if outcome == "restart":
        _restart(state, r, g, step)
        return None
    if outcome == "lost" and fault is not None:  # killed on purpose, not relaunched: the others carry on
        del pending[r]
        state.lost[r] = fault
        state.log_run_event("group_lost", replica=r, step=step, fault=fault)
        return None
    return _failure(state, r, g, code, len(pending))


def _restart(state: RunState, r: int, g: Group, step: int) -> None:
    """Relaunch group ``r``: a warm spare takes its replica id when one is ready, else its own
    launcher starts again."""
    pool = state.spares
    spare = pool.choose() if pool is not None else None
    if pool is None or spare is None:
        policy.relaunch(g)
        state.log_run_event("restart", replica=r, incarnation=g.restarts, after_step=step)
    else:  # a warm spare takes the replica id (logged first: the relaunch starts here)
        state.log_run_event("restart", replica=r, incarnation=g.restarts + 1, after_step=step, spare=spare.replica)
        take_over(pool, spare, g)


def _failure(state: RunState, r: int, g: Group, code: int, alive: int) -> str:
    """The run's failure line for group ``r``'s exit: below --min-replicas after lost groups, or
    the group's own error (an unreachable remote lighthouse named first)."""
    cfg = state.cfg
    reason, phase = group_error(state.run_dir, r, cfg.hosts.nproc_per_replica, g.log_offset, g.log)
    if state.lighthouse is None and cfg.hosts.lighthouse:  # another host's lighthouse: is it still there?
        from ftrun.launch.lighthouse import unreachable

        gone = unreachable(cfg.hosts.lighthouse, 3.0)
        if gone:
            reason = f"the lighthouse {cfg.hosts.lighthouse} does not answer ({gone}); {reason}"
    if state.lost and alive < cfg.hosts.min_replicas and phase == "quorum":
        return (
            f"no quorum: {alive} replica group(s) alive but --min-replicas is {cfg.hosts.min_replicas} after "
            + ", ".join(f"group {k} was lost ({v})" for k, v in state.lost.items())
            + f"; replica group {r} gave up after --quorum-timeout {cfg.timeouts.quorum_timeout_s:g} s "
            + f"({reason}); see {g.log}"
        )
    at = f"at step {state.progress[r].step} (manager step {state.progress[r].manager_step})"
    return policy.group_failed(r, code, g.restarts, reason, g.log, at=at)


def _nap(groups: list[Group], seconds: float) -> None:
    """Sleep up to ``seconds``, ending early when a group's launcher exits: a restart (a warm
    spare's above all) begins within ``EXIT_POLL_S`` of the exit, not up to a whole tick later."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if any(g.process.poll() is not None for g in groups):
            return
        time.sleep(EXIT_POLL_S)


def stop_all(state: RunState) -> None:
    stop_spares(state.spares)
    for g in state.groups:
        if g.proc is not None:
            stop_tree(g.proc)
    if state.lighthouse is not None:
        stop_tree(state.lighthouse.proc, grace_s=1.0)
    if state.native_store is not None and state.native_store.proc is not None:
        stop_tree(state.native_store.proc, grace_s=1.0)
