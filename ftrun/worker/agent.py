"""A replica group's launcher: torch's elastic agent (``torch.distributed.run``), unchanged,
ending without the interpreter's teardown once it succeeded: ``python -m ftrun.worker.agent
TORCHRUN-ARGS`` (``ftrun.launch.groups.torchrun_argv``).

The agent imports torch, and the interpreter's teardown of it is a large part of the time
between its ranks' end and its own, on the path from a short run's last step to its result (a
sweep cell's: ``scripts/bench_warm_start.py``).
Contract: the same arguments, output and exit status as ``python -m torch.distributed.run``.
When torch's ``main`` returns (every rank exited 0, the exit barrier passed, the rendezvous
shut down), stdout and stderr are flushed and the process ends with 0 at once; nothing is left
to run (the ranks are reaped; the agent writes no file of its own after its ``main``). Any
other end (a rank failed: torch's ``ChildFailedError``, a signal, a bad argument) propagates
exactly as under ``python -m torch.distributed.run``: the same traceback, the same exit code.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    from torch.distributed.run import main as torchrun

    torchrun()  # its arguments: sys.argv[1:]; a failure raises (torch's own report and exit code)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
