"""Shared fixtures. Keep minimal: each fixture runs real training once per session."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from train_fixtures import FTRUN, run_foreign


@pytest.fixture(scope="session")
def foreign_traces(tmp_path_factory) -> Path:
    """Two replicas of torchft's own DiLoCo (tests/foreign_diloco.py): DIR/r{0,1}/step-{12,24}.json.

    F=2, H=8, tau=2; profiler windows ProfilerStep#2..#11 and #14..#23.
    """
    return run_foreign(tmp_path_factory.mktemp("foreign"))


@pytest.fixture(scope="session")
def foreign_noshapes(tmp_path_factory) -> Path:
    """As ``foreign_traces``, profiled as torchft's train_diloco.py does (``record_shapes=False``),
    with fragments of different depth (fragment 0: 2 parameters, fragment 1: 4)."""
    return run_foreign(tmp_path_factory.mktemp("foreign-noshapes"), "--no-shapes", "--uneven")


TRAIN_CONFIGS = {
    "streaming": ["--mode", "streaming"],  # F=2, H=20, tau=5
    "baseline": ["--mode", "baseline"],  # F=1, H=20, tau=0
    "f3": ["--fragments", "3", "--sync-every", "18", "--fragment-sync-delay", "2"],
}


@pytest.fixture(scope="session")
def ftrun_run(tmp_path_factory):
    """``ftrun_run(name)`` -> run dir of ``ftrun train`` (2 replicas, 40 steps), trained once per config."""
    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in cache:
            out = tmp_path_factory.mktemp(f"train-{name}")
            cmd = [
                *FTRUN,
                "train",
                *TRAIN_CONFIGS[name],
                "--steps",
                "40",
                "--replicas",
                "2",
                "--out",
                str(out),
                "--run-name",
                name,
            ]
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
            if res.returncode != 0:
                pytest.fail(f"ftrun train {name} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
            cache[name] = out / name
        return cache[name]

    return get


def pytest_collection_finish(session):
    """Build matplotlib's font cache once, before any test runs and outside the no-process guard.

    On a fresh machine (empty ``MPLCONFIGDIR``) matplotlib's first ``font_manager`` use runs
    ``fc-list`` to list the system fonts; the guard below would fail whichever unit test drew
    first. Loading it here (once per session, only when a selected test may draw) keeps the rule
    intact for the tests themselves."""
    if not session.items:
        return
    try:
        from matplotlib import font_manager
    except ImportError:  # no matplotlib: nothing draws
        return
    font_manager.fontManager  # noqa: B018 - loading the module builds (or reads) the cache


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Unit tests start no process: outside ``@pytest.mark.e2e`` tests (fixtures included),
    starting one fails the test, naming the rule."""
    if item.get_closest_marker("e2e"):
        yield
        return
    real = subprocess.Popen._execute_child

    def refuse(self, args, *a, **k):
        raise AssertionError(f"a unit test started a process ({args!r}); mark the test @pytest.mark.e2e")

    subprocess.Popen._execute_child = refuse
    try:
        yield
    finally:
        subprocess.Popen._execute_child = real
