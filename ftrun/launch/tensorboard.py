"""TensorBoard with the PyTorch profiler plugin on one run dir, as a child (``ftrun view``). Torch-free.

TensorBoard runs as a child (``python -m tensorboard.main``); this process never imports it.
Its logdir is a temporary folder of symlinks, so that the profiler plugin shows one run named
after the run dir, whose workers are all of the run's ranks, next to the run's scalars::

    <tmp>/<run-name>/replica{r}_rank{g}.{A}.pt.trace.json.gz -> RUN_DIR/traces/...
    <tmp>/<run-name>/replica{r}                              -> RUN_DIR/tb/replica{r}

torch-tb-profiler treats a folder holding ``*.pt.trace.json[.gz]`` as a run (named by its path
under the logdir) and a file's name before ``.<digits>.pt.trace.json`` as the worker;
TensorBoard's scalars show up as runs ``<run-name>/replica{r}``. Both follow symlinks.

Stopping: ``TensorBoard.stop`` (``stop_tree`` on its process tree); the command then removes
the temp dir (it also holds the plugin's cache, via TMPDIR). TensorBoard runs in its own process
group with a parent-death signal (SIGKILL), and a guard (``ftrun.launch.view_guard``) kills that
group and removes the temp dir if the view dies without doing so (SIGKILL): the plugin's worker
processes, which no parent-death signal reaches, do not outlive the view.
"""

from __future__ import annotations

import collections
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from ftrun import layout
from ftrun.errors import BadInput, RunFailed
from ftrun.launch.hosts import probe_host
from ftrun.launch.procs import spawn, stop_tree
from ftrun.launch.view_guard import Guard

PLUGIN = "pytorch_profiler"
TRACE_RE = re.compile(r"^(.*?)(\.\d+)?\.pt\.trace\.json(?:\.gz)?$")  # torch_tb_profiler.consts.WORKER_PATTERN
_SERVING_RE = re.compile(r"TensorBoard \S+ at https?://\S+?:(\d+)/")
START_TIMEOUT_S = 90.0


def trace_files(run_dir: Path) -> list[Path]:
    tdir = run_dir / layout.TRACES
    if not tdir.is_dir():
        return []
    return sorted(p for p in tdir.iterdir() if p.is_file() and TRACE_RE.match(p.name))


def scalar_dirs(run_dir: Path) -> list[Path]:
    tb = run_dir / layout.TB
    if not tb.is_dir():
        return []
    return sorted(
        p for p in tb.iterdir() if p.is_dir() and any(f.name.startswith("events.out.tfevents") for f in p.iterdir())
    )


def check_run_dir(path: Path) -> tuple[Path, list[Path], list[Path]]:
    """(resolved run dir, trace files, scalar dirs), or BadInput."""
    if not path.exists():
        raise BadInput(f"{path}: no such directory")
    if not path.is_dir():
        raise BadInput(f"{path}: not a directory (expected a run dir from `ftrun train`)")
    run_dir = path.resolve()
    traces = trace_files(run_dir)
    if not traces:
        if not (run_dir / layout.MANIFEST).exists() and not (run_dir / layout.TRACES).is_dir():
            raise BadInput(f"{path}: not an ftrun run dir (no {layout.MANIFEST}, no {layout.TRACES}/)")
        raise BadInput(f"{path}: no traces in {layout.TRACES}/ (train with --profile A:B, or auto)")
    return run_dir, traces, scalar_dirs(run_dir)


def build_logdir(root: Path, run_dir: Path, traces: list[Path], scalars: list[Path]) -> str:
    """Fill ``root`` with the symlink tree (see module doc); returns the profiler run's name."""
    name = run_dir.name or "run"
    run = root / name
    run.mkdir()
    for t in traces:
        (run / t.name).symlink_to(t)
    for s in scalars:
        if not (run / s.name).exists():
            (run / s.name).symlink_to(s, target_is_directory=True)
    return name


def check_port(host: str, port: int) -> None:
    """BadInput if TensorBoard could not bind ``host:port`` (port 0 is always fine)."""
    if not 0 <= port <= 65535:
        raise BadInput(f"--port {port}: must be 0..65535")
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise BadInput(f"--host {host!r}: {e.strerror or e}") from None
    if port == 0:
        return
    fam, typ, proto, _, addr = infos[0]
    s = socket.socket(fam, typ, proto)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as werkzeug's server does
        s.bind(addr)
    except OSError as e:
        raise BadInput(
            f"--port {port}: {host}:{port} is in use or not bindable ({e.strerror or e}); try --port 0"
        ) from None
    finally:
        s.close()


