"""``ftrun launch -- SCRIPT.py``: a torchft script written like torchft's example, run unchanged.

tests/torchft_example.py reads REPLICA_GROUP_ID / TORCHFT_LIGHTHOUSE / torchrun's env, calls
``prof.step()`` at the loop top and writes ``output/replica-{K}/profiles/step-{N}.json``
relative to its working directory. Each test checks that no child outlives ``ftrun launch``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import pytest

from ftrun import layout
from train_fixtures import FTRUN, NATIVE_CRASH, TreeWatch, flat, live, survivors

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "torchft_example.py"
SCHED = ["--fragments", "2", "--sync-every", "4", "--fragment-sync-delay", "1"]


@dataclass
class Launch:
    run_dir: Path
    rc: int
    stdout: str
    stderr: str
    survivors: list = field(default_factory=list)
    seen: list = field(default_factory=list)  # command lines of every descendant seen while it ran

    def summary(self) -> layout.LaunchSummary:
        """summary.json by its type (``layout.read_launch_summary``); with ``--json``, also what
        was printed (the same record)."""
        s = layout.read_launch_summary(self.run_dir)
        if self.stdout.lstrip().startswith("{"):
            assert msgspec.json.decode(self.stdout, type=layout.LaunchSummary) == s
        return s

    def explain(self) -> str:
        return f"rc={self.rc}\nstdout:\n{self.stdout[-3000:]}\nstderr:\n{self.stderr[-3000:]}"


def run_launch(out: Path, name: str, *args: str, timeout: float = 150, while_running=None) -> Launch:
    argv = [*FTRUN, "launch", "--out", str(out), "--run-name", name, *args]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watch = TreeWatch(proc.pid)
    try:
        if while_running is not None:
            while_running(proc, out / name)
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for pid, start in [(proc.pid, 0), *watch.seen]:
                if pid == proc.pid or live(pid, start):
                    os.kill(pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            tail = f"{stdout[-2000:]}\n{stderr[-2000:]}"
            raise AssertionError(f"ftrun launch did not finish in {timeout}s:\n{tail}") from None
    finally:
        watch.stop()
    return Launch(
        out / name, proc.returncode, stdout, stderr, survivors(watch, str(out / name)), sorted(watch.seen.values())
    )


@NATIVE_CRASH
def test_launch_finds_traces_and_inspection_passes(tmp_path):
    r = run_launch(tmp_path, "ok", "--json", *SCHED, "--", str(SCRIPT), "--manager-steps", "6")
    assert r.rc == 0, r.explain()
    assert not r.survivors, r.survivors
    s = r.summary()
    assert [g.exit_codes for g in s.groups] == [[0], [0]]
    paths = sorted(Path(t.path).relative_to(r.run_dir).as_posix() for t in s.traces)
    # written relative to each group's own working dir, found there, assigned by directory
    assert paths == [f"groups/replica{k}/output/replica-{k}/profiles/step-10.json" for k in (0, 1)]
    assert [t.replica for t in sorted(s.traces, key=lambda t: t.path)] == [0, 1]
    # torchft's manager logged them
    assert s.quorums_seen is not None and s.quorums_seen >= 1 and all((g.quorums or 0) >= 1 for g in s.groups)
    assert s.inspection is not None and s.inspection["verdict"] == "pass" and s.inspection["events"], s.inspection
    m = layout.read_manifest(r.run_dir)
    assert isinstance(m, layout.LaunchManifest)
    assert m.script == str(SCRIPT) and m.args == ["--manager-steps", "6"]
    assert m.schedule.fragments == 2 and len(m.traces) == 2
    from ftrun.torchft_compat import installed

    rel = installed()  # what the groups ran on: this interpreter's torchft (either release)
    assert (m.versions["torchft_distribution"], m.versions["torchft"], m.versions["torchft_pg_api"]) == (
        rel.distribution,
        rel.version,
        rel.pg_api,
    )
    # the run dir alone is enough for inspect-trace later: no flags
    again = subprocess.run(
        [*FTRUN, "inspect-trace", str(r.run_dir), "--json"], capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["verdict"] == "pass"
    assert json.loads(again.stdout)["versions"]["torchft_distribution"] == rel.distribution
    _numerics_of_every_sync_checked(r, s, m)


def _numerics_of_every_sync_checked(r: Launch, s: layout.LaunchSummary, m: layout.LaunchManifest) -> None:
    """Issue 41 item 3: the launch hook sketched the script's own DiLoCo, the script unchanged:
    6 commits per group, both groups in every round: 6 collective rounds, 12 replica-syncs."""
    assert s.inspection is not None
    num = s.inspection["numerics"]
    assert num["status"] == "checked" and num["problems"] == [] and num["checked"] == 6, num
    assert num["replica_syncs_checked"] == 12 and num["committed"] == 12, num
    text = subprocess.run([*FTRUN, "inspect-trace", str(r.run_dir)], capture_output=True, text=True, timeout=60)
    assert "numerics ok (6 sync(s))" in flat(text.stdout), text.stdout
    assert sorted((e.replica, e.rank) for e in m.event_logs) == [(0, 0), (1, 0)]
    # the hook's entry first on the groups' path; the script's own log lines untouched
    assert (r.run_dir / "hook" / "sitecustomize.py").is_file()
    assert "inner step 1 manager step" in (r.run_dir / "logs" / "replica0.log").read_text()


def test_kill_on_log_line_then_restart(tmp_path):
    r = run_launch(
        tmp_path,
        "kill",
        *SCHED,
        "--kill",
        "1@line:inner step 4 ",
        "--restarts",
        "1",
        "--json",
        "--",
        str(SCRIPT),
        "--manager-steps",
        "6",
        "--step-sleep",
        "0.3",
    )
    assert r.rc == 0, r.explain()
    assert not r.survivors, r.survivors
    s = r.summary()
    assert [f.replica for f in s.faults_fired] == [1]
    assert s.faults_fired[0].signal == "SIGKILL" and "inner step 4 " in s.faults_fired[0].trigger
    assert s.groups[1].exit_codes == [-9, 0] and s.groups[1].restarts == 1
    assert s.groups[0].exit_codes == [0]
    # the relaunched incarnation's trace is found but, its step numbering restarted, not checked
    unchecked = [t for t in s.traces if not t.checked]
    assert [t.replica for t in unchecked] == [1] and s.trace_note is not None and "relaunched" in s.trace_note
    assert s.inspection is not None and s.inspection["verdict"] == "pass" and s.inspection["replicas"] == [0]


def test_group_that_crashes_fails_the_launch_naming_it(tmp_path):
    r = run_launch(tmp_path, "crash", *SCHED, "--", str(SCRIPT), "--manager-steps", "6", "--crash-group", "1")
    assert r.rc == 1, r.explain()
    assert not r.survivors, r.survivors
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert "replica group 1 exited with code 1" in lines[0] and "deliberate crash in replica group 1" in lines[0]
    assert str(r.run_dir / "logs" / "replica1.log") in lines[0]
    assert "Traceback" not in r.stderr


def test_script_without_traces_says_where_it_looked(tmp_path):
    quiet = tmp_path / "quiet.py"
    quiet.write_text("import os\nprint('group', os.environ['REPLICA_GROUP_ID'], os.environ['FTRUN_TRACE_DIR'])\n")
    r = run_launch(tmp_path, "quiet", *SCHED, "--", str(quiet))
    assert r.rc == 2, r.explain()
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "quiet.py wrote no chrome trace" in lines[0], r.stderr
    assert str(r.run_dir / "groups" / "replica0") in lines[0] and str(r.run_dir / "traces" / "replica1") in lines[0]
    log = (r.run_dir / "logs" / "replica1.log").read_text()
    assert f"group 1 {(r.run_dir / 'traces' / 'replica1').resolve()}" in log


NOT_TORCHFT = """\
import os, torch
from torch.profiler import profile, schedule
d = os.environ["FTRUN_TRACE_DIR"]
x = torch.randn(64, 64)
with profile(schedule=schedule(wait=0, warmup=0, active=6),
             on_trace_ready=lambda p: p.export_chrome_trace(os.path.join(d, "step-6.json"))) as prof:
    for _ in range(7):
        prof.step()
        x = x @ x / 64
