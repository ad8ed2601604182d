"""The one supervision policy (``launch.policy``) and the one log diagnosis (``launch.diagnose``)
that ``train``'s supervisor and ``launch``'s watcher share. Unit tests: no process."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftrun.launch import diagnose, policy


@pytest.mark.parametrize(
    "code, restarts, max_restarts, fault, want",
    [
        (0, 0, 0, None, "done"),
        (0, 0, 1, "SIGKILL at step 3", "done"),
        (1, 0, 1, None, "restart"),
        (-9, 0, 1, "SIGKILL at step 3", "restart"),  # restarts left: relaunched, killed on purpose or not
        (-9, 1, 1, "SIGKILL at step 3", "lost"),
        (-9, 1, 1, None, "fail"),
        (1, 0, 0, None, "fail"),
    ],
)
def test_exit_outcomes(code, restarts, max_restarts, fault, want):
    assert policy.on_exit(code, restarts, max_restarts, fault) == want


def test_failure_line_names_group_exit_restarts_reason_and_log():
    msg = policy.group_failed(
        1,
        -9,
        2,
        "rank 0 was killed by SIGKILL (signal 9)",
        Path("/r/logs/replica1.log"),
        at="at step 7 (manager step 6)",
    )
    assert msg == (
        "replica group 1 was killed by SIGKILL (signal 9) at step 7 (manager step 6) after 2 restart(s): "
        "rank 0 was killed by SIGKILL (signal 9); see /r/logs/replica1.log"
    )
    got = policy.group_failed(0, 2, 0, "KeyError: 'x'", Path("l"))
    assert got == "replica group 0 exited with code 2: KeyError: 'x'; see l"


def test_no_lighthouse_here_is_no_failure():
    assert policy.lighthouse_failed(None) is None


def test_error_line_skips_torchrun_banner_and_prefers_exceptions():
    text = "info: starting\nwarning: an error budget\n[rank0]: ValueError: bad lr 7\nChildFailedError: x\n"
    assert diagnose.error_line(text) == "ValueError: bad lr 7"
    assert diagnose.error_line("all fine\nno error here\n") == "no error here"
    assert diagnose.error_line("all fine\n") == ""
    assert diagnose.describe("all fine\nlast\n") == "last line: last" and diagnose.describe("") == "no output"


def test_last_line_prefers_the_latest_error():
    assert diagnose.last_line("a\nConnection error, retrying\nb\n") == "Connection error, retrying"
    assert diagnose.last_line("a\nb\n") == "b"


def test_read_log_from_an_offset_and_bounded(tmp_path: Path, monkeypatch):
    log = tmp_path / "g.log"
    log.write_text("old KeyError: 'x'\nnew line\n")
    assert diagnose.read_log(log, len("old KeyError: 'x'\n")) == "new line\n"
    assert diagnose.read_log(tmp_path / "missing.log") is None
    monkeypatch.setattr(diagnose, "READ_LIMIT", 40)
    log.write_text("HEAD Error: first\n" + "x" * 1000 + "\ntail rank : 1\n")
    got = diagnose.read_log(log)
    assert got.startswith("HEAD Error: first") and got.endswith("tail rank : 1\n") and len(got) == 41


def test_ftrun_error_is_the_commands_one_line():
    assert diagnose.ftrun_error("progress\nerror: replica group 1 exited\n") == "replica group 1 exited"
    assert diagnose.ftrun_error("Traceback ...\nKeyError: 'x'\n") == "KeyError: 'x'"
    assert diagnose.ftrun_error("") is None
