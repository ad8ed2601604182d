"""A replica group's launcher: torch's elastic agent (``torch.distributed.run``), with ftrun's
own ranks forked from it, ending without the interpreter's teardown once it succeeded:
``python -m ftrun.worker.agent TORCHRUN-ARGS`` (``ftrun.launch.groups.torchrun_argv``).

Forked ranks: when the entrypoint is ftrun's worker (``-m ftrun.worker.main SPEC``), the agent
first imports what every rank imports (torch, torchft, ftrun's worker: ``preimport``; nothing
stateful is created: no process group, no CUDA, no thread pool) and then runs torch's ``run``
as ``--start-method fork --run-path ftrun/worker/forked_rank.py SPEC``: torch elastic starts
each rank through multiprocessing's fork, and the rank (``ftrun.worker.forked_rank``) runs
``ftrun.worker.main.main(SPEC)`` with the environment elastic sets (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``MASTER_*``, ...). A rank then pays no import of its own (the group's memory
shares the runtime's pages with the agent). Anything else (``ftrun launch``'s user scripts, any
other entrypoint or option shape) runs torch's ``main`` unchanged: fresh interpreters through
subprocess. The fallback is taken too where forking is not safe (``fork_safe``): off Linux, and
with a torch built with CUDA or ROCm (torch's launcher initialises the CUDA driver in the agent,
after which a forked child cannot use CUDA); the rank then starts as a fresh
``python -u -m ftrun.worker.main SPEC``, as torchrun starts it.

The agent imports torch, and the interpreter's teardown of it is a large part of the time
between its ranks' end and its own, on the path from a short run's last step to its result (a
sweep cell's: ``scripts/bench_warm_start.py``).
Contract: the same exit status and failure report as ``python -m torch.distributed.run`` (the
entrypoint's name in the report being ``run_script_path`` for forked ranks).
When torch's ``run`` returns (every rank exited 0, the exit barrier passed, the rendezvous
shut down), stdout and stderr are flushed and the process ends with 0 at once; nothing is left
to run (the ranks are reaped; the agent writes no file of its own after its ``run``). Any
other end (a rank failed: torch's ``ChildFailedError``, a signal, a bad argument) propagates
exactly as under ``python -m torch.distributed.run``: the same traceback, the same exit code.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

WORKER = "ftrun.worker.main"  # ftrun's rank module, the one entrypoint whose ranks are forked
FORKED_RANK = Path(__file__).resolve().with_name("forked_rank.py")  # what a forked rank runs


def forks_ranks(args: argparse.Namespace) -> bool:
    """The entrypoint is ftrun's worker as ``-m ftrun.worker.main``, with torchrun's defaults for
    how it is started (no ``--no-python``, ``--run-path`` or ``--start-method``)."""
    return (
        bool(args.module)
        and args.training_script == WORKER
        and not args.no_python
        and not args.run_path
        and args.start_method == "spawn"  # torchrun's default: ftrun never passes one
    )


def cuda_built_torch() -> bool:
    """The installed torch was built with CUDA or ROCm: its ``lib`` folder holds ``libtorch_cuda``
    or ``libtorch_hip`` (what ``torch.backends.cuda.is_built()`` answers, read from the installed
    files without importing torch, so the launcher's memory estimate can ask it too)."""
    spec = importlib.util.find_spec("torch")
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    return any(any((Path(r) / "lib").glob(f"libtorch_{gpu}*.so*")) for r in roots for gpu in ("cuda", "hip"))


def fork_safe() -> bool:
    """Forking the ranks is safe here: Linux, and a torch built without CUDA/ROCm. With a CUDA
    build torch's own launcher asks CUDA for its devices in the agent (``LaunchConfig``'s NUMA
    default), which initialises the driver, and a forked child cannot use CUDA after that."""
    return sys.platform.startswith("linux") and not cuda_built_torch()


def preimport() -> None:
    """Import what a rank imports (``ftrun.worker.rank`` and the modules its parts import, the
    late ones included) so that forked ranks share them. Module imports only: nothing stateful
    is created (no process group, no CUDA, no thread pool, no profiler)."""
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401  (what building the first torch.optim optimizer imports)
    import torchft  # noqa: F401
    import torchft.local_sgd  # noqa: F401

    import ftrun.runlog  # noqa: F401
    import ftrun.worker.fault_injection  # noqa: F401
    import ftrun.worker.forked_rank  # noqa: F401
    import ftrun.worker.main  # noqa: F401
    import ftrun.worker.profiling  # noqa: F401
    import ftrun.worker.quorum_probe  # noqa: F401
    import ftrun.worker.recorder  # noqa: F401
    import ftrun.worker.setup  # noqa: F401
    import ftrun.worker.step_loop  # noqa: F401
    import ftrun.worker.whereabouts  # noqa: F401
    from ftrun.worker.rank import import_late_modules

    import_late_modules()


def method_name(depth: int = 2) -> str:
    """The name of the function ``depth`` frames above this one's (``"no_method_name"`` past the
    stack's top): what torch elastic's ``dynamic_rendezvous.get_method_name`` answers, read from
    the frame instead of ``inspect.stack()``."""
    try:
        return sys._getframe(depth).f_code.co_name
    except ValueError:
        return "no_method_name"


def cheap_rendezvous_names() -> None:
    """torch elastic's rendezvous names every event it records after the method recording it,
    by ``inspect.stack()`` twice per event (``get_method_name``), and builds that name even where
    no handler takes the event (the default). ``inspect.stack()`` looks up every frame's source
    file and module among all loaded ones: with torch imported it was most of an agent's CPU
    (py-spy), a part of it in the rendezvous' shutdown that a run's end waits on. ``method_name``
    gives the same name from the frame itself."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    if callable(getattr(dynamic_rendezvous, "get_method_name", None)):
        dynamic_rendezvous.get_method_name = method_name


def run_forked(args: argparse.Namespace) -> None:
    """torch's ``run`` with the ranks forked: ``--start-method fork --run-path FORKED_RANK SPEC``
    (the spec and any further arguments stay the rank's)."""
    from torch.distributed.run import run

    args.start_method = "fork"
    args.run_path = True
    args.module = False
    args.training_script = str(FORKED_RANK)
    run(args)


def main() -> None:
    from torch.distributed.elastic.multiprocessing.errors import record
    from torch.distributed.run import main as torchrun, parse_args

    args = parse_args(sys.argv[1:])  # a bad argument: argparse's message and exit 2, as torchrun's
    cheap_rendezvous_names()
    if forks_ranks(args) and fork_safe():
        preimport()
        record(run_forked)(args)  # torchrun's main is ``record(run(parse_args(...)))`` alike
    else:
        torchrun()  # its arguments: sys.argv[1:]; a failure raises (torch's own report and exit code)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
