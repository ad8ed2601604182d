"""Helpers for the ``ftrun train`` tests: run the real CLI, watch its process tree, read results.

Every run goes through :func:`run_train`, which starts ``ftrun train`` as a child, records
every process that descends from it (polling /proc while it runs, since orphans are
re-parented) and, after it exits, reports which of them — or any process whose command line
names the run dir — are still alive.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ftrun import layout

_BIN = Path(sys.executable).with_name("ftrun")
FTRUN: list[str] = [str(_BIN)] if _BIN.exists() else ([shutil.which("ftrun")] if shutil.which("ftrun") else [sys.executable, "-m", "ftrun"])

# Small and fast on 2 CPU cores.
SMALL = ["--width", "32", "--batch-size", "4", "--seq-len", "16"]


# --- /proc -------------------------------------------------------------------------------

def _stat(pid: int) -> tuple[int, str, int] | None:
    """(ppid, state, starttime) of a live pid, or None."""
    try:
        s = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = s[s.rindex(")") + 2 :].split()
    return int(rest[1]), rest[0], int(rest[19])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _all_pids() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def live(pid: int, start: int) -> bool:
    """Same process (pid + start time) still running (zombies count as gone)."""
    st = _stat(pid)
    return st is not None and st[2] == start and st[1] != "Z"


class TreeWatch:
    """Polls /proc and remembers every (pid, start time) descending from ``root``."""

    def __init__(self, root: int, interval: float = 0.05) -> None:
        self.root = root
        self.interval = interval
        self.seen: dict[tuple[int, int], str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _scan(self) -> None:
        known = {pid for pid, _ in self.seen} | {self.root}
        stats = {pid: _stat(pid) for pid in _all_pids()}
        changed = True
        while changed:  # transitive closure over parent links
            changed = False
            for pid, st in stats.items():
                if st and st[0] in known and pid not in known:
                    known.add(pid)
                    self.seen[(pid, st[2])] = _cmdline(pid)
                    changed = True

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._scan()
            time.sleep(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def survivors(watch: TreeWatch, marker: str, within_s: float = 5.0) -> list[str]:
    """Descendants seen during the run, or processes naming ``marker``, alive after ``within_s``."""
    deadline = time.monotonic() + within_s
    while True:
        left = [f"{pid} {cmd}" for (pid, start), cmd in watch.seen.items() if live(pid, start)]
        me = os.getpid()
        for pid in _all_pids():
            if pid != me and marker in _cmdline(pid):
                st = _stat(pid)
                if st and st[1] != "Z":
                    left.append(f"{pid} {_cmdline(pid)}")
        if not left or time.monotonic() > deadline:
            return sorted(set(left))
        time.sleep(0.1)


# --- running ftrun train -------------------------------------------------------------------

@dataclass
class TrainRun:
    run_dir: Path
    rc: int
    stdout: str
    stderr: str
    wall_s: float
    descendants: list[str] = field(default_factory=list)
    survivors: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        return json.loads((self.run_dir / layout.SUMMARY).read_text())

    def manifest(self) -> dict:
        return json.loads((self.run_dir / layout.MANIFEST).read_text())

    def events(self, replica: int, rank: int = 0) -> list[dict]:
        path = layout.event_log(self.run_dir, replica, rank)
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def logs(self) -> str:
        out = []
        for p in sorted((self.run_dir / layout.LOGS).glob("*.log")) if (self.run_dir / layout.LOGS).is_dir() else []:
            out.append(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}")
        return "\n".join(out)

    def explain(self) -> str:
        return f"rc={self.rc}\nstdout:\n{self.stdout[-3000:]}\nstderr:\n{self.stderr[-3000:]}\n{self.logs()}"


def run_train(
    out: Path,
    run_name: str,
    *args: str,
    timeout: float = 120.0,
    env: dict[str, str] | None = None,
    while_running: Callable[[subprocess.Popen, Path], None] | None = None,
) -> TrainRun:
    """``ftrun train --out OUT --run-name NAME ARGS`` as a child; ``while_running(proc, run_dir)``
    is called once it started (e.g. to signal it). Kills the tree on timeout."""
    run_dir = out / run_name
    argv = [*FTRUN, "train", "--out", str(out), "--run-name", run_name, *args]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    watch = TreeWatch(proc.pid)
    try:
        if while_running is not None:
            try:
                while_running(proc, run_dir)
            except BaseException as e:
                _kill_seen(proc, watch)
                stdout, stderr = proc.communicate()
                partial = TrainRun(run_dir, proc.returncode, stdout, stderr, time.monotonic() - t0)
                raise AssertionError(f"{e}\n{partial.explain()}") from e
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_seen(proc, watch)
            stdout, stderr = proc.communicate()
            raise AssertionError(f"ftrun train did not finish in {timeout}s:\n{stdout[-2000:]}\n{stderr[-2000:]}")
    finally:
        wall = time.monotonic() - t0
        watch.stop()
    left = survivors(watch, str(run_dir))
    if left:
        for (pid, start) in list(watch.seen):  # don't leak into the next test
            if live(pid, start):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    return TrainRun(run_dir, proc.returncode, stdout, stderr, wall, sorted(watch.seen.values()), left)


def _kill_seen(proc: subprocess.Popen, watch: TreeWatch) -> None:
    for (pid, start) in [(proc.pid, 0), *watch.seen]:
        try:
            if pid == proc.pid or live(pid, start):
                os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_for_step(run_dir: Path, step: int, timeout: float = 60.0, replica: int = 0) -> bool:
    """Block until replica's rank-0 event log reports ``step`` (training is under way)."""
    path = layout.event_log(run_dir, replica, 0)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            n = sum(1 for line in path.read_text().splitlines() if line.strip())
        except OSError:
            n = 0
        if n >= step:
            return True
        time.sleep(0.05)
    return False


# --- checks shared by the end-to-end tests --------------------------------------------------

def actual_events(records: list[dict]) -> list[tuple[int, str, int, int]]:
    """(step, kind, fragment, manager_step) of each send/sync an event log recorded, in order."""
    out = []
    for rec in records:
        if rec["sent"] is not None:
            out.append((rec["step"], "send", rec["sent"], rec["manager_step"]))
        if rec["synced"] is not None:
            out.append((rec["step"], "sync", rec["synced"], rec["manager_step"]))
    return out


def trace_names(path: Path) -> list[str]:
    """Names of the complete ("X") events in a chrome trace (.json.gz)."""
    with gzip.open(path, "rt") as f:
        trace = json.load(f)
    return [ev["name"] for ev in trace.get("traceEvents", []) if ev.get("ph") == "X" and isinstance(ev.get("name"), str)]


def trace_step_spans(path: Path) -> set[int]:
    """``ProfilerStep#k`` numbers in a chrome trace (.json.gz)."""
    return {int(n.split("#", 1)[1]) for n in trace_names(path) if n.startswith("ProfilerStep#")}


def write_toml(path: Path, values: dict) -> Path:
    lines = []
    for k, v in values.items():
        if isinstance(v, bool):
            lines.append(f"{k} = {'true' if v else 'false'}")
        elif isinstance(v, str):
            lines.append(f"{k} = {json.dumps(v)}")
        else:
            lines.append(f"{k} = {v!r}")
    path.write_text("\n".join(lines) + "\n")
    return path
