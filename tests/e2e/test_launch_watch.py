"""``ftrun.launch.watch`` on stand-in groups (shell one-liners): kills by time and by log line,
restarts, lost groups, a crash, ``--timeout``. Starts processes, so e2e; a few seconds in all."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from ftrun.fault_flags import parse_launch_kill
from ftrun.launch.groups import Group
from ftrun.launch.watch import LaunchState, stop_groups, watch

pytestmark = pytest.mark.e2e


def _group(tmp_path: Path, r: int, code: str) -> Group:
    return Group(
        r,
        [sys.executable, "-u", "-c", code],
        {"PATH": "/usr/bin:/bin"},
        tmp_path / "logs" / f"replica{r}.log",
        cwd=tmp_path / "groups" / f"replica{r}",
    )


def _run(tmp_path, groups, **kw) -> LaunchState:
    state = LaunchState(tmp_path, groups, **kw)
    state.started = time.monotonic()
    for g in groups:
        g.start()
    try:
        watch(state, lambda s: None, poll_s=0.05)
    finally:
        stop_groups(state)
    return state


LOOP = "import time\nfor i in range(200):\n    print('tick', i, flush=True); time.sleep(0.05)\n"


def test_line_kill_fires_once_and_restart_finishes(tmp_path):
    g = _group(
        tmp_path,
        0,
        "import os,time\nn=os.environ.get('FTRUN_RESTART')\nprint('go', n, flush=True)\n"
        "time.sleep(0.3 if n else 30)\nprint('done', flush=True)\n",
    )
    state = _run(tmp_path, [g], kills=[parse_launch_kill("0@line:^go None", 1)], restarts=1)
    assert state.failures == [] and g.exit_codes == [-9, 0]
    assert len(state.fired) == 1 and state.fired[0].trigger == "go None"
    assert state.tails[0].last == "done" and (tmp_path / "groups" / "replica0").is_dir()


def test_time_kill_sigterm_without_restart_is_lost_others_carry_on(tmp_path):
    a = _group(tmp_path, 0, LOOP)
    b = _group(tmp_path, 1, "print('short', flush=True)\n")
    state = _run(tmp_path, [a, b], kills=[parse_launch_kill("0@0.5s:sigterm", 2)])
    assert state.failures == [] and state.status == {0: "lost", 1: "exited"}
    assert a.exit_codes == [-15] and state.lost[0].startswith("SIGTERM at")


def test_crash_names_group_error_and_log(tmp_path):
    a = _group(tmp_path, 0, LOOP)
    b = _group(tmp_path, 1, "raise ValueError('bad lr 7')\n")
    state = _run(tmp_path, [a, b])
    assert len(state.failures) == 1 and state.failed_group == 1
    f = state.failures[0]
    assert f.startswith("replica group 1 exited with code 1: ValueError: bad lr 7") and str(b.log) in f
    assert a.proc.poll() is not None  # the others are stopped


def test_timeout_names_the_group_that_joined_no_quorum(tmp_path):
    joins = (
        "import time\nprint('[Replica a_0] got lighthouse quorum LighthouseQuorumResponse', flush=True)\n"
        "time.sleep(5)\n"
    )
    a = _group(tmp_path, 0, joins)
    b = _group(tmp_path, 1, LOOP)
    state = _run(tmp_path, [a, b], timeout_s=0.8)
    assert len(state.failures) == 1 and state.failed_group == 1
    assert state.failures[0].startswith("replica group 1 joined no quorum within --timeout 0.8 s"), state.failures
    assert str(b.log) in state.failures[0] and "last log line: 'tick" in state.failures[0]
    assert state.quorums_joined == {0: 1, 1: 0}
