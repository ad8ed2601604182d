"""A rank forked from its agent (``ftrun.worker.forked_rank``) ends as a fresh rank's interpreter
would: 0 on success even with a non-daemon thread left (as ``main``'s ``os._exit``), 1 with the
traceback on an exception, killed by SIGTERM whatever handler the agent had; and which agent
arguments fork the ranks (``ftrun.worker.agent.forks_ranks``)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time

import pytest

from ftrun.worker import agent, forked_rank


def _rank(outcome: str, stderr_path: str) -> None:
    """A child of the fork start method (as torch elastic's ``fork``), running ``forked_rank.run``
    over a stand-in for ``ftrun.worker.main.main``."""
    import sys

    import ftrun.worker.main

    sys.stderr = open(stderr_path, "w")  # noqa: SIM115 — the child's stderr until it ends (pytest's is a capture)

    def fake_main(spec_path: str) -> int:
        if outcome == "raise":
            raise RuntimeError(f"rank failed on {spec_path}")
        if outcome == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(10)
        threading.Thread(target=time.sleep, args=(60,)).start()  # non-daemon: must not hold the exit
        return 0

    ftrun.worker.main.main = fake_main  # this child's copy only
    forked_rank.run("SPEC")


def _raise_on_sigterm(signum, frame):  # the agent's handler kind: torch elastic raises on SIGTERM
    raise RuntimeError("the agent's handler ran in the rank")


@pytest.mark.parametrize(("outcome", "code"), [("ok", 0), ("raise", 1), ("sigterm", -signal.SIGTERM)])
def test_a_forked_rank_ends_as_a_fresh_one(tmp_path, outcome, code):
    old = signal.signal(signal.SIGTERM, _raise_on_sigterm)
    try:
        err = tmp_path / "stderr"
        p = multiprocessing.get_context("fork").Process(target=_rank, args=(outcome, str(err)))
        t0 = time.monotonic()
        p.start()
        p.join(30)
    finally:
        signal.signal(signal.SIGTERM, old)
    assert p.exitcode == code, (p.exitcode, err.read_text())
    assert time.monotonic() - t0 < 10  # not held by the thread left running
    text = err.read_text()
    if outcome == "raise":
        assert "Traceback" in text and "RuntimeError: rank failed on SPEC" in text, text
    else:
        assert "agent's handler" not in text, text


def test_only_ftruns_worker_with_torchruns_defaults_forks():
    from torch.distributed.run import parse_args

    base = ["--nnodes", "1", "--nproc-per-node", "1", "--standalone"]
    assert agent.forks_ranks(parse_args([*base, "-m", agent.WORKER, "spec.json"]))
    assert not agent.forks_ranks(parse_args([*base, "script.py"]))  # ftrun launch: a user's script
    assert not agent.forks_ranks(parse_args([*base, "-m", "other.module", "x"]))
    assert not agent.forks_ranks(parse_args([*base, "--start-method", "fork", "-m", agent.WORKER, "s"]))
    assert not agent.forks_ranks(parse_args([*base, "--run-path", "/abs/ftrun/worker/main.py", "s"]))


def test_the_forked_rank_file_is_the_module():
    assert agent.FORKED_RANK.is_file() and agent.FORKED_RANK.samefile(forked_rank.__file__)
