"""Die with the parent: Linux's parent-death signal (``PR_SET_PDEATHSIG``). Torch-free.

Used for every child ftrun starts (``ftrun.launch.procs.spawn``, set between fork and exec)
and by each rank itself (``ftrun.worker.setup.die_with_parent``), since torchrun starts its ranks
in new sessions.
"""

from __future__ import annotations

import ctypes

PR_SET_PDEATHSIG = 1


def set_parent_death_signal(sig: int) -> None:
    """The calling process receives ``sig`` when its parent dies (no-op where prctl is missing)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
    except OSError:
        pass
