"""Issue 42: nothing left running however a command ends (real processes, tiny runs).

* ``ftrun view`` ended by SIGHUP (a closed terminal) or SIGKILL left TensorBoard's worker
  processes (re-parented to init) and its ``ftrun-view-*`` temp dir (item 2);
* ``ftrun train`` hung up exited 129 with no line and no ``stopped`` record;
* ``scripts/two_hosts.sh``: a failing group 1 left group 0's ``ftrun train`` orphaned (item 3);
* ``scripts/slurm_ftrun.sbatch`` failed the job when its lighthouse port was taken (item 12).
"""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from train_fixtures import FTRUN, SMALL, TreeWatch, survivors

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
URL_RE = re.compile(r"^view: http://127\.0\.0\.1:\d+/#pytorch_profiler$")


@pytest.fixture(scope="module")
def run_dir(ftrun_run) -> Path:
    """A profiled run for ``ftrun view`` to serve: the session's streaming run (trained once)."""
    return ftrun_run("streaming")


def _as_from_a_terminal() -> None:
    """SIGHUP at its default, as for a command typed in a terminal: a suite run under ``nohup``
    passes SIGHUP ignored to its children, and ftrun rightly keeps an ignored SIGHUP ignored."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _view(run_dir: Path, tmp: Path) -> tuple[subprocess.Popen, Path]:
    """A started view (its URL printed) and its temp dir."""
    err = tmp / "view.err"
    proc = subprocess.Popen(
        [*FTRUN, "view", str(run_dir), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=err.open("wb"),
        text=True,
        preexec_fn=_as_from_a_terminal,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout or ()], daemon=True).start()
    try:
        line = lines.get(timeout=120).rstrip("\n")
    except queue.Empty:
        proc.kill()
        pytest.fail(f"no URL in 120 s: {err.read_text()}")
    assert URL_RE.match(line), (line, err.read_text())
    tb = [p for p in _children(proc.pid) if "tensorboard.main" in _cmdline(p)]
    assert len(tb) == 1, tb
    logdir = Path(_cmdline(tb[0]).split("--logdir ", 1)[1].split(" ", 1)[0])
    assert logdir.parent.name.startswith("ftrun-view-")
    return proc, logdir.parent


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
                out.append(int(d.name))
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _wait_for_plugin_workers(watch: TreeWatch, timeout_s: float = 60.0) -> None:
    """The profiler plugin's multiprocessing workers: what a SIGKILLed view used to leave."""
    deadline = time.monotonic() + timeout_s
    while not any("multiprocessing" in cmd for cmd in watch.seen.values()):
        assert time.monotonic() < deadline, f"no plugin worker in {timeout_s:g} s: {watch.seen}"
        time.sleep(0.2)


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGKILL])
def test_view_ended_by_sighup_or_sigkill_leaves_no_process_and_no_temp_dir(run_dir, tmp_path, sig):
    proc, tmp = _view(run_dir, tmp_path)
    watch = TreeWatch(proc.pid)
    try:
        _wait_for_plugin_workers(watch)
        proc.send_signal(sig)
        code = proc.wait(timeout=15)
    finally:
        watch.stop()
        if proc.poll() is None:
            proc.kill()
    left = survivors(watch, str(tmp), within_s=10.0)
    assert not left, f"alive 10 s after {sig.name}: {left}"
    deadline = time.monotonic() + 5
    while tmp.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not tmp.exists(), f"{tmp} left after {sig.name}"
    err = (tmp_path / "view.err").read_text()
    if sig == signal.SIGHUP:
        assert code == 130 and "view: stopped by SIGHUP" in err and "Traceback" not in err, (code, err)
    else:
        assert code == -signal.SIGKILL


