"""Die with the parent: Linux's parent-death signal (``PR_SET_PDEATHSIG``), and the child
subreaper that keeps orphans in the tree (``PR_SET_CHILD_SUBREAPER``). Torch-free.

The signal is set for every child ftrun starts (``ftrun.launch.procs.spawn``, ``ftrun sweep``'s
trainings; between fork and exec, ``die_with_this_process``) and by each rank itself
(``ftrun.worker.setup.die_with_parent``), since a rank outlives a SIGKILLed launcher otherwise
(and torchrun starts a user script's ranks in new sessions).
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _load_prctl():
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None


# Loaded once, here: a ``preexec_fn`` runs between fork and exec, where loading a library
# (the dynamic loader's lock, perhaps held by another thread at the fork) could deadlock.
_PRCTL = _load_prctl()


def set_parent_death_signal(sig: int, parent: int | None = None) -> None:
    """The calling process receives ``sig`` when its parent dies (no-op where prctl is missing).
    ``parent``: the pid the caller expects as its parent; if that one already died (between
    fork and this call, when no signal can come any more), ``sig`` is sent at once."""
    if _PRCTL is None:
        return
    _PRCTL(PR_SET_PDEATHSIG, sig)
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), sig)


def die_with_this_process(sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn`` for ``subprocess.Popen``: the child gets ``sig`` when this process dies
    (keep the thread that starts it alive meanwhile: Linux sends it when that thread exits)."""
    me = os.getpid()
    return lambda: set_parent_death_signal(sig, me)


def set_child_subreaper() -> None:
    """Orphans below the calling process are re-parented to it, not to init
    (``PR_SET_CHILD_SUBREAPER``; ``ftrun.launch.reaper``). No-op where prctl is missing."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_CHILD_SUBREAPER, 1)