"""


# a schedule with no send or sync in the script's profiled window: inspection alone once said PASS
# on 0 events for it (with SCHED: FAIL on each expected event); launch now says "nothing checked"
# from the groups' logs before any inspection, whatever the schedule
NOTHING_IN_WINDOW = ["--fragments", "1", "--sync-every", "100", "--fragment-sync-delay", "0"]


def test_script_that_never_touched_torchft_is_nothing_checked(tmp_path):
    """Issue 24 item 4: ProfilerStep# spans only, no quorum: not a PASS on 0 events; exit 1."""
    plain = tmp_path / "plain.py"
    plain.write_text(NOT_TORCHFT)
    r = run_launch(tmp_path, "plain", *NOTHING_IN_WINDOW, "--", str(plain))
    assert r.rc == 1, r.explain()
    assert not r.survivors, r.survivors
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "nothing checked" in lines[0], r.stderr
    assert "never joined a torchft quorum" in lines[0] and "0, 1" in lines[0]
    assert "PASS" not in r.stdout
    assert r.summary().ok is False
    # inspect-trace of the same traces, with either schedule: not torchft traces, never a verdict
    for sched in (NOTHING_IN_WINDOW, SCHED):
        res = subprocess.run([*FTRUN, "inspect-trace", str(r.run_dir), *sched], capture_output=True, text=True)
        assert res.returncode == 2 and "not a torchft (DiLoCo/LocalSGD) trace" in res.stderr, res.stderr
        assert "PASS" not in res.stdout


