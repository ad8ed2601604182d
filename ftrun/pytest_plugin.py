"""ftrun's pytest plugin (entry point ``pytest11``: ``ftrun``; ``-p no:ftrun`` turns it off).

* fixture ``ftrun_train``: trains ``ftrun_config`` (a small streaming-DiLoCo run: 2 replica
  groups, F=2 H=8 tau=2, 16 steps, a tiny model) in a fresh temporary dir and returns the
  ``ftrun.Run``. Override or parametrize ``ftrun_config`` (a dict of ``ftrun train``'s
  settings, as a ``--config`` file spells them) — or parametrize ``ftrun_train`` indirectly with
  a dict merged over it. Tests using it get the ``ftrun`` marker (``-m "not ftrun"`` skips them:
  they start real processes and take seconds each). A training that fails raises
  ``ftrun.TrainFailed`` in the test's setup.
* ``assert_schedule(report)``: fails with the table of failing rows (replica, rank, kind,
  expected→observed step and fragment, problem); ``assert_numerics(report)``: fails on a
  numeric problem, warns (``NotChecked``) when the report carries no numeric check.
* ``--ftrun-keep``: keep the run dirs of failed tests (listed at the end, under pytest's
  temporary dirs: ``--basetemp``, or the last 3 sessions'); others are removed after their test.

Loaded into every pytest session of the environment, so it imports nothing but pytest until a
test uses it (``ftrun.api`` only inside the fixture and the helpers).
"""

from __future__ import annotations

import shutil
import warnings
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ftrun.api import ConfigValue, Report, Run

SMALL_CONFIG: dict[str, ConfigValue] = {  # config fields by key (``ftrun.api.train``'s dict)
    "mode": "streaming",
    "replicas": 2,
    "fragments": 2,
    "sync_every": 8,
    "fragment_sync_delay": 2,
    "steps": 16,
    "width": 32,
    "batch_size": 4,
    "seq_len": 16,
}

_REPORTS = pytest.StashKey[dict]()  # item -> {"setup"|"call"|"teardown": TestReport}
_KEPT = pytest.StashKey[list]()  # config -> run dirs kept
_REMOVED_FAILED = pytest.StashKey[list]()  # config -> node ids of failed tests whose run dir was removed


class NotChecked(UserWarning):
    """What a test asked ftrun to check had no evidence (e.g. a run without the numeric check)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("ftrun").addoption(
        "--ftrun-keep",
        action="store_true",
        default=False,
        help="ftrun: keep the run dirs of failed tests that trained with ftrun_train (listed at the end).",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "ftrun: trains with ftrun (real processes, seconds each); set on tests using ftrun_train"
    )
    config.stash[_KEPT] = []
    config.stash[_REMOVED_FAILED] = []


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "ftrun_train" in getattr(item, "fixturenames", ()):
            item.add_marker("ftrun")


@pytest.hookimpl(hookwrapper=True)  # the old-style wrapper: pytest 7 too
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    rep = outcome.get_result()
    item.stash.setdefault(_REPORTS, {})[rep.when] = rep


@pytest.fixture
def ftrun_config() -> dict[str, ConfigValue]:
    """What ``ftrun_train`` trains: override (or parametrize) this fixture to change it."""
    return dict(SMALL_CONFIG)


@pytest.fixture
def ftrun_train(
    request: pytest.FixtureRequest, ftrun_config: dict[str, ConfigValue], tmp_path_factory: pytest.TempPathFactory
) -> Run:
    """Train ``ftrun_config`` (updated by an indirect parameter) under a fresh temporary dir."""
    import importlib

    api = importlib.import_module("ftrun.api")  # sys.modules' own (as ftrun.__getattr__ does)

    config = {**ftrun_config, **getattr(request, "param", {})}
    config.setdefault("run_name", "run")
    config.setdefault("check", False)  # the test checks the run itself (assert_schedule: the failing rows' table)
    out = tmp_path_factory.mktemp("ftrun")

    def done() -> None:
        reps = request.node.stash.get(_REPORTS, {})
        failed = any(r.failed for r in reps.values())
        if failed and request.config.getoption("ftrun_keep"):
            request.config.stash[_KEPT].append((request.node.nodeid, out / str(config["run_name"])))
            return
        if failed:
            request.config.stash[_REMOVED_FAILED].append(request.node.nodeid)
        shutil.rmtree(out, ignore_errors=True)  # the dir this fixture made (mktemp): nobody else's

    request.addfinalizer(done)
    return api.train(config, out=out)


def _report(report: Report | Run) -> Report:
    from ftrun.api import Report, Run

    if isinstance(report, Run):
        return report.report
    if not isinstance(report, Report):
        raise TypeError(f"assert_schedule: expected an ftrun Report or Run, got {type(report).__name__}")
    return report


def assert_schedule(report: Report | Run) -> None:
    """Fail unless every send and sync landed as torchft's schedule says (the verdict of
    ``inspect-trace``), with the failing rows as the message."""
    __tracebackhide__ = True
    r = _report(report)
    if not r.ok:
        problems = r.problems
        s = r.schedule
        raise AssertionError(
            f"ftrun: schedule check failed, {len(problems)} problem(s) "
            f"(F={s.fragments} H={s.sync_every} tau={s.fragment_sync_delay}):\n"
            + (r.failing_table() or "\n".join(problems))
        )


def assert_numerics(report: Report | Run, *, required: bool = False) -> None:
    """Fail on any numeric problem of the outer steps (a damaged or missing event-log record
    included, even when no sync counted as checked), with the problems' lines as the CLI prints
    them. A report whose numeric check had nothing to check and found nothing wrong warns
    ``NotChecked`` (``required=True``: fails) — it is never a pass."""
    __tracebackhide__ = True
    r = _report(report)
    n = r.numerics
    if n is None:
        msg = "ftrun: numerics not checked (this run or this ftrun has no numeric check)"
        if required:
            raise AssertionError(msg)
        warnings.warn(NotChecked(msg), stacklevel=2)
        return
    # the CLI's lines (``Report.problems``: "numerics: <text>"), not the problems' records
    problems = [x for x in r.problems if x.startswith("numerics: ")]
    if problems:
        raise AssertionError(
            f"ftrun: numeric check failed, {len(problems)} problem(s) ({n['checked']} sync(s) checked):\n"
            + "\n".join(problems)
        )


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    kept, removed = config.stash.get(_KEPT, []), config.stash.get(_REMOVED_FAILED, [])
    if kept:
        terminalreporter.section("ftrun: run dirs of failed tests kept")
        for nodeid, path in kept:
            terminalreporter.write_line(f"{nodeid}: {path}")
    if removed:
        terminalreporter.write_line(
            f"ftrun: {len(removed)} failed test(s) trained; rerun with --ftrun-keep to keep their run dirs"
        )
