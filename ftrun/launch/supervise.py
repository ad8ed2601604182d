"""Watch the replica groups of a run: restarts, lost groups, the watchdog, stopping. Torch-free.

A group that exits non-zero is relaunched while it has restarts left (``--restarts``); a group
killed on purpose with none left is *lost* and the others carry on; any other exit fails the
run (naming the group, its error and its log) and the rest is stopped. A group that makes no
progress for ``--stall-timeout`` seconds fails the run; among stalled groups the one stuck
outside torchft's waits is blamed (``ftrun.worker.whereabouts``).
"""

from __future__ import annotations

import json
import logging
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from ftrun import layout
from ftrun.config import RunConfig
from ftrun.errors import RunFailed
from ftrun.launch.groups import Group, Lighthouse
from ftrun.launch.procs import stop_tree
from ftrun.launch.progress import EventLogTail, GroupProgress, update
from ftrun.worker import whereabouts

log = logging.getLogger(__name__)


@dataclass
class RunState:
    cfg: RunConfig
    run_dir: Path
    job_id: str
    groups: list[Group] = field(default_factory=list)
    lighthouse: Lighthouse | None = None
    progress: dict[int, GroupProgress] = field(default_factory=dict)
    tails: dict[int, EventLogTail] = field(default_factory=dict)
    started: float = 0.0
    ended: float = 0.0
    failures: list[str] = field(default_factory=list)
    lost: dict[int, str] = field(default_factory=dict)  # replica -> fault that killed it for good
    run_event_log: Path | None = None  # events/run.jsonl
    network: layout.Network | None = None  # how other hosts reach this host's groups (launch.network)

    def log_run_event(self, event: str, **fields) -> None:
        """Run-level event log (events/run.jsonl): group exits, restarts, watchdog, stop. A write
        that fails (a full disk) fails the run with one line (``RunFailed``): the run's record
        of what happened would be incomplete, so it must not go on as if it were not."""
        rec = layout.RunEvent(event=event, t=time.time(), **fields)
        try:
            with self.run_event_log.open("a") as f:
                f.write(layout.to_json(rec) + "\n")
        except OSError as e:
            raise RunFailed(f"cannot write {self.run_event_log} ({e.strerror or e}); the run stopped, "
                            f"partial run in {self.run_dir}") from None
        log.info("%s %s", event, " ".join(f"{k}={v}" for k, v in fields.items()))

    def fail(self, message: str) -> None:
        """The run failed: ``message`` is the one line the user sees."""
        self.failures.append(message)
        log.error("%s", message)


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    errs = [ln for ln in lines if ("Error" in ln or "error" in ln) and not _is_banner(ln)]
    return (errs or lines or [""])[-1].strip()[:300]


# torchrun's own report of a failed child: never the cause
_BANNER = ("To enable traceback see", "ChildFailedError", "error_file:", "exitcode  :", "elastic/multiprocessing")
_EXC_RE = re.compile(r"^(?:\[(?:rank|default)\d*\]:\s*)?((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Failure|Exit)\b:?.*)$")


def _is_banner(line: str) -> bool:
    return any(b in line for b in _BANNER)