# SIGTERM (what a scheduler or a supervisor sends); Ctrl-C's SIGINT through the same supervision: test_teardown
@pytest.mark.parametrize("sig", [signal.SIGTERM], ids=["SIGTERM"])
def test_interrupt_stops_every_child(tmp_path, sig):
    def interrupt(proc, run_dir: Path) -> None:
        log = run_dir / "logs" / "replica0.log"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if log.is_file() and "inner step 2 " in log.read_text(errors="replace"):
                break
            time.sleep(0.2)
        else:
            raise AssertionError("training never started")
        proc.send_signal(sig)

    r = run_launch(
        tmp_path,
        "stop",
        *SCHED,
        "--",
        str(SCRIPT),
        "--manager-steps",
        "200",
        "--step-sleep",
        "0.2",
        while_running=interrupt,
    )
    assert r.rc == 130, r.explain()
    assert not r.survivors, r.survivors
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and sig.name in lines[0] and str(r.run_dir) in lines[0], r.stderr
    assert any("torchft_example.py" in c for c in r.seen), r.seen  # the script's ranks ran, and are gone


# A script that escapes a plain process tree: it ignores SIGTERM, and leaves a double-forked,
# setsid daemon (also ignoring SIGTERM) that writes its pid to FTRUN_RUN_DIR/daemon.pid.
ESCAPING = """\
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        pid = os.path.join(os.environ["FTRUN_RUN_DIR"], "daemon.pid")
        open(pid + ".tmp", "w").write(str(os.getpid()))
        os.replace(pid + ".tmp", pid)
        time.sleep(300)
        os._exit(0)
    os._exit(0)
print("daemon started", flush=True)
time.sleep(float(sys.argv[1]))
"""


def _gone_within(pids: list[int], seconds: float) -> tuple[list[int], float]:
    t0 = time.monotonic()
    while True:
        left = [
            p
            for p in pids
            if Path(f"/proc/{p}").exists() and Path(f"/proc/{p}/stat").read_text().split(") ")[1][0] != "Z"
        ]
        if not left or time.monotonic() - t0 > seconds:
            return left, time.monotonic() - t0
        time.sleep(0.1)


@pytest.mark.parametrize("how", ["SIGKILL of launch", "script exits"])
def test_nothing_a_launched_script_starts_outlives_the_launch(tmp_path, how):
    """Issue 24 item 12: the daemon used to survive, and after SIGKILL of ``ftrun launch`` a
    script ignoring SIGTERM lingered for torchrun's 30 s grace. Now each group runs under a
    subreaper: every descendant is gone within 10 s. About 10 s each on 2 CPU cores."""
    script = tmp_path / "escaping.py"
    script.write_text(ESCAPING)
    run_dir = tmp_path / "esc"
    argv = [
        *FTRUN,
        "launch",
        "--out",
        str(tmp_path),
        "--run-name",
        "esc",
        "--replicas",
        "1",
        "--no-inspect",
        "--",
        str(script),
        "300" if how == "SIGKILL of launch" else "0.5",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    watch = TreeWatch(proc.pid)
    daemon = run_dir / "daemon.pid"
    deadline = time.monotonic() + 90
    while not daemon.is_file():
        assert time.monotonic() < deadline and (proc.poll() is None or how == "script exits"), proc.stderr.read()
        time.sleep(0.1)
    pids = [int(daemon.read_text())]
    if how == "SIGKILL of launch":
        time.sleep(0.5)  # the script is sleeping, SIGTERM ignored
        proc.kill()
    proc.wait(timeout=60)
    watch.stop()
    cmds = {pid: cmd for (pid, start), cmd in watch.seen.items() if live(pid, start)}  # pid reuse: not ours
    left, took = _gone_within(pids + list(cmds), 10.0)
    for p in left:  # don't leak into the next test
        os.kill(p, signal.SIGKILL)
    assert not left, f"{how}: alive 10 s later: {[(p, cmds.get(p, 'the daemon')) for p in left]}"
    print(f"{how}: every descendant gone {took:.1f} s after the launch ended")
