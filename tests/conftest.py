"""Shared fixtures. Keep minimal: each fixture runs real training once per session."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from train_fixtures import SMALL, TrainRun, run_foreign, run_train, write_toml


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


def _train_args(name: str, out: Path) -> list[str]:
    """The flags of the session's shared run ``name`` (see :func:`shared_run`); files it reads go in ``out``."""
    if name == "streaming":  # F=2, H=20, tau=5 (the preset); auto window [21, 40]; --json: train's report
        return ["--mode", "streaming", "--steps", "40", *SMALL, "--json"]
    if name == "baseline":  # plain DiLoCo (F=1, tau=0), H=4, on a text file; auto window [5, 8]
        data = out / "corpus.txt"
        data.write_text("the quick brown fox jumps over the lazy dog. " * 40)
        return ["--mode", "baseline", "--sync-every", "4", "--steps", "8", "--data", str(data), *SMALL]
    if name == "f3":  # F=3 (blocks 3), H=12, tau=1 from a TOML file; flags win over steps, width, profile
        cfg = write_toml(
            out / "f3.toml",
            {
                "mode": "streaming",
                "fragments": 3,
                "sync-every": 12,
                "fragment_sync_delay": 1,
                "blocks": 3,
                "steps": 100,
                "width": 64,
                "profile": "none",
                "seed": 7,
            },
        )
        # the window 2..12 holds a send of each fragment (steps 3, 7, 11): the mutation tests swap two
        return ["--config", str(cfg), "--steps", "12", "--profile", "2:12", *SMALL]
    raise KeyError(name)


TRAIN_RUNS = ("streaming", "baseline", "f3")


@pytest.fixture(scope="session")
def shared_run(tmp_path_factory) -> Callable[[str], TrainRun]:
    """``shared_run(name)`` -> the :class:`TrainRun` of ``ftrun train`` (2 replicas, the small model)
    of config ``name`` in ``TRAIN_RUNS``, trained once per session and read by every test that
    needs a run of that kind (its exit code, process tree, run dir, stdout). Not checked here:
    tests/e2e/test_train_e2e.py asserts that each one completed and tore down."""
    cache: dict[str, TrainRun] = {}

    def get(name: str) -> TrainRun:
        if name not in cache:
            out = tmp_path_factory.mktemp(f"train-{name}")
            cache[name] = run_train(out, name, *_train_args(name, out), timeout=400)
        return cache[name]

    return get


@pytest.fixture(scope="session")
def ftrun_run(shared_run) -> Callable[[str], Path]:
    """``ftrun_run(name)`` -> the run dir of ``shared_run(name)``; fails the test if that run failed."""

    def get(name: str) -> Path:
        run = shared_run(name)
        if run.rc != 0:
            pytest.fail(f"ftrun train {name} failed:\n{run.explain()}")
        return run.run_dir

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
