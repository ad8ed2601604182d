"""The tests' shared helpers (the one module test files import from; test modules never import
each other): how to run ``ftrun`` (the binary, in a child: ``FTRUN``, ``run_ftrun``; in-process:
``cli``, ``inspect``), the one-line error of bad input (``one_line``), the small model (``SMALL``),
torchft's own DiLoCo as a trace source (``run_foreign``), trace JSON edits, and ``ftrun train``
runs with their process trees.

Every ``ftrun train`` run goes through :func:`run_train`, which starts ``ftrun train`` as a child, records
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
import struct
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import pytest

from ftrun import layout
from ftrun.torchft_compat import FTRUN_STEP_RE, LABELS, PROFILER_STEP_RE

ROOT = Path(__file__).resolve().parent.parent


def load_script(name: str):
    """``scripts/<name>.py`` imported as a module (the scripts are not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (dataclasses and msgspec look their module up by name)
    spec.loader.exec_module(module)
    return module


_BIN = Path(sys.executable).with_name("ftrun")
FTRUN: list[str] = (
    [str(_BIN)]
    if _BIN.exists()
    else ([shutil.which("ftrun")] if shutil.which("ftrun") else [sys.executable, "-m", "ftrun"])
)


def cli(*args: str, env: dict[str, str] | None = None):
    """``ftrun ARGS`` in this process (typer's CliRunner): ``.exit_code``, ``.output``."""
    from typer.testing import CliRunner

    from ftrun.cli import app

    return CliRunner().invoke(app, list(args), env=env)


def run_ftrun(*args: str, timeout: float = 60, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``ftrun ARGS`` in a child process (e2e tests): ``.returncode``, ``.stdout``, ``.stderr``."""
    return subprocess.run([*FTRUN, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def one_line(res, *needles: str) -> str:
    """The error line of a refused command (the house rule for bad input): exit 2, no traceback,
    exactly one non-empty line (stderr of a child process; the output of :func:`cli`), holding
    each of ``needles``. Returns the line."""
    if isinstance(res, subprocess.CompletedProcess):
        code, text, everything = res.returncode, res.stderr, res.stdout + res.stderr
    else:
        code, text, everything = res.exit_code, res.output, res.output
    assert code == 2, (code, everything)
    assert "Traceback" not in everything, everything
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, everything
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def inspect(*args: str):
    """``ftrun inspect-trace ARGS`` in this process."""
    return cli("inspect-trace", *args)


# torchft's own DiLoCo (tests/foreign_diloco.py): the schedule it runs, as inspect-trace flags
def same_as_cli(report, *args: str) -> None:
    """An ``ftrun.api.Report`` says what ``ftrun inspect-trace ARGS --json`` says: exit code,
    verdict, problems and every event's (replica, kind, expected/observed step, fragment, ok)."""
    res = inspect(*args, "--json")
    d = json.loads(res.output)
    assert res.exit_code == (0 if report.ok else 1)
    assert report.verdict == d["verdict"]
    assert report.problems == d["problems"]

    def rows(events: list[dict]) -> list[tuple]:
        return [
            (e["replica"], e["kind"], e["expected_step"], e["observed_step"], e["fragment"], e["ok"]) for e in events
        ]

    assert rows(report.to_json()["events"]) == rows(d["events"])


CPU_RUN = ROOT / "tests" / "data" / "cpu_run"  # a real 2-replica streaming run, trimmed (tests/data/README.md)


def two_runs(tmp_path: Path) -> tuple[Path, Path]:
    """Two copies of ``CPU_RUN`` (runA, runB) under ``tmp_path``: what ``ftrun compare`` reads."""
    a, b = tmp_path / "runA", tmp_path / "runB"
    shutil.copytree(CPU_RUN, a)
    shutil.copytree(CPU_RUN, b)
    return a, b


def lighthouse_url(proc: subprocess.Popen, log: Path, timeout: float = 60.0) -> str:
    """The URL a started ``ftrun lighthouse`` prints (its stdout line ``lighthouse: URL``); an
    AssertionError with the tail of its ``log`` if it prints none (the caller stops it)."""
    deadline = time.monotonic() + timeout
    line = ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("lighthouse: ") or not line:
            break
    assert line.startswith("lighthouse: "), (
        f"no URL from ftrun lighthouse: {line!r}\n{log.read_text(errors='replace')[-2000:]}"
    )
    return line.split(" ", 1)[1].strip()


FOREIGN = dict(fragments=2, sync_every=8, delay=2)
FOREIGN_FLAGS = [
    "--fragments",
    str(FOREIGN["fragments"]),
    "--sync-every",
    str(FOREIGN["sync_every"]),
    "--fragment-sync-delay",
    str(FOREIGN["delay"]),
]


def run_foreign(out: Path, *extra: str) -> Path:
    """tests/foreign_diloco.py with FOREIGN's schedule, 2 replicas, 24 steps, into ``out``."""
    import pytest

    cmd = [
        sys.executable,
        str(ROOT / "tests" / "foreign_diloco.py"),
        "--out",
        str(out),
        "--replicas",
        "2",
        *FOREIGN_FLAGS,
        "--steps",
        "24",
        *extra,
    ]
    # its own session: on a timeout the whole tree (its lighthouse's parent and the workers) is killed
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("foreign_diloco.py: Timeout expired after 240 s (its process group killed)")
    if proc.returncode != 0:
        pytest.fail(f"foreign_diloco.py failed:\n{stdout[-3000:]}\n{stderr[-3000:]}")
    return out


# Small and fast on 2 CPU cores.
SMALL = ["--width", "32", "--batch-size", "4", "--seq-len", "16"]
# The recovery tests' run: 3 groups, F=2, H=10, tau=3, 100 ms of compute a step, so a group
# killed or stalled at step 15 has time to come back, heal and commit before the run ends.
RECOVERY_RUN = [*SMALL, "--replicas", "3", "--fragments", "2", "--sync-every", "10", "--fragment-sync-delay", "3"]
RECOVERY_RUN += ["--step-sleep-ms", "100"]

TIMELINE_WIDTH_PX = 1600  # compare draws timeline.png this wide


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) of a PNG file, from its header."""
    head = path.read_bytes()[:32]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


# --- trace JSON edits (decoded chrome traces, plain dicts) -----------------------------------


def torchft_events(steps, t0: float = 0.0, window: int = 4, delay: int = 2, pid: int = 1) -> list[dict]:
    """``ProfilerStep#k`` spans (10 us apart, 5 us long) with a ``torchft::local_sgd`` send at
    local step w - tau and a sync at w (FOREIGN's schedule by default): the smallest trace that
    holds torchft evidence."""
    ev = []
    for k in steps:
        ts = t0 + 10.0 * k
        ev.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{k}",
                "ts": ts,
                "dur": 5.0,
                "pid": pid,
                "tid": 1,
            }
        )
        if k % window == window - delay:
            ev.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": "torchft::local_sgd::prepare_sync",
                    "ts": ts + 1,
                    "dur": 1.0,
                    "pid": pid,
                    "tid": 1,
                }
            )
        if k % window == 0:
            ev.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": "torchft::local_sgd::perform_sync",
                    "ts": ts + 2,
                    "dur": 1.0,
                    "pid": pid,
                    "tid": 1,
                }
            )
    return ev


def read(path: Path) -> dict:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def write(path: Path, d: dict) -> None:
    data = json.dumps(d).encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)


def steps(d: dict) -> dict[int, dict]:
    """Step number -> step span (ftrun::step#S when present, else ProfilerStep#k = step k)."""
    out: dict[int, dict] = {}
    for rx in (FTRUN_STEP_RE, PROFILER_STEP_RE):
        for e in d["traceEvents"]:
            m = rx.match(e.get("name", "")) if e.get("ph") == "X" else None
            if m:
                out[int(m[1])] = e
        if out:
            return out
    raise AssertionError("no step spans")


def spans(d: dict, name: str, step: int) -> list[dict]:
    s = steps(d)[step]
    return [
        e
        for e in d["traceEvents"]
        if e.get("ph") == "X" and e.get("name") == name and s["ts"] <= e["ts"] <= s["ts"] + s["dur"]
    ]


def nested(d: dict, outer: dict) -> list[dict]:
    return [
        e
        for e in d["traceEvents"]
        if e.get("ph") == "X"
        and e.get("tid") == outer["tid"]
        and e.get("pid") == outer["pid"]
        and outer["ts"] <= e["ts"] <= outer["ts"] + outer["dur"]
    ]


def move_send(d: dict, step: int) -> None:
    """Shift the send at ``step`` (prepare_sync and everything nested in it) into the next step."""
    (ps,) = spans(d, LABELS.prepare_sync, step)
    delta = steps(d)[step + 1]["ts"] + 1.0 - ps["ts"]
    for e in nested(d, ps):
        e["ts"] += delta


def drop_sync(d: dict, step: int) -> None:
    (pf,) = spans(d, LABELS.perform_sync, step)
    d["traceEvents"].remove(pf)


def send_ops(d: dict, step: int) -> list[dict]:
    (ps,) = spans(d, LABELS.prepare_sync, step)
    return [e for e in nested(d, ps) if e.get("name") in LABELS.c10d_allreduce]


def swap_send_sizes(d: dict, a: int, b: int) -> None:
    """The sends at steps ``a`` and ``b`` trade fragments (what each allreduced is swapped).

    Same number of allreduces: swap their ``Input Dims``. Otherwise swap the two sends'
    whole span trees in time (prepare_sync with everything nested in it).
    """
    oa, ob = send_ops(d, a), send_ops(d, b)
    if len(oa) == len(ob):
        for x, y in zip(oa, ob, strict=False):
            x["args"]["Input Dims"], y["args"]["Input Dims"] = y["args"]["Input Dims"], x["args"]["Input Dims"]
        return
    (pa,), (pb,) = spans(d, LABELS.prepare_sync, a), spans(d, LABELS.prepare_sync, b)
    ta, tb = nested(d, pa), nested(d, pb)
    shift = pb["ts"] - pa["ts"]
    for e in ta:
        e["ts"] += shift
    for e in tb:
        e["ts"] -= shift


# --- JUnit XML (--junit) ------------------------------------------------------------

# What the JUnit XSD (Jenkins' / Ant's junit-10.xsd) requires of each element.
JUNIT_REQUIRED = {
    "testsuite": {"name", "tests", "failures", "errors"},
    "testcase": {"name", "classname"},
}


def validate_junit(path: Path) -> ET.Element:
    """Parse ``path`` and check what the JUnit schema requires: a testsuites root of testsuite
    elements, each with its required attributes and counts that match its testcases; a testcase
    holds at most one of failure/error/skipped, a failure with a message and its text."""
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    suites = list(root)
    assert suites and all(s.tag == "testsuite" for s in suites)
    total = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for s in suites:
        assert JUNIT_REQUIRED["testsuite"] <= set(s.attrib), s.attrib
        cases = s.findall("testcase")
        assert len(list(s)) == len(cases)
        counts = {
            "tests": len(cases),
            "failures": sum(c.find("failure") is not None for c in cases),
            "errors": sum(c.find("error") is not None for c in cases),
            "skipped": sum(c.find("skipped") is not None for c in cases),
        }
        for k, v in counts.items():
            assert int(s.get(k, "0")) == v, (k, s.attrib)
            total[k] += v
        for c in cases:
            assert JUNIT_REQUIRED["testcase"] <= set(c.attrib), c.attrib
            outcome = [x for x in c if x.tag in ("failure", "error", "skipped")]
            assert len(outcome) <= 1
            for x in c:
                assert x.tag in ("failure", "error", "skipped", "system-out", "system-err")
            f = c.find("failure")
            if f is not None:
                assert f.get("message") and f.text and f.get("message") == f.text.splitlines()[0]
    for k, v in total.items():
        assert int(root.get(k)) == v
    return root


def junit_cases(root: ET.Element) -> dict[tuple[str, str], ET.Element]:
    return {(c.get("classname"), c.get("name")): c for c in root.iter("testcase")}


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
        for key in list(self.seen):  # a process first seen between its fork and its exec showed its
            st = stats.get(key[0])  # parent's command line: the latest one read is kept
            if st and st[2] == key[1]:
                self.seen[key] = _cmdline(key[0]) or self.seen[key]
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
        """summary.json read by its type (``layout.read_train_summary``: one that is not a
        ``TrainSummary`` fails the test), as JSON data."""
        return msgspec.to_builtins(layout.read_train_summary(self.run_dir))

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
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}
    )
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
            tail = f"{stdout[-2000:]}\n{stderr[-2000:]}"
            raise AssertionError(f"ftrun train did not finish in {timeout}s:\n{tail}") from None
    finally:
        wall = time.monotonic() - t0
        watch.stop()
    left = survivors(watch, str(run_dir))
    if left:
        for pid, start in list(watch.seen):  # don't leak into the next test
            if live(pid, start):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    return TrainRun(run_dir, proc.returncode, stdout, stderr, wall, sorted(watch.seen.values()), left)


def _kill_seen(proc: subprocess.Popen, watch: TreeWatch) -> None:
    for pid, start in [(proc.pid, 0), *watch.seen]:
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


# --- hand-made run dirs ---------------------------------------------------------------------


def train_manifest(**fields) -> dict:
    """A ``manifest.json`` of ``ftrun train`` (``ftrun.layout.Manifest``) as JSON data: the one of
    tests/data/cpu_run, with ``fields`` replaced."""
    return {**json.loads((ROOT / "tests" / "data" / "cpu_run" / "manifest.json").read_text()), **fields}


def train_summary(**fields) -> dict:
    """A ``summary.json`` of ``ftrun train`` (``ftrun.layout.TrainSummary``) as JSON data: two groups
    that ran 60 steps of F=2 H=20 tau=5 on gloo without a fault, with ``fields`` replaced."""
    replicas = [
        dict(
            replica=r,
            steps=60,
            last_step=60,
            steps_per_s=28.05 + r,
            commits=6,
            failed_commits=r,
            final_loss=2.0225 - r / 10,
            final_manager_step=6,
            lost=None,
        )
        for r in (0, 1)
    ]
    return {
        "run_dir": "run",
        "ok": True,
        "wall_s": 10.5,
        "mode": "streaming",
        "schedule": {"fragments": 2, "sync_every": 20, "fragment_sync_delay": 5, "steps": 60},
        "backend": "gloo",
        "link": None,
        "devices": [],
        "replicas": replicas,
        "agreement": {"ok": True, "commits_checked": 6, "disagreements": [], "groups_here": 2, "groups_in_job": 2},
        "numerics": None,
        "failures": [],
        "traces": [],
        "traces_note": None,
        "manifest": "run/manifest.json",
        "versions": {},
        "faults": {"faults": [], "restarts": 0, "heals": [], "quorum_changes": [], "commits_lost": 0},
        "recovery": [],
        "format": 2,  # ftrun.layout.FORMAT
        **fields,
    }


def recovery_record(**fields) -> dict:
    """One entry of summary.json's ``recovery`` (``ftrun.layout.RecoveryRecord``) as JSON data:
    kill 1@25 back with a commit 7.6 s later, its relaunch the largest phase, with ``fields`` replaced."""
    return {
        "fault": "kill 1@25",
        "replica": 1,
        "fault_at": 1000.0,
        "phases": {"relaunch": 3.25},
        "unaccounted_s": 0.1,
        "total_s": 7.6,
        "largest_phase": "relaunch",
        **fields,
    }


def event_record(step: int | None, **fields) -> dict:
    """One event-log line (``ftrun.layout.EventRecord``) as JSON data: a plain step that sent and
    synced nothing, with ``fields`` set on top."""
    return {
        "step": step,
        "manager_step": 0,
        "manager_step_after": 0,
        "participants": None,
        "quorum_id": None,
        "loss": 0.0,
        "step_time_s": 0.0,
        "restart": 0,
        "sent": None,
        "synced": None,
        "commit": None,
        "fingerprint": None,
        "t": 0.0,
        **fields,
    }


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
    return [
        ev["name"] for ev in trace.get("traceEvents", []) if ev.get("ph") == "X" and isinstance(ev.get("name"), str)
    ]


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


# A native crash inside torch's profiler or Gloo in a torchft script ftrun did not write (under
# ``ftrun launch``: "free(): invalid pointer" right after kineto's profiler_start, or a SIGSEGV), seen
# about once in a loaded suite run, or a worker of it left waiting forever in torchft's
# ``perform_sync`` wait after its peer ended (seen once in a clean CI run, with --fail-commit: the
# script kills it a minute later, "hung after a peer ended"): rerun once, and only for those signatures.
NATIVE_CRASH = pytest.mark.flaky(
    reruns=1, only_rerun=[r"SIGSEGV", r"free\(\): invalid pointer", r"Timeout expired", r"hung after a peer ended"]
)


def patched_torchft(root: Path, module: str, old: str, new: str) -> dict[str, str]:
    """A copy of the installed ``torchft`` under ``root`` with ``old`` replaced by ``new`` in
    ``module`` (every other file a symlink to the installed one); the environment that puts it
    first on ``PYTHONPATH`` (a torchft bug patched back in, the venv untouched)."""
    import importlib.util

    spec = importlib.util.find_spec("torchft")
    assert spec is not None and spec.origin is not None
    installed = Path(spec.origin).parent
    pkg = root / "torchft"
    pkg.mkdir(parents=True)
    for entry in installed.iterdir():
        if entry.name not in (module, "__pycache__"):
            (pkg / entry.name).symlink_to(entry)
    source = (installed / module).read_text()
    assert source.count(old) == 1, f"torchft's {module} changed: {old!r} not found once"
    (pkg / module).write_text(source.replace(old, new))
    return {"PYTHONPATH": os.pathsep.join(x for x in (str(root), os.environ.get("PYTHONPATH", "")) if x)}


def flat(output: str) -> str:
    """``output`` whitespace-normalised (rich wraps long lines)."""
    return " ".join(output.split())


def failed_commits_run(tmp_path: Path, steps: tuple[int, ...] = (10, 20), fired: list[dict] | None = None) -> Path:
    """CPU_RUN with its ranks' commits at ``steps`` failed (``commit: false``), as torchft 0.2's
    Baby groups or a failing quantized allreduce leave them; ``fired``: the manifest's fired faults."""
    run = tmp_path / "run"
    shutil.copytree(CPU_RUN, run)
    for log in (run / layout.EVENT_LOGS).glob("replica*_rank*.jsonl"):
        lines = log.read_text().splitlines()
        for i, text in enumerate(lines):
            if any(text.startswith(f'{{"step": {s},') for s in steps):
                assert '"commit": true' in text
                lines[i] = text.replace('"commit": true', '"commit": false')
        log.write_text("\n".join(lines) + "\n")
    if fired is not None:
        m = msgspec.json.decode((run / layout.MANIFEST).read_bytes())
        m["faults"]["fired"] = fired
        (run / layout.MANIFEST).write_bytes(msgspec.json.encode(m))
    return run
