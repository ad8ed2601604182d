"""Watch the replica groups of ``ftrun launch`` (scripts ftrun does not control). Torch-free.

ftrun knows nothing of a foreign script's steps, so everything here comes from outside: exit
codes, the groups' log output (last line, ``--kill R@line:REGEX``), wall-clock time
(``--kill R@Ns``, ``--timeout``) and the lighthouse's log (quorums). Exits and the lighthouse's
death follow ``ftrun.launch.policy``, as ``train``'s do (a group killed by ``--kill`` with no
restarts left is *lost*; a failed group is named with its log's error, ``launch.diagnose``).
Besides:

* ``--timeout S``: a group that has not joined a quorum S seconds after it (re)started fails
  the launch, named. Joining is read from the group's own log: torchft's manager logs
  ``got lighthouse quorum`` each time it receives one (torchft 0.2; its Rust log at INFO).

Each ``--kill`` fires once per launch (a relaunched group is not killed again).
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ftrun import layout
from ftrun.fault_flags import LaunchKill
from ftrun.launch import policy
from ftrun.launch.diagnose import describe, read_log
from ftrun.launch.groups import Group, Lighthouse
from ftrun.launch.procs import signal_tree, stop_tree
from ftrun.launch.tail import LogTail

_QUORUM_ID = re.compile(r"bumping quorum_id to (\d+)")
_QUORUM_REQ = re.compile(r"Received quorum request for replica (\S+)")
_TRAILING_NUM = re.compile(r"(\d+)$")
JOINED = "got lighthouse quorum"  # torchft's manager, when it receives a quorum


@dataclass
class Quorums:
    """What the lighthouse's log says: the highest quorum id and who asked for a quorum."""

    tail: LogTail
    last_id: int = 0
    requesters: set[str] = field(default_factory=set)

    def update(self) -> None:
        for ln in self.tail.read_new():
            m = _QUORUM_ID.search(ln)
            if m:
                self.last_id = max(self.last_id, int(m[1]))
            m = _QUORUM_REQ.search(ln)
            if m:
                self.requesters.add(m[1].split(":")[0])

    def asked(self, replica: int) -> bool | None:
        """Did group ``replica`` ask for a quorum? Read from replica ids that end with the group's
        number (torchft's example: ``train_ddp_{REPLICA_GROUP_ID}``); ``None`` when the ids do
        not tell (no id ends with a number)."""
        nums = [m for r in self.requesters if (m := _TRAILING_NUM.search(r))]
        if not self.requesters or len(nums) < len(self.requesters):
            return None
        return any(int(m[1]) == replica for m in nums)


@dataclass
class LaunchState:
    run_dir: Path
    groups: list[Group]
    kills: list[LaunchKill] = field(default_factory=list)
    restarts: int = 0
    timeout_s: float | None = None
    lighthouse: Lighthouse | None = None
    quorums: Quorums | None = None
    tails: dict[int, LogTail] = field(default_factory=dict)
    status: dict[int, str] = field(default_factory=dict)  # running | restarting | exited | lost | stopped
    started: float = 0.0  # monotonic
    ended: float = 0.0
    fired: list[layout.FiredKill] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    failed_group: int | None = None
    lost: dict[int, str] = field(default_factory=dict)
    first_restart: dict[int, float] = field(default_factory=dict)  # replica -> unix time of its first relaunch
    quorums_joined: dict[int, int] = field(default_factory=dict)  # replica -> quorums its log shows (all incarnations)
    joined: dict[int, bool] = field(default_factory=dict)  # replica -> current incarnation joined a quorum
    incarnation_started: dict[int, float] = field(default_factory=dict)  # replica -> monotonic start

    def group(self, replica: int) -> Group:
        return next(g for g in self.groups if g.replica == replica)

    def rows(self) -> list[layout.LaunchGroupRow]:
        """One row per group for the live view and the summary; a group that exited non-zero
        shows its error (``group_error``), not its last line."""
        return [
            layout.LaunchGroupRow(
                replica=g.replica,
                state=self.status.get(g.replica, "starting"),
                exit_codes=list(g.exit_codes),
                restarts=g.restarts,
                quorums=self.quorums_joined.get(g.replica, 0),
                last_line=group_error(g)
                if g.exit_codes and g.exit_codes[-1] not in (0, None) and g.process.poll() is not None
                else (self.tails[g.replica].last if g.replica in self.tails else ""),
            )
            for g in self.groups
        ]


def _fire(state: LaunchState, k: LaunchKill, g: Group, trigger: str) -> None:
    if k.signal == "SIGKILL":
        signal_tree(g.process, signal.SIGKILL)  # every process of the group, as a crash would
    else:
        try:
            os.kill(g.process.pid, signal.SIGTERM)  # the launcher: torchrun stops its ranks
        except ProcessLookupError:
            pass
    state.fired.append(
        layout.FiredKill(
            replica=k.replica,
            seconds=k.seconds,
            pattern=k.pattern,
            signal=k.signal,
            at_s=round(time.monotonic() - state.started, 3),
            trigger=trigger,
            incarnation=g.restarts,
        )
    )


