"""A rank forked from its group's agent (``ftrun.worker.agent``): what ``python -u -m
ftrun.worker.main SPEC`` does in a fresh interpreter, done in a child of torch elastic's
``fork`` start method. torch runs this file by ``runpy.run_path`` (``--run-path``) inside the
child, with ``sys.argv = [this file, SPEC]`` and elastic's per-rank environment already set.

What a fresh interpreter would have and a fork does not inherit as such is restored first
(``as_fresh``): signal dispositions (the agent's handlers turn SIGTERM into an exception; a
rank dies of it, as before), unbuffered stdout/stderr (``-u``), ``faulthandler``. Then
``ftrun.worker.main.main`` runs. Its end, as a rank ending its interpreter by ``os._exit``:

* success: the function returns, so torch elastic records the rank's result and releases it
  once every rank of the group is done; then the process ends with 0 at once (``_exit_at_end``:
  torchft's background threads must not keep it alive, as ``main``'s ``os._exit`` ensures).
* an exception: the traceback on stderr as Python prints it, then exit 1 (SystemExit: its code;
  KeyboardInterrupt: death by SIGINT, as Python ends on it): the agent reports the failure
  exactly as a fresh rank's exit status.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import traceback
from typing import NoReturn


def as_fresh() -> None:
    """Signal dispositions as a fresh interpreter starts with them (SIGINT raises
    ``KeyboardInterrupt``; SIGPIPE and SIGXFSZ ignored; any other handler of the agent's back
    to the default), stdout/stderr written through at once, ``faulthandler`` on."""
    for s in signal.valid_signals():
        try:
            h = signal.getsignal(s)
        except (OSError, ValueError):
            continue
        if callable(h) and h is not signal.default_int_handler:
            signal.signal(s, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)  # a TextIOWrapper's (not a replaced stream's)
        if reconfigure is not None:
            reconfigure(line_buffering=True, write_through=True)
    faulthandler.enable()


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _exit_now(code: int) -> NoReturn:
    _flush()
    os._exit(code)


def _exit_at_end() -> None:
    """End the process with 0 once multiprocessing's child bootstrap finishes the entrypoint
    (after torch elastic took the result), before it would join any thread: a finalizer of
    the highest priority runs first in ``multiprocessing.util._exit_function``."""
    from multiprocessing.util import Finalize

    Finalize(None, _exit_now, args=(0,), exitpriority=sys.maxsize)


def _died(e: BaseException) -> NoReturn:
    """End as an uncaught ``e`` ends a fresh interpreter."""
    if isinstance(e, SystemExit):
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, int | None):
            print(e.code, file=sys.stderr)
        _exit_now(code)
    traceback.print_exception(e)
    _flush()
    if isinstance(e, KeyboardInterrupt):
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    _exit_now(1)


def run(spec_path: str) -> None:
    """The rank: ``ftrun.worker.main.main(spec_path)``, ended as described above."""
    as_fresh()
    from ftrun.worker.main import main

    try:
        code = main(spec_path)
    except BaseException as e:  # every end is a process end here
        _died(e)
    if code:
        _exit_now(code)
    _exit_at_end()


if __name__ == "__main__":  # run by path (runpy): the functions of the imported module, not copies
    from ftrun.worker.forked_rank import run as run_rank

    run_rank(sys.argv[1])
