"""``ftrun view``: TensorBoard's PyTorch profiler plugin on one run dir (``ftrun.launch.tensorboard``).

Prints the URL once TensorBoard answers; Ctrl-C, SIGTERM or SIGHUP stop it (exit 130) and
remove the temp logdir (a SIGKILLed view: its guard does, ``ftrun.launch.view_guard``). This
process never imports torch or TensorBoard.
"""

from __future__ import annotations

import shutil
import signal
import sys
import tempfile
from pathlib import Path

from ftrun.errors import RunFailed, raise_on_signal
from ftrun.launch.hosts import url_host
from ftrun.launch.tensorboard import PLUGIN, TensorBoard, build_logdir, check_port, check_run_dir, start, wait_ready


def view(path: Path, port: int = 6006, host: str = "127.0.0.1") -> int:
    run_dir, traces, scalars = check_run_dir(path)
    check_port(host, port)
    tmp = Path(tempfile.mkdtemp(prefix="ftrun-view-"))
    child: TensorBoard | None = None
    # Our own handler for SIGINT too: a process started in the background by a shell inherits
    # SIGINT ignored, and Python then never raises KeyboardInterrupt. (A handler, unlike
    # SIG_IGN, is also reset to the default in TensorBoard at exec.)
    old = raise_on_signal()
    try:
        logdir = tmp / "logdir"
        logdir.mkdir()
        run_name = build_logdir(logdir, run_dir, traces, scalars)
        (tmp / "tmp").mkdir()
        child = start(logdir, tmp / "tmp", host, port, run_name)
        wait_ready(child, host, port)
        print(f"view: http://{url_host(host)}:{child.port}/#{PLUGIN}", flush=True)
        print(
            f"view: run {run_name!r}: {len(traces)} trace file(s), {len(scalars)} scalar run(s) "
            f"(the profiler loads traces in the background); Ctrl-C stops",
            file=sys.stderr,
            flush=True,
        )
        code = child.proc.wait()
        raise RunFailed(f"TensorBoard exited with code {code}: {child.last_error()}")
    except KeyboardInterrupt as e:  # the usual way to stop a view; still 130, as every interrupt
        print(f"view: stopped by {e or 'SIGINT'}; TensorBoard stopped", file=sys.stderr, flush=True)
        return 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a closed terminal's: ended as SIGTERM (raise_on_signal)
        try:
            if child is not None:
                child.stop()
            shutil.rmtree(tmp, ignore_errors=True)
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
