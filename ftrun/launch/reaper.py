"""Run a command so that every process it starts ends with it: a Linux child subreaper. Torch-free.

``python -m ftrun.launch.reaper -- CMD ARGS`` (argv from ``reaper_argv``) runs CMD as its child
and, as ``PR_SET_CHILD_SUBREAPER``, becomes the parent of every orphan below it: a
double-forked, ``setsid`` daemon of a foreign script still descends from it, so nothing escapes
``ftrun.launch.procs``'s tree walk and nothing is re-parented to init. ``ftrun launch`` runs each
replica group's torchrun under one.

* CMD exits: whatever it left running gets SIGTERM, then SIGKILL after ``LEFTOVER_GRACE_S``; all
  are reaped; the reaper exits as CMD did (the same code, or death by the same signal).
* SIGTERM / SIGINT / SIGHUP (``ftrun`` stopping the group, or ``ftrun`` died: the parent-death
  signal ``spawn`` sets): CMD gets SIGTERM (torchrun then stops its ranks); after
  ``STOP_GRACE_S`` every process still below the reaper gets SIGKILL, so a script that ignores
  SIGTERM is gone in seconds, not after torchrun's own 30 s grace.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from ftrun.launch.procs import descendants
from ftrun.parent_death import set_child_subreaper, set_parent_death_signal

STOP_GRACE_S = 5.0  # a stopped group's processes: SIGTERM, then SIGKILL this much later
LEFTOVER_GRACE_S = 1.0  # what CMD left behind when it exited by itself
POLL_S = 0.05


def reaper_argv(argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "ftrun.launch.reaper", "--", *argv]


def _signal_all(sig: int) -> None:
    for pid in descendants(os.getpid()):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _reap(child: int, status: list[int]) -> bool:
    """Reap every exited descendant (orphans are ours too); True while any child is left."""
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True
        if pid == child:
            status.append(os.waitstatus_to_exitcode(st))


def run(argv: list[str]) -> int:
    """Run ``argv`` under this subreaper (module docstring); CMD's exit code (negative: its signal)."""
    set_child_subreaper()
    stop: list[int] = []
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, lambda signum, frame: stop.append(signum))
    me = os.getpid()
    child = os.fork()
    if child == 0:
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
        set_parent_death_signal(signal.SIGTERM, me)  # should the reaper itself be SIGKILLed
        try:
            os.execvp(argv[0], argv)
        except OSError as e:
            os.write(2, f"ftrun: cannot run {argv[0]}: {e.strerror}\n".encode())
        os._exit(127)
    status: list[int] = []
    kill_at = None  # when every process still below us gets SIGKILL
    stopping = leftovers = False
    while _reap(child, status):
        now = time.monotonic()
        if stop and not status and not stopping:
            stopping = True
            os.kill(child, signal.SIGTERM)  # torchrun stops its ranks itself, if it can
            kill_at = now + STOP_GRACE_S
        if status and not leftovers:  # CMD is done: what is left is a leftover
            leftovers = True
            _signal_all(signal.SIGTERM)
            kill_at = min(kill_at or float("inf"), now + LEFTOVER_GRACE_S)
        if kill_at is not None and now >= kill_at:
            _signal_all(signal.SIGKILL)
        time.sleep(POLL_S)
    return status[0] if status else 1


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        sys.exit("usage: python -m ftrun.launch.reaper -- CMD [ARGS...]")
    code = run(argv)
    if code < 0:  # die as CMD died, so our parent reads the same status
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main()
