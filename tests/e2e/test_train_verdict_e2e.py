"""The run says its verdict (issue 40 item 10): ``ftrun train`` checks the traces it captured
with ``inspect-trace``'s analysis, prints the same verdict line and exits 1 on a FAIL;
``--no-check`` skips it. The schedule bug is real: torchft's ``fragment_sync_delay`` ignored, in a
patched copy of the installed torchft put first on the workers' ``PYTHONPATH`` (the venv is
never modified)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from train_fixtures import SMALL, flat, inspect, patched_torchft, run_train

pytestmark = pytest.mark.e2e

# H=10, F=2, tau=2: a fragment is sent 2 steps before its sync (steps 3, 8, 13, 18); 20 steps,
# profiled 11..20 (auto): two sends and two syncs per replica in the window
SHORT = [*SMALL, "--sync-every", "10", "--fragments", "2", "--fragment-sync-delay", "2", "--steps", "20"]

# torchft's DiLoCo prepares (sends) a fragment at local step H/F - tau; the bug sends it at the sync
DELAY_IGNORED = (
    "if self._local_step == self._sync_every - self._fragment_sync_delay:",
    "if self._local_step == self._sync_every:",
)


def verdict_line(output: str) -> str:
    """From the last PASS/FAIL of ``train``'s output (its verdict line: the last it prints) on."""
    text = flat(output)
    at = max(text.rfind("PASS "), text.rfind("FAIL "))
    assert at >= 0, output
    return text[at:]


def said_by_inspect(run_dir: Path, line: str, code: int) -> None:
    """``inspect-trace RUN_DIR`` exits ``code`` and prints ``line`` (train's verdict line) as its own."""
    ins = inspect(str(run_dir))
    assert ins.exit_code == code, ins.output
    assert line in flat(ins.output), (line, ins.output)


@pytest.fixture(scope="module")
def delay_ignored(tmp_path_factory) -> dict[str, str]:
    return patched_torchft(tmp_path_factory.mktemp("torchft-delay-ignored"), "local_sgd.py", *DELAY_IGNORED)


def test_schedule_bug_fails_train_with_inspects_verdict_line(tmp_path, delay_ignored):
    run = run_train(tmp_path, "late", *SHORT, env=delay_ignored, timeout=300)
    assert run.rc == 1, run.explain()
    said = verdict_line(run.stdout)
    assert said.startswith("FAIL ") and "send of fragment" in said and "expected at step" in said, said
    check = run.summary()["check"]
    assert check["verdict"] == "fail" and check["problems"], check
    assert flat(check["line"]) == said  # one verdict, one line
    said_by_inspect(run.run_dir, said, 1)


def test_schedule_bug_with_no_check_exits_0_and_says_not_checked(tmp_path, delay_ignored):
    run = run_train(tmp_path, "late-nocheck", *SHORT, "--no-check", env=delay_ignored, timeout=300)
    assert run.rc == 0, run.explain()
    assert "schedule not checked: --no-check" in flat(run.stdout), run.stdout
    assert "PASS" not in run.stdout and "FAIL" not in run.stdout
    assert run.summary()["check"] == {"verdict": "not checked", "line": None, "why": "--no-check", "problems": []}


def test_clean_run_passes_and_json_has_the_verdict(shared_run):
    """The session's clean streaming run (conftest ``shared_run``, trained with ``--json``)."""
    run = shared_run("streaming")
    assert run.rc == 0, run.explain()
    check = json.loads(run.stdout)["check"]
    assert check["verdict"] == "pass" and check["line"].startswith("PASS ") and check["problems"] == [], check
    said_by_inspect(run.run_dir, flat(check["line"]), 0)


def test_failed_commit_run_passes_from_its_run_dir(tmp_path):
    """A clean ``--fail-commit`` run: the injected failure explains the failed commit; train's
    verdict is inspect-trace's on the same run dir (PASS)."""
    run = run_train(tmp_path, "fc", *SHORT, "--fail-commit", "1@11", timeout=300)
    said = verdict_line(run.stdout)
    assert run.rc == 0 and said.startswith("PASS ") and "failed commits: replica 1: 1" in said, run.explain()
    said_by_inspect(run.run_dir, said, 0)


# (a run with no traces says so once, never PASS: tests/e2e/test_train_e2e.py, on its
# --profile none run)


LAUNCH_SCHED = ["--fragments", "2", "--sync-every", "4", "--fragment-sync-delay", "1"]


@pytest.mark.parametrize("skip", [False, True], ids=["checked", "--no-check"])
def test_launch_of_a_schedule_bug_fails_unless_no_check(tmp_path, delay_ignored, skip):
    """torchft's example under ``ftrun launch`` on the patched torchft: FAIL, exit 1, the verdict
    line and ``summary.check``; with ``--no-check``: exit 0, "schedule not checked" once."""
    import subprocess

    from ftrun import layout
    from train_fixtures import FTRUN

    script = Path(__file__).resolve().parents[1] / "torchft_example.py"
    argv = [*FTRUN, "launch", "--out", str(tmp_path), "--run-name", "l", *LAUNCH_SCHED]
    argv += ["--no-check"] if skip else []
    argv += ["--", str(script), "--manager-steps", "6"]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=300, env={**os.environ, **delay_ignored})
    explain = f"rc={res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    check = layout.read_launch_summary(tmp_path / "l").check
    assert check is not None, explain
    if skip:
        assert res.returncode == 0 and check.verdict == "not checked" and check.why == "--no-check", explain
        assert flat(res.stdout).count("schedule not checked: --no-check") == 1 and "PASS" not in res.stdout
    else:
        assert res.returncode == 1 and check.verdict == "fail" and check.line is not None, explain
        assert verdict_line(res.stdout) == flat(check.line) and check.line.startswith("FAIL ")
        said_by_inspect(tmp_path / "l", flat(check.line), 1)