def _check_kills(state: LaunchState, r: int, g: Group, new_lines: list[str], now: float) -> None:
    done = {(f.replica, f.seconds, f.pattern, f.signal) for f in state.fired}
    for k in state.kills:
        if k.replica != r or (k.replica, k.seconds, k.pattern, k.signal) in done or g.process.poll() is not None:
            continue
        if k.seconds is not None and now - state.started >= k.seconds:
            _fire(state, k, g, f"{k.seconds:g} s")
        elif k.pattern is not None:
            hit = next((ln for ln in new_lines if re.search(k.pattern, ln)), None)
            if hit is not None:
                _fire(state, k, g, hit.strip()[:200])


def _killed_on_purpose(state: LaunchState, g: Group) -> str | None:
    f = next((f for f in state.fired if f.replica == g.replica and f.incarnation == g.restarts), None)
    return None if f is None else f"{f.signal} at {f.at_s:g} s ({f.trigger})"


def group_error(g: Group) -> str:
    """Why the group's last incarnation failed, from its log (``diagnose.describe``: a rank's
    signal, the error line, else its last line)."""
    text = read_log(g.log, g.log_offset)
    return "" if text is None else describe(text)


def _count_quorums(state: LaunchState, r: int, lines: list[str]) -> None:
    n = sum(JOINED in ln for ln in lines)
    if n:
        state.quorums_joined[r] = state.quorums_joined.get(r, 0) + n
        state.joined[r] = True


def watch(state: LaunchState, on_tick: Callable[[LaunchState], None], poll_s: float = 0.2) -> None:
    """Wait for every group (module rules); ``state.failures`` says why the launch failed."""
    pending = {g.replica: g for g in state.groups}
    for r in pending:
        state.status[r] = "running"
        state.tails.setdefault(r, LogTail(state.group(r).log))
        state.incarnation_started.setdefault(r, state.started)
        state.joined.setdefault(r, False)
        state.quorums_joined.setdefault(r, 0)
    while True:
        now = time.monotonic()
        if state.quorums is not None:
            state.quorums.update()
        for r, g in list(pending.items()):
            new = state.tails[r].read_new()
            _count_quorums(state, r, new)
            _check_kills(state, r, g, new, now)
        on_tick(state)
        if not pending:
            return
        if (dead := policy.lighthouse_failed(state.lighthouse)) is not None:
            state.failures.append(dead)
            return
        for r, g in sorted(pending.items()):
            code = g.process.poll()
            if code is None:
                continue
            g.exit_codes.append(code)
            _count_quorums(state, r, state.tails[r].read_new())
            purpose = _killed_on_purpose(state, g)
            outcome = policy.on_exit(code, g.restarts, state.restarts, purpose)
            if outcome == "done":
                del pending[r]
                state.status[r] = "exited"
                continue
            if outcome == "restart":
                state.first_restart.setdefault(r, time.time())
                policy.relaunch(g)
                state.status[r] = "running"
                state.joined[r] = False
                state.incarnation_started[r] = time.monotonic()
                continue
            if outcome == "lost" and purpose is not None:
                del pending[r]
                state.status[r] = "lost"
                state.lost[r] = purpose
                continue
            state.status[r] = "exited"
            state.failed_group = r
            state.failures.append(policy.group_failed(r, code, g.restarts, group_error(g), g.log))
            return
        late = [
            r
            for r in sorted(pending)
            if state.timeout_s is not None
            and not state.joined[r]
            and now - state.incarnation_started[r] > state.timeout_s
        ]
        if late:
            r = late[0]
            g = state.group(r)
            asked = state.quorums.asked(r) if state.quorums is not None else None
            state.failed_group = r
            state.failures.append(
                f"replica group {r} joined no quorum within --timeout {state.timeout_s:g} s"
                + (f" (with {', '.join(map(str, late[1:]))})" if late[1:] else "")
                + {
                    True: " (it asked the lighthouse for one)",
                    False: " (it never asked the lighthouse for one)",
                    None: "",
                }[asked]
                + f"; quorums formed: {state.quorums.last_id if state.quorums is not None else '?'}"
                + f"; last log line: {state.tails[r].last!r}; see {g.log}"
            )
            return
        time.sleep(poll_s)


def stop_groups(state: LaunchState) -> None:
    """Stop every group's process tree and the lighthouse (idempotent)."""
    for g in state.groups:
        if g.proc is not None:
            if g.proc.poll() is None:
                state.status[g.replica] = "stopped"
            stop_tree(g.proc)
    if state.lighthouse is not None:
        stop_tree(state.lighthouse.proc, grace_s=1.0)
