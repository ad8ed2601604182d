"""No child of ``ftrun train`` outlives it: after a run, after Ctrl-C / SIGTERM, after a crash.

``run_train`` records every process descending from the ``ftrun train`` process while it
runs (torchrun re-parents nothing we could miss: we poll /proc) and, once it exits, lists
those still alive plus any process whose command line names the run dir.
"""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from ftrun import layout
from ftrun.output import claim_run_dir
from train_fixtures import FTRUN, SMALL, run_train, wait_for_step, write_toml

pytestmark = pytest.mark.e2e  # every test here starts processes (or uses a fixture that trains)

# A run long enough to interrupt: ~200 steps at >= 50 ms each.
LONG = {
    "steps": 200,
    "sync_every": 4,
    "fragments": 2,
    "fragment_sync_delay": 1,
    "profile": "none",
    "step_sleep_ms": 50.0,
}


def _long_config(tmp_path: Path) -> list[str]:
    return ["--config", str(write_toml(tmp_path / "long.toml", LONG)), *SMALL]


def groups_seen(descendants: list[str]) -> bool:
    """The watch saw the groups' processes: an agent (``... -m ftrun.worker.main SPEC``, its ranks
    forked from it show its command line), a fresh rank, or what the training's zygote forked
    (every process forked from it shows the zygote's command line)."""
    return any("ftrun.worker.main" in c or "ftrun.worker.zygote" in c for c in descendants)


def _signal_when_training(sig: int, at_step: int = 3, then: float = 0.0, again: int | None = None):
    def go(proc, run_dir: Path) -> None:
        assert wait_for_step(run_dir, at_step, timeout=60), "training never started"
        time.sleep(then)
        proc.send_signal(sig)
        if again is not None:
            time.sleep(0.3)  # lands while ftrun is stopping its children
            if proc.poll() is None:
                proc.send_signal(again)

    return go


