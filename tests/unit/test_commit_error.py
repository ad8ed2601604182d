"""Why a commit failed (issue 45): the worker logs torchft's own error for the round
(``EventRecord.commit_error``, from ``Manager.errored()``), the check reads it back into
``FailedCommit.torchft_error`` and names the distinct ones in the failed-commit problem, the
inspect caption and the JUnit case. Unit tests on hand-built event logs and fake torchft objects:
no process."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import msgspec

from ftrun import event_log, layout
from ftrun.check import commits as commit_checks
from ftrun.check.analyze import analyze
from ftrun.commands.run_check import check_run
from ftrun.report.inspect_view import render_text
from ftrun.report.junit import inspect_junit
from ftrun.torchft_compat import manager_error
from train_fixtures import CPU_RUN, event_record

NCCL7 = "RuntimeError: NCCL Error 7: NCCL operation in progress"


class _WithTraceback(Exception):
    """torchft's ``ExceptionWithTraceback``: ``str`` is the message and the whole traceback."""

    def __init__(self, e: Exception) -> None:
        self.original_exception = e
        super().__init__(f"{e}\nTraceback (most recent call last):\n  File ...")


class _Manager:
    def __init__(self, err: BaseException | None) -> None:
        self._errored = err

    def errored(self) -> BaseException | None:
        return self._errored

    def start_quorum(self) -> None:
        self._errored = None

    def should_commit(self) -> bool:
        return self._errored is None


def test_the_managers_error_is_one_bounded_line_of_the_exception_it_wraps() -> None:
    assert manager_error(_Manager(None)) is None
    inner = RuntimeError("NCCL Error 7: NCCL operation in progress")
    assert manager_error(_Manager(_WithTraceback(inner))) is inner
    assert layout.commit_error_text(inner) == NCCL7
    bare = ValueError("x")
    assert manager_error(_Manager(bare)) is bare  # not wrapped: itself
    assert layout.commit_error_text(TimeoutError()) == "TimeoutError"
    long = layout.commit_error_text(RuntimeError("\n  first line " + "y" * 500 + "\nsecond line"))
    assert len(long) == layout.COMMIT_ERROR_CHARS and long.startswith("RuntimeError: first line y")
    assert long.endswith("...") and "second" not in long


def test_the_recorder_logs_the_error_of_a_failed_commit_only(tmp_path: Path) -> None:
    """A sync whose commit failed carries the Manager's error; a committed one, and the record
    after, have no ``commit_error`` key (absent, not null)."""
    from ftrun.worker.recorder import StepRecorder

    class Frag:
        original_parameters: dict = {}

        def __init__(self, manager: _Manager) -> None:
            self.manager = manager

        def prepare_sync(self) -> None:
            pass

        def perform_sync(self) -> bool:
            return self.manager.should_commit()

        def wait(self) -> None:
            pass

    class DiLoCo:
        def __init__(self, manager: _Manager) -> None:
            self._fragments = [Frag(manager)]

    log = tmp_path / "replica0_rank0.jsonl"
    manager = _Manager(None)
    diloco = DiLoCo(manager)
    rec = StepRecorder(log)
    rec.attach_manager(manager)
    rec.attach(diloco)  # wraps the fragment's perform_sync: what DiLoCo calls
    fields = dict(manager_step=0, manager_step_after=0, participants=2, quorum_id=1, loss=1.0)
    fields |= dict(step_time_s=0.1, restart=0)
    manager._errored = _WithTraceback(RuntimeError("NCCL Error 7: NCCL operation in progress"))
    assert diloco._fragments[0].perform_sync() is False
    rec.end_step(step=1, **fields)
    manager.start_quorum()
    diloco._fragments[0].perform_sync()  # committed: no error
    rec.end_step(step=2, **fields)
    rec.end_step(step=3, **fields)
    rec.close()
    lines = [json.loads(t) for t in log.read_text().splitlines()]
    assert lines[0]["commit"] is False and lines[0]["commit_error"] == NCCL7
    assert lines[1]["commit"] is True and "commit_error" not in lines[1] and "commit_error" not in lines[2]
    assert [r.commit_error for r in event_log.read_event_log(log)][0] == NCCL7


