"""Groups' agents forked from a zygote (``ftrun.launch.zygote``, as ``sweep --warm-start`` runs
them), real processes: two ``ftrun train`` parked at a start gate, their agents forked by one
zygote. Each agent leads its own session and process group, its ranks in it; a training stopped
by SIGTERM stops its agents through the zygote (exit 130), one killed by SIGKILL has them killed
by the zygote (its connection closed); the zygote reaps them all and, stopped, leaves nothing
running. About 15 s on 2 CPU cores."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from train_fixtures import SMALL, TreeWatch, _stat, survivors

pytestmark = pytest.mark.e2e


def _children(pid: int) -> list[int]:
    return sorted(p for p in map(int, filter(str.isdigit, os.listdir("/proc"))) if (_stat(p) or (0,))[0] == pid)


def _train(tmp_path: Path, name: str, address: str) -> subprocess.Popen[str]:
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(f'start_gate = "{tmp_path / name}.gate"\n')
    argv = [sys.executable, "-m", "ftrun.cli", "train", "--config", str(cfg), "--out", str(tmp_path)]
    argv += ["--run-name", name, "--steps", "4", "--profile", "none", *SMALL, "--json", "--no-check"]
    from ftrun.launch.zygote import ENV_ZYGOTE

    env = dict(os.environ, **{ENV_ZYGOTE: address})
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _agents_with_ranks(zygote: int, n: int, train: subprocess.Popen[str], timeout_s: float = 120.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert train.poll() is None, train.communicate()
        agents = _children(zygote)
        if len(agents) == n and all(_children(a) for a in agents):
            return agents
        time.sleep(0.1)
    raise AssertionError(f"{n} agents with ranks under the zygote not seen: {_children(zygote)}")


def _gone(pids: list[int], within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if all((_stat(p) or (0, "Z"))[1] == "Z" for p in pids):
            return True
        time.sleep(0.05)
    return False


def test_a_zygotes_agents_stop_and_die_with_their_training(tmp_path):
    from ftrun.launch import zygote

    server = zygote.start(subprocess.DEVNULL)
    watch = TreeWatch(server.proc.pid)
    try:
        term = _train(tmp_path, "a", server.address)
        agents = _agents_with_ranks(server.proc.pid, 2, term)
        for a in agents:  # its own session and process group, its forked ranks in that group
            assert os.getsid(a) == os.getpgid(a) == a
            assert all(os.getpgid(r) == a for r in _children(a))
        ranks = [r for a in agents for r in _children(a)]
        term.send_signal(signal.SIGTERM)
        _, err = term.communicate(timeout=120)
        assert term.returncode == 130, err
        assert _gone(agents + ranks), "a stopped training's agents outlived it"

        killed = _train(tmp_path, "b", server.address)
        agents = _agents_with_ranks(server.proc.pid, 2, killed)
        ranks = [r for a in agents for r in _children(a)]
        killed.kill()
        killed.communicate(timeout=60)
        assert _gone(agents + ranks), "a SIGKILLed training's agents outlived it"
        assert server.proc.poll() is None and _children(server.proc.pid) == []  # serving, every agent reaped
    finally:
        server.stop()
        watch.stop()
    assert server.proc.returncode == 0
    assert survivors(watch, server.path.parent.name) == []
    assert not server.path.parent.exists()
