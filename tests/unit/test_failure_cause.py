"""How the launcher tells why a group failed: from the rank's structured meta record (error,
phase), and only for a rank that died before it could write one, from its log. Unit tests."""

from __future__ import annotations

import json
from pathlib import Path

from ftrun import layout
from ftrun.config import RunConfig
from ftrun.launch.supervise import RunState, group_error


def _group_error(run_dir: Path, replica: int, since: int = 0) -> tuple[str, str | None]:
    return group_error(run_dir, replica, 2, since)  # groups of 2 ranks


def test_meta_error_and_phase_win_over_the_log(tmp_path: Path) -> None:
    layout.meta_file(tmp_path, 1, 1).parent.mkdir(parents=True)
    layout.meta_file(tmp_path, 1, 0).write_text(json.dumps({"replica": 1, "rank": 0, "status": "running"}))
    layout.meta_file(tmp_path, 1, 1).write_text(
        json.dumps(
            {
                "replica": 1,
                "rank": 1,
                "status": "failed",
                "error": "RuntimeError: quorum timed out",
                "error_type": "RuntimeError",
                "phase": "quorum",
            }
        )
    )
    layout.group_log(tmp_path, 1).parent.mkdir(parents=True)
    layout.group_log(tmp_path, 1).write_text("ValueError: something else in the log\n")
    assert _group_error(tmp_path, 1) == ("RuntimeError: quorum timed out", "quorum")


def test_without_a_meta_error_the_log_names_the_cause_and_no_phase(tmp_path: Path) -> None:
    log = layout.group_log(tmp_path, 0)
    log.parent.mkdir(parents=True)
    log.write_text("old incarnation\nKeyError: 'x'\n")
    since = len(log.read_bytes())
    with log.open("a") as f:
        f.write("[rank0]: ModuleNotFoundError: No module named 'nope'\n")
    assert _group_error(tmp_path, 0, since) == ("ModuleNotFoundError: No module named 'nope'", None)
    assert _group_error(tmp_path, 0) == ("KeyError: 'x'", None)


def test_a_rank_records_the_wait_it_failed_in(tmp_path: Path) -> None:
    import pytest

    from ftrun.worker.meta import RankMeta
    from ftrun.worker.whereabouts import Whereabouts

    where = Whereabouts(tmp_path, 0, enabled=False)

    def quorum() -> None:
        raise TimeoutError("no quorum within 60 s")

    assert where.around("sync", lambda: 3)() == 3 and where.failed_in is None
    with pytest.raises(TimeoutError) as exc:
        where.around("quorum", quorum)()
    meta = RankMeta(layout.meta_file(tmp_path, 0, 0), layout.RankMeta(replica=0, rank=0))
    meta.failed(exc.value, where.failed_in)
    got = json.loads(layout.meta_file(tmp_path, 0, 0).read_text())
    assert (got["status"], got["error"], got["error_type"], got["phase"]) == (
        "failed",
        "TimeoutError: no quorum within 60 s",
        "TimeoutError",
        "quorum",
    )


# torchrun 2.13's own report when a rank dies by a signal (captured from a real run of a script
# that SIGKILLs itself): the rank wrote no exception, only torchrun says what happened.
TORCHRUN_SIGKILL = """\
step 1
E1201 08:41:04.364000 15334 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) local_rank: 0 (pid: 15339) of binary: /x/.venv/bin/python
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/x/.venv/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 383, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\x20
======================================================
ftrun.worker.main FAILED
------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_08:41:00
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 15339)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 15339
======================================================
"""  # noqa: E501 (torchrun's lines, as captured)


def test_a_rank_killed_by_a_signal_is_reported_with_the_signal(tmp_path: Path) -> None:
    """Issue 24 item 13: it used to say "no error message in the log" (exit code 1)."""
    log = layout.group_log(tmp_path, 1)
    log.parent.mkdir(parents=True)
    log.write_text(TORCHRUN_SIGKILL)
    reason, phase = _group_error(tmp_path, 1)
    assert reason == "rank 1 was killed by SIGKILL (signal 9)" and phase is None, reason


# The same death of a rank forked from its agent (ftrun.worker.agent): torch's multiprocessing
# notes the exit first, as an exception in the agent's log lines, which are never the cause.
FORKED_SIGKILL = TORCHRUN_SIGKILL.replace(
    "of binary: /x/.venv/bin/python\n",
    "of fn: run_script_path (start_method: fork)\n"
    "E1201 08:41:04.364000 15334 torch/distributed/elastic/multiprocessing/api.py:836] "
    "torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with signal SIGKILL\n",
).replace("ftrun.worker.main FAILED", "run_script_path FAILED")


def test_a_forked_rank_killed_by_a_signal_is_reported_with_the_signal_alone(tmp_path: Path) -> None:
    assert "ProcessExitedException" in FORKED_SIGKILL
    log = layout.group_log(tmp_path, 1)
    log.parent.mkdir(parents=True)
    log.write_text(FORKED_SIGKILL)
    reason, phase = _group_error(tmp_path, 1)
    assert reason == "rank 1 was killed by SIGKILL (signal 9)" and phase is None, reason


def test_launch_names_the_signal_too(tmp_path: Path) -> None:
    from ftrun.launch.groups import Group
    from ftrun.launch.watch import group_error

    log = tmp_path / "replica0.log"
    log.write_text(TORCHRUN_SIGKILL.replace("ftrun.worker.main", "train_diloco.py"))
    assert group_error(Group(0, [], {}, log)) == "rank 1 was killed by SIGKILL (signal 9)"


def test_an_exit_by_a_signal_is_not_called_an_exit_code() -> None:
    from ftrun.launch.diagnose import exit_description

    assert exit_description(1) == "exited with code 1"
    assert exit_description(-9) == "was killed by SIGKILL (signal 9)"
    assert exit_description(-200) == "was killed by signal 200"


# --- a disk that fills mid-run (issue 24 item 15): one line, never a traceback -----------------


def test_a_full_disk_under_the_run_event_log_is_one_line(tmp_path: Path) -> None:
    import pytest

    from ftrun.errors import RunFailed

    st = RunState(RunConfig(), tmp_path, job_id="j", run_event_log=Path("/dev/full"))  # every write: ENOSPC
    with pytest.raises(RunFailed) as e:
        st.log_run_event("group_done", replica=0, step=3)
    msg = str(e.value)
    assert "/dev/full" in msg and "No space left on device" in msg and "\n" not in msg, msg


def test_a_full_disk_under_ftrun_log_prints_no_logging_traceback(tmp_path: Path, capsys) -> None:
    import logging

    from ftrun import runlog

    layout.run_log(tmp_path).parent.mkdir(parents=True)
    layout.run_log(tmp_path).symlink_to("/dev/full")
    h = runlog.attach(tmp_path)
    try:
        logging.getLogger("ftrun.test").info("a line that cannot be written")
    finally:
        runlog.detach(h)
    assert "Logging error" not in capsys.readouterr().err


def test_the_cli_turns_a_full_disk_anywhere_into_one_line(capsys) -> None:
    import errno
    import os

    import pytest
    import typer

    from ftrun.cli import guarded

    def body():
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/runs/x/traces/replica0.json")

    with pytest.raises(typer.Exit) as e:
        guarded(body)
    assert e.value.exit_code == 1
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "No space left on device" in err[0] and "/runs/x/traces/replica0.json" in err[0], err