def _with_errors(tmp_path: Path, errors: dict[int, str], replicas: tuple[int, ...] = (0, 1)) -> Path:
    """CPU_RUN with each rank's commit at each step of ``errors`` failed, logged with that error
    (``commit_error``) on ``replicas``' ranks, without it on the others' (an older ftrun's log)."""
    run = tmp_path / "run"
    shutil.copytree(CPU_RUN, run)
    for log in (run / layout.EVENT_LOGS).glob("replica*_rank*.jsonl"):
        replica = int(log.name.removeprefix("replica").split("_")[0])
        recs = [json.loads(t) for t in log.read_text().splitlines()]
        for r in recs:
            if r["step"] in errors:
                assert r["commit"] is True
                r["commit"] = False
                if replica in replicas:
                    r["commit_error"] = errors[r["step"]]
        log.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return run


def test_the_failed_commit_problem_names_torchfts_error(tmp_path: Path) -> None:
    """The GPU run of issue 45: every quantized allreduce failed with NCCL error 7; the verdict
    says so, once per rank whatever the number of rounds; an old log without the field reads
    as before."""
    run = _with_errors(tmp_path, {10: NCCL7, 20: NCCL7}, replicas=(0,))
    v = check_run([run], []).verdict
    assert v.verdict == "fail"
    assert v.problems == [
        f"replica 0 rank 0: 2 commit(s) failed (sync steps 10, 20; event log: commit: false; torchft: {NCCL7}) "
        "and no injected fault explains it (--allow-failed-commits to accept)",
        "replica 1 rank 0: 2 commit(s) failed (sync steps 10, 20; event log: commit: false) "
        "and no injected fault explains it (--allow-failed-commits to accept)",
    ]
    report = analyze([run])
    assert [(c.replica, c.sync_step, c.torchft_error) for c in report.failed_commits] == [
        (0, 10, NCCL7),
        (0, 20, NCCL7),
        (1, 10, None),
        (1, 20, None),
    ]
    out = " ".join(render_text(report, width=400).split())  # (the table's caption wraps at its width)
    assert f"2 commit(s) failed, at sync steps [10, 20] (event_log); torchft: {NCCL7}" in out
    assert f"run: {v.problems[0]}" in out
    assert f"(event log: commit: false; torchft: {NCCL7})" in inspect_junit(report)  # its JUnit case
    back = msgspec.json.decode(msgspec.json.encode(report.failed_commits[0].to_json()))
    assert back["torchft_error"] == NCCL7  # report.json's record


def test_distinct_errors_are_named_in_order_and_bounded(tmp_path: Path) -> None:
    def fc(step: int, err: str | None) -> commit_checks.FailedCommit:
        return commit_checks.FailedCommit(0, 0, step, 0, "event_log", torchft_error=err)

    assert commit_checks.torchft_errors([fc(1, None)]) is None
    two = [fc(20, "B: b"), fc(10, "A: a"), fc(30, "A: a"), fc(40, None)]
    assert commit_checks.torchft_errors(two) == "torchft: A: a | B: b"
    many = [fc(s, f"E{s}: x") for s in range(1, 7)]
    assert commit_checks.torchft_errors(many) == "torchft: E1: x | E2: x | E3: x | and 3 other error(s)"
    # a log's text is clipped on reading too: one line, bounded
    run = _with_errors(tmp_path, {10: "RuntimeError: " + "z" * 1000 + "\nTraceback ..."})
    report = analyze([run])
    errs = {c.torchft_error for c in report.failed_commits}
    assert len(errs) == 1 and len(errs.pop() or "") == layout.COMMIT_ERROR_CHARS


def test_an_old_event_record_without_the_field_reads() -> None:
    rec = msgspec.json.decode(json.dumps(event_record(4, commit=False)).encode(), type=layout.EventRecord)
    assert rec.commit is False and rec.commit_error is msgspec.UNSET
    assert commit_checks.from_logs({(0, 0): [rec]})[0].torchft_error is None