class TensorBoard:
    """TensorBoard's process, its output (kept in a file and the last lines), and its port."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path, root: Path) -> None:
        """Start TensorBoard (``argv``) in its own process group, and its guard over it and ``root``."""
        self.proc = spawn(argv, env, subprocess.PIPE, sig=signal.SIGKILL)
        self.guard = Guard(self.proc.pid, root)  # its process group: spawn starts a new session
        self.tail: collections.deque[str] = collections.deque(maxlen=40)
        self.port: int | None = None
        self.port_seen = threading.Event()
        self._log = open(log_path, "w", encoding="utf-8", errors="replace")
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            self._log.write(line + "\n")
            self._log.flush()
            if "communication.py" not in line:  # the plugin logs one line per untimed collective
                self.tail.append(line)
            m = _SERVING_RE.search(line)
            if m and self.port is None:
                self.port = int(m[1])
                self.port_seen.set()
        self.port_seen.set()

    def last_error(self) -> str:
        lines = [line for line in self.tail if line.strip()]
        for line in reversed(lines):
            if "error" in line.lower() or "could not" in line.lower() or "in use" in line.lower():
                return line.strip()
        return lines[-1].strip() if lines else "(no output)"

    def stop(self, grace_s: float = 1.5) -> None:
        """stop_tree: SIGTERM TensorBoard and its multiprocessing children, SIGKILL what is left.

        TensorBoard's own clean exit takes ~2.5 s (its profiler plugin's manager); nothing it
        would clean up outlives us (its cache dir is under our temp dir), so we do not wait.
        """
        stop_tree(self.proc, grace_s=grace_s)
        self.guard.release()
        self._reader.join(timeout=2)
        self._log.close()


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via an http_proxy


def answers(url: str) -> bool:
    try:
        with _DIRECT.open(url, timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def start(logdir: Path, tmp: Path, host: str, port: int, run_name: str) -> TensorBoard:
    """Start TensorBoard on ``logdir``; its temp files go under ``tmp``, its log next to ``tmp``;
    ``tmp``'s parent (the view's temp dir) is removed by the guard if the view dies."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", TMPDIR=str(tmp))  # the plugin's cache dir lands in ours
    argv = [
        sys.executable,
        "-m",
        "tensorboard.main",
        "--logdir",
        str(logdir),
        "--host",
        host.strip("[]"),
        "--port",
        str(port),
        "--load_fast",
        "false",
        "--window_title",
        f"ftrun view: {run_name}",
    ]
    return TensorBoard(argv, env, tmp.parent / "tensorboard.log", tmp.parent)


def wait_ready(child: TensorBoard, host: str, port: int) -> None:
    """Wait until ``child`` serves (its port seen in its log, its plugin listing answers).
    A port in use is ``BadInput``; a TensorBoard that dies or never answers, ``RunFailed``."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while not child.port_seen.wait(0.1):
        if child.proc.poll() is not None or time.monotonic() > deadline:
            break
    if child.port is None:
        child.port_seen.wait(1.0)  # let the reader drain a dying child's output
        msg = child.last_error()
        if child.proc.poll() is None:
            raise RunFailed(f"TensorBoard did not start within {START_TIMEOUT_S:.0f} s: {msg}")
        if "in use" in msg or "could not bind" in msg.lower():
            raise BadInput(f"--port {port}: {msg}")
        raise RunFailed(f"TensorBoard exited with code {child.proc.returncode}: {msg}")
    ph = probe_host(host)
    probe = f"http://{'[' + ph + ']' if ':' in ph else ph}:{child.port}/data/plugins_listing"
    while not answers(probe):
        if child.proc.poll() is not None:
            raise RunFailed(f"TensorBoard exited with code {child.proc.returncode}: {child.last_error()}")
        if time.monotonic() > deadline:
            raise RunFailed(f"TensorBoard did not answer {probe} within {START_TIMEOUT_S:.0f} s")
        time.sleep(0.1)