def test_train_hung_up_says_so_reaps_its_children_and_records_the_stop(tmp_path):
    cmd = [*FTRUN, "train", "--steps", "400", "--step-sleep-ms", "50", "--profile", "none", *SMALL]
    proc = subprocess.Popen(
        [*cmd, "--out", str(tmp_path), "--run-name", "hup"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_as_from_a_terminal,
    )
    watch = TreeWatch(proc.pid)
    events = tmp_path / "hup" / "events" / "replica0_rank0.jsonl"
    try:
        deadline = time.monotonic() + 180
        while not (events.is_file() and events.stat().st_size > 0):  # training: the groups are up
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        proc.send_signal(signal.SIGHUP)
        out, err = proc.communicate(timeout=60)
    finally:
        watch.stop()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines[-1].startswith("error: stopped by SIGHUP (hung up: its terminal was closed); all children stopped;")
    assert "Traceback" not in err
    assert '"event":"stopped"' in (tmp_path / "hup" / "events" / "run.jsonl").read_text().replace(" ", "")
    assert not survivors(watch, str(tmp_path / "hup"), within_s=5.0)


FAKE_FTRUN = r"""#!/usr/bin/env bash
# ftrun for scripts/two_hosts.sh: a lighthouse that serves until stopped; group 0 trains "for
# ever"; group 1 fails at once. Each writes its pid to $PIDS.
echo "$$ $1 ${*: -1}" >> "$PIDS"
case "$1" in
  lighthouse) echo "lighthouse: http://127.0.0.1:1"; exec sleep 600 ;;
  train) case " $* " in *" --replica-group-id 1 "*) sleep 1; echo "error: group 1 failed" >&2; exit 1 ;; esac
         exec sleep 600 ;;
esac
exit 0
"""


def test_two_hosts_script_stops_every_child_when_a_group_fails(tmp_path):
    fake = tmp_path / "ftrun"
    fake.write_text(FAKE_FTRUN)
    fake.chmod(0o755)
    pids = tmp_path / "pids"
    env = dict(os.environ, FTRUN=str(fake), PIDS=str(pids), OUT=str(tmp_path / "out"))
    t0 = time.monotonic()
    res = subprocess.run(
        ["bash", str(ROOT / "scripts" / "two_hosts.sh")], env=env, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 1, (res.returncode, res.stdout, res.stderr)
    assert time.monotonic() - t0 < 30
    started = [int(line.split()[0]) for line in pids.read_text().splitlines()]
    assert len(started) == 3, pids.read_text()  # the lighthouse and both groups
    deadline = time.monotonic() + 5
    while (alive := [p for p in started if Path(f"/proc/{p}").exists() and "sleep" in _cmdline(p)]) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.1)
    assert not alive, f"left running: {[(p, _cmdline(p)) for p in alive]}"


def _fake_slurm(bin_dir: Path) -> None:
    """scontrol (one node, n1 at 127.0.0.1) and an srun that records its arguments."""
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(
        '#!/usr/bin/env bash\ncase "$2" in hostnames) echo n1 ;; node) echo "NodeName=n1 NodeAddr=127.0.0.1" ;; esac\n'
    )
    (bin_dir / "srun").write_text('#!/usr/bin/env bash\necho "srun $*" >> "$SRUN_LOG"\nexit 0\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)


def _busy(port: int) -> socket.socket | None:
    """Hold ``port`` (None when another process already holds it: taken either way)."""
    s = socket.socket()
    try:
        s.bind(("0.0.0.0", port))
        s.listen()
    except OSError:
        s.close()
        return None
    return s


def test_slurm_script_takes_a_free_port_when_the_default_is_taken(tmp_path):
    """Item 12: a second lighthouse on the first node failed the job ("Address already in use")."""
    port = 29510  # the script's default
    _fake_slurm(tmp_path / "bin")
    wrapper = tmp_path / "ftrun"  # the real lighthouse; no inspection of the (fake) nodes' runs
    wrapper.write_text(f'#!/usr/bin/env bash\n[ "$1" = inspect-trace ] && exit 0\nexec {" ".join(FTRUN)} "$@"\n')
    wrapper.chmod(0o755)
    env = dict(
        os.environ,
        PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        FTRUN=str(wrapper),
        SLURM_JOB_NODELIST="n1",
        SLURM_JOB_NUM_NODES="1",
        SLURM_JOB_ID="42",
        SRUN_LOG=str(tmp_path / "srun.log"),
        OUT=str(tmp_path / "out"),
    )
    env.pop("LIGHTHOUSE_PORT", None)
    script = ["bash", str(ROOT / "scripts" / "slurm_ftrun.sbatch")]
    busy = _busy(port)
    try:
        res = subprocess.run([*script, "--steps", "4"], env=env, capture_output=True, text=True, timeout=120)
        # a port the user chose is not replaced: the job fails, saying why
        given = subprocess.run(
            script, env=dict(env, LIGHTHOUSE_PORT=str(port)), capture_output=True, text=True, timeout=120
        )
    finally:
        if busy is not None:
            busy.close()
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert f"port {port} is in use" in res.stderr, res.stderr
    m = re.search(r"lighthouse on n1 \(127\.0\.0\.1:(\d+)\)", res.stdout)
    assert m and int(m[1]) not in (port, 0), res.stdout
    srun = (tmp_path / "srun.log").read_text()
    assert f" 127.0.0.1 {m[1]} 1 " in srun, srun  # the nodes are told the port it took
    assert given.returncode == 1 and "the lighthouse did not start" in given.stderr, (given.stdout, given.stderr)
    assert "in use" in given.stderr
