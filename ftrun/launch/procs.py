"""Child processes that die with us: spawn with a parent-death signal, stop whole trees.

torchrun starts a script's ranks in new sessions, so killing a launcher's process group does
not reach them (ftrun's own ranks, forked from their agent ``ftrun.worker.agent``, share its
group, and are stopped the same way). We therefore (1) give every direct child
PR_SET_PDEATHSIG, (2) have each rank set its own (``ftrun.worker.setup.die_with_parent``), and
(3) on stop, collect the full descendant tree from /proc before signalling, then SIGTERM, wait,
SIGKILL what is left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Protocol

from ftrun.parent_death import die_with_this_process

# how often a stop looks whether the signalled tree is gone: a run's end waits on its
# lighthouse's, and a look is a few /proc reads
STOP_POLL_S = 0.01


class Proc(Protocol):
    """A child process as the launcher uses it: a ``subprocess.Popen``, or a group's agent forked
    by a zygote (``ftrun.launch.zygote.ForkedAgent``)."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...


def spawn(
    argv: Sequence[str], env: dict[str, str], log: IO[bytes] | int, sig: int = signal.SIGTERM, cwd: Path | None = None
) -> subprocess.Popen:
    """Start ``argv`` (in ``cwd``) in its own process group; it receives ``sig`` if this process dies."""
    return subprocess.Popen(
        list(argv),
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=die_with_this_process(sig),
    )


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        kids.setdefault(ppid, []).append(int(d.name))
    return kids


def descendants(pid: int) -> list[int]:
    """All live descendants of ``pid`` (children first seen, then theirs)."""
    kids = _children_map()
    out, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def signal_tree(proc: Proc, sig: int) -> list[int]:
    """Send ``sig`` to ``proc`` and every descendant; returns the pids signalled."""
    pids = [proc.pid, *descendants(proc.pid)]
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    return pids


def stop_tree(proc: Proc, grace_s: float = 3.0) -> None:
    """SIGTERM the tree, wait up to ``grace_s``, SIGKILL survivors, reap ``proc``."""
    if proc.poll() is not None and not descendants(proc.pid):
        return
    pids = signal_tree(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()
        if not any(alive(p) for p in pids):
            break
        time.sleep(STOP_POLL_S)
    for pid in pids + descendants(proc.pid):
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    try:
        proc.wait(timeout=2)
    except subprocess.TimeoutExpired:
        pass