def first_exception(text: str) -> str:
    """The first exception line (``SomeError: message``) of a group log, skipping torchrun's
    own failure report; else its first line naming an error; else ''."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        m = _EXC_RE.match(ln)
        if m and not _is_banner(ln):
            return m[1].strip()[:300]
    for ln in lines:
        if ("Error" in ln or "error" in ln) and not _is_banner(ln):
            return ln[:300]
    return ""


# torchrun's report of a rank that died by a signal: "rank : 1 (local_rank: 1)" then
# "exitcode : -9 (pid: 123)  (SIGKILL)"; the rank itself wrote nothing.
_RANK_RE = re.compile(r"^\s*rank\s*:\s*(\d+)\b")
_SIGNAL_EXIT_RE = re.compile(r"^\s*exitcode\s*:\s*-(\d+)\b")


def _signal_name(signum: int) -> str | None:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return None


def exit_description(code: int) -> str:
    """``exited with code N``, or ``was killed by SIGKILL (signal 9)`` for a negative code."""
    if code >= 0:
        return f"exited with code {code}"
    name = _signal_name(-code)
    return f"was killed by {name} (signal {-code})" if name else f"was killed by signal {-code}"


def rank_signal(text: str) -> str:
    """``rank R was killed by SIGKILL (signal 9)`` from torchrun's failure report in a group
    log, for the first rank that died by a signal; else ''."""
    rank = None
    for ln in text.splitlines():
        if m := _RANK_RE.match(ln):
            rank = m[1]
        elif (m := _SIGNAL_EXIT_RE.match(ln)) and rank is not None:
            return f"rank {rank} {exit_description(-int(m[1]))}"
    return ""


def failure_cause(text: str) -> str:
    """Why a group's ranks failed, from its log: a rank's death by a signal (what torchrun
    reports; the first exception line is added when there is one), else the first exception
    line; else ''."""
    exc, sig = first_exception(text), rank_signal(text)
    if sig:
        return sig + (f"; first error in the log: {exc}" if exc else "")
    return exc


def _group_error(state: RunState, replica: int, since: int = 0) -> tuple[str, str | None]:
    """(reason, phase): the first error a rank of the group wrote to its meta file and the
    torchft wait it failed in (``quorum``, ``sync``, ``step``). A rank that died before it could
    write one (killed, or failed before Python ran ftrun): its log's ``failure_cause`` (from byte
    ``since``: the last incarnation), phase None."""
    for g in range(state.cfg.hosts.nproc_per_replica):
        p = layout.meta_file(state.run_dir, replica, g)
        try:
            meta = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if meta.get("error"):
            return meta["error"], meta.get("phase")
    try:
        with layout.group_log(state.run_dir, replica).open("rb") as f:
            f.seek(since)
            text = f.read().decode(errors="replace")
    except OSError:
        return "", None
    return failure_cause(text) or "no error message in the log", None


def _fired_fault(run_dir: Path, replica: int) -> str | None:
    for f in layout.read_fault_markers(run_dir):
        if f.replica == replica and f.action in ("kill", "sigterm"):
            return f"{'SIGKILL' if f.action == 'kill' else 'SIGTERM'} at step {f.step}"
    return None


PHASES = {"step": "computing, not in a torchft wait", "quorum": "waiting for a quorum", "sync": "waiting in a fragment sync"}


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
    started = set()  # groups that logged a step: before that, start-up (imports, first quorum) is slow
    startup_grace_s = max(cfg.timeouts.stall_timeout_s, 180.0)
    while pending:
        now = time.monotonic()
        for r, tail in state.tails.items():
            new = tail.read_new()
            if new:
                last_progress[r] = now
                started.add(r)
            update(state.progress[r], new)
        on_tick(state)
        if state.lighthouse is not None and state.lighthouse.proc.poll() is not None:
            try:
                cause = first_exception(state.lighthouse.log.read_text(errors="replace"))
            except OSError:
                cause = ""
            state.fail(f"lighthouse exited with code {state.lighthouse.proc.returncode}"
                                  + (f": {cause}" if cause else "") + f"; see {state.lighthouse.log}")
            return
        for r, g in sorted(pending.items(), key=lambda kv: last_progress[kv[0]]):
            code = g.proc.poll()
            if code is None:
                if now - last_progress[r] > (cfg.timeouts.stall_timeout_s if r in started else startup_grace_s):
                    r = _culprit(state, r, pending, last_progress, now)
                    g = pending[r]
                    step = state.progress[r].step
                    where = whereabouts.read(state.run_dir, r)
                    inside = f", inside step {where[0]} ({PHASES.get(where[1], where[1])})" if where else ""
                    waiting = [k for k in pending if k != r and (whereabouts.read(state.run_dir, k) or (0, ""))[1] in ("quorum", "sync")]
                    msg = (f"replica group {r} made no progress for {cfg.timeouts.stall_timeout_s:g} s (stuck after step {step}{inside})"
                           + (f"; group(s) {', '.join(map(str, waiting))} wait for it in torchft" if waiting else "")
                           + f"; last log line: {_last_line(g.log)!r}; see {g.log}")
                    state.log_run_event("stall", replica=r, step=step, seconds=cfg.timeouts.stall_timeout_s)
                    state.fail(msg)
                    return
                continue
            g.exit_codes.append(code)
            update(state.progress[r], state.tails[r].read_new())  # the steps it logged before exiting
            step = state.progress[r].step
            if code == 0:
                del pending[r]
                state.log_run_event("group_done", replica=r, step=step)
                continue
            state.log_run_event("group_exit", replica=r, code=code, step=step, restarts=g.restarts)
            if g.restarts < cfg.faults.max_restarts:
                g.restarts += 1
                g.env["FTRUN_RESTART"] = str(g.restarts)
                g.start()
                started.discard(r)
                last_progress[r] = time.monotonic()
                state.log_run_event("restart", replica=r, incarnation=g.restarts, after_step=step)
                continue
            fault = _fired_fault(state.run_dir, r)
            if fault is not None:
                # killed on purpose and not relaunched: the others carry on if they can
                del pending[r]
                state.lost[r] = fault
                state.log_run_event("group_lost", replica=r, step=step, fault=fault)
                continue
            reason, phase = _group_error(state, r, g.log_offset)
            if state.lighthouse is None and cfg.hosts.lighthouse:  # another host's lighthouse: is it still there?
                from ftrun.launch.lighthouse import unreachable

                gone = unreachable(cfg.hosts.lighthouse, 3.0)
                if gone:
                    reason = f"the lighthouse {cfg.hosts.lighthouse} does not answer ({gone}); {reason}"
            if state.lost and len(pending) < cfg.hosts.min_replicas and phase == "quorum":
                alive = len(pending)
                state.fail(
                    f"no quorum: {alive} replica group(s) alive but --min-replicas is {cfg.hosts.min_replicas} after "
                    + ", ".join(f"group {k} was lost ({v})" for k, v in state.lost.items())
                    + f"; replica group {r} gave up after --quorum-timeout {cfg.timeouts.quorum_timeout_s:g} s ({reason}); see {g.log}"
                )
                return
            state.fail(
                f"replica group {r} {exit_description(code)} at step {step} (manager step {state.progress[r].manager_step})"
                + (f" after {g.restarts} restart(s)" if g.restarts else "")
                + f": {reason}; see {g.log}"
            )
            return
        time.sleep(0.2)


def stop_all(state: RunState) -> None:
    for g in state.groups:
        if g.proc is not None:
            stop_tree(g.proc)
    if state.lighthouse is not None:
        stop_tree(state.lighthouse.proc, grace_s=1.0)