# Ctrl-C's SIGINT; SIGTERM through the same supervision: test_launch_e2e, and to train from Slurm's
# scancel (test_slurm_e2e)
@pytest.mark.parametrize("sig", [signal.SIGINT], ids=["SIGINT"])
def test_interrupted_run_leaves_no_children(tmp_path, sig):
    t0 = time.monotonic()
    r = run_train(tmp_path, "stopped", *_long_config(tmp_path), timeout=90, while_running=_signal_when_training(sig))
    assert r.rc == 130, f"an interrupt exits 130 (not a failure, not death by the signal): {r.explain()}"
    assert "Traceback" not in r.stderr, r.explain()
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and signal.Signals(sig).name in lines[0], r.stderr
    assert groups_seen(r.descendants), r.descendants
    assert not r.survivors, f"left behind after {signal.Signals(sig).name}: {r.survivors}"
    # it stopped promptly, not by finishing the 200 steps
    assert len(r.events(0)) < LONG["steps"]
    assert time.monotonic() - t0 < 60
    # the line names the partial run; inspect-trace knows it for an interrupted run; --overwrite may replace it
    assert str(r.run_dir) in lines[0], lines[0]
    res = subprocess.run([*FTRUN, "inspect-trace", str(r.run_dir)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "interrupted run: no traces were written" in res.stderr, res.stderr
    claim_run_dir(r.run_dir, overwrite=True).release()


def test_second_signal_during_stop_still_stops_everything(tmp_path):
    """Impatient Ctrl-C Ctrl-C: the second signal must not cut the clean-up short."""
    r = run_train(
        tmp_path,
        "twice",
        *_long_config(tmp_path),
        timeout=90,
        while_running=_signal_when_training(signal.SIGINT, again=signal.SIGINT),
    )
    assert r.rc == 130, r.explain()
    assert "Traceback" not in r.stderr, r.explain()
    assert not r.survivors, f"left behind after a second SIGINT: {r.survivors}"


CRASH_HOOK = """
import os, sys, threading, time

def _watch():
    # replica group 1, once training is under way, dies as a real crash would
    log = os.path.join(os.environ["FTRUN_TEST_RUN_DIR"], "events", "replica1_rank0.jsonl")
    while True:
        try:
            with open(log) as f:
                if sum(1 for _ in f) >= {at_step}:
                    os.write(2, b"ftrun-test: injected crash\\n")
                    os._exit(17)
        except OSError:
            pass
        time.sleep(0.02)

try:
    cmd = open("/proc/self/cmdline", "rb").read().split(b"\\0")
except OSError:
    cmd = []
def _start():
    threading.Thread(target=_watch, daemon=True).start()

if b"ftrun.worker.main" in cmd and os.environ.get("REPLICA_GROUP_ID") == "1":
    if b"ftrun.worker.agent" in cmd:  # the group's agent: its ranks are forked from it
        os.register_at_fork(after_in_child=_start)
    else:  # a rank started as a fresh interpreter
        _start()
"""


def test_crashed_group_is_reported_not_hung_on(tmp_path):
    """Replica group 1's rank dies mid-run (a sitecustomize hook in its env): ftrun names the
    group, exits 1 quickly (the surviving group would otherwise block in its allreduce until the
    timeout), and leaves nothing behind."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(textwrap.dedent(CRASH_HOOK).replace("{at_step}", "4"))
    env = {
        "PYTHONPATH": os.pathsep.join([str(hook), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "FTRUN_TEST_RUN_DIR": str(tmp_path / "crash"),
    }
    t0 = time.monotonic()
    # fresh interpreters (the hook runs at their start): a training's zygote would run it once, in itself
    r = run_train(tmp_path, "crash", *_long_config(tmp_path), "--no-fork-agents", timeout=90, env=env)
    wall = time.monotonic() - t0
    assert r.rc == 1, r.explain()
    assert "Traceback" not in r.stderr, r.explain()
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert "replica group 1" in lines[0] and str(layout.group_log(r.run_dir, 1)) in lines[0], lines[0]
    assert "injected crash" in layout.group_log(r.run_dir, 1).read_text()
    assert not r.survivors, r.survivors
    assert wall < 45, f"took {wall:.1f}s to notice the crash"
    assert len(r.events(0)) < LONG["steps"]  # the healthy group was stopped, not left to finish


def test_parent_killed_leaves_no_orphans(tmp_path):
    """ftrun itself SIGKILLed (no handler runs): its children die with it (parent-death signals)."""
    r = run_train(
        tmp_path, "orphans", *_long_config(tmp_path), timeout=90, while_running=_signal_when_training(signal.SIGKILL)
    )
    assert r.rc == -signal.SIGKILL, r.explain()
    assert groups_seen(r.descendants), r.descendants
    assert any("lighthouse_entry" in c for c in r.descendants), r.descendants
    assert not r.survivors, f"orphans after the parent was SIGKILLed: {r.survivors}"


def test_a_disk_full_mid_run_is_one_line_and_stops_everything(tmp_path):
    """Issue 24 item 15: the run's event log becomes unwritable mid-run (``/dev/full``: every
    write is ENOSPC, as on a full disk); it used to end in a traceback from ``log_run_event``."""

    def fill_the_disk(proc, run_dir: Path) -> None:
        assert wait_for_step(run_dir, 3, timeout=60), "training never started"
        log = layout.run_event_log(run_dir)
        tmp = log.with_name("full.tmp")
        tmp.symlink_to("/dev/full")
        os.replace(tmp, log)

    short = {**LONG, "steps": 24, "step_sleep_ms": 20.0}
    r = run_train(
        tmp_path,
        "full",
        "--config",
        str(write_toml(tmp_path / "short.toml", short)),
        *SMALL,
        timeout=90,
        while_running=fill_the_disk,
    )
    assert r.rc == 1, r.explain()
    assert "Traceback" not in r.stderr and "Logging error" not in r.stderr, r.explain()
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "No space left on device" in lines[0] and "run.jsonl" in lines[0], r.stderr
    assert not r.survivors, r.survivors
