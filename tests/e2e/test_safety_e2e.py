"""End to end: concurrent --overwrite, launches that cannot work, a busy lighthouse port (interrupts: test_teardown).

Each test starts ``ftrun`` as a process; the trainings are a few steps of a tiny model.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from ftrun import layout
from train_fixtures import FTRUN, SMALL

pytestmark = pytest.mark.e2e

STEPS = 12
SHORT = [
    "--steps",
    str(STEPS),
    "--sync-every",
    "4",
    "--fragments",
    "2",
    "--fragment-sync-delay",
    "1",
    "--profile",
    "none",
    "--step-sleep-ms",
    "100",
    *SMALL,
]


def lines_of(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def test_two_concurrent_overwrite_trainings(tmp_path):
    """Two `--run-name same --overwrite` started together: one is refused ("in use by pid N",
    exit 2); the other's event logs hold exactly one line per step."""
    argv = [*FTRUN, "train", "--out", str(tmp_path), "--run-name", "same", "--overwrite", "--json", *SHORT]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=180) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], [(p.returncode, o[1][-2000:]) for p, o in zip(procs, outs, strict=False)]
    refused = next(o for p, o in zip(procs, outs, strict=False) if p.returncode == 2)
    (line,) = lines_of(refused[1])
    assert "in use by pid" in line and "Traceback" not in refused[1], line
    run = tmp_path / "same"
    for r in (0, 1):
        steps = [json.loads(x)["step"] for x in layout.event_log(run, r, 0).read_text().splitlines() if x.strip()]
        assert steps == list(range(1, STEPS + 1)), (r, steps)
    events = [json.loads(x)["event"] for x in layout.run_event_log(run).read_text().splitlines() if x.strip()]
    assert events.count("group_done") == 2 and "group_exit" not in events, events


@pytest.mark.parametrize(
    "args, cause",
    [
        (["--backend", "nccl"], "no GPU visible on this host"),
        (["--width", "200000"], "GiB of memory"),
        (["--lighthouse", "http://127.0.0.1:{port}", "--quorum-timeout", "2"], "Connection refused"),
    ],
    ids=["nccl-without-cuda", "impossible-allocation", "dead-lighthouse"],
)
def test_launch_that_cannot_work_names_its_cause(tmp_path, args, cause):
    if "nccl" in args and list(Path("/dev").glob("nvidia[0-9]*")):
        pytest.skip("this host has a CUDA device")
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = [a.replace("{port}", str(port)) for a in args]
    t0 = time.monotonic()
    res = subprocess.run(
        [*FTRUN, "train", "--out", str(tmp_path), "--run-name", "x", *SHORT, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    wall = time.monotonic() - t0
    (line,) = lines_of(res.stderr)
    assert res.returncode == 2 and cause in line and "To enable traceback" not in line, res.stderr
    assert not (tmp_path / "x").exists()  # refused before anything was created
    assert wall < 30, f"took {wall:.0f} s"


def _catches_sigterm(pid: int) -> bool:
    """ftrun's first code (``ftrun/__init__``) has run: SIGTERM is caught (Python alone does not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("SigCgt:")), 16)
    return bool(mask & (1 << (signal.SIGTERM - 1)))


@pytest.mark.parametrize("when", ["first-code", "0.4s"])
def test_sigint_before_training_starts_is_130(tmp_path, when):
    """A Ctrl-C while the CLI is still importing (right after ftrun's first line ran: the
    issue's "first 50 ms"), or while it prepares the run: exit 130, one line, no traceback.
    (A signal during the interpreter's own start-up, before any ftrun code, is Python's.)"""
    proc = subprocess.Popen(
        [*FTRUN, "train", "--out", str(tmp_path), "--run-name", "early", *SHORT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    t0 = time.monotonic()
    if when == "first-code":
        while not _catches_sigterm(proc.pid) and proc.poll() is None and time.monotonic() - t0 < 30:
            time.sleep(0.001)
    else:
        time.sleep(0.4)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Traceback" not in err and len(lines_of(err)) == 1, err


def test_lighthouse_on_a_busy_port_is_one_line(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        res = subprocess.run(
            [*FTRUN, "lighthouse", "--bind", f"127.0.0.1:{port}", "--min-replicas", "1"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    (line,) = lines_of(res.stderr)
    assert res.returncode == 2 and "in use" in line, res.stderr
    assert res.stdout == ""
