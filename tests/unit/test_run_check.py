"""The check ``train`` and ``launch`` run on what they captured (``ftrun.commands.run_check``):
inspect-trace's analysis and its very verdict line, "not checked" (never a pass) without traces
or with ``--no-check``, the setting as one config field. Unit tests: no process."""

from __future__ import annotations

import shutil
from pathlib import Path

import msgspec
import pytest
import typer.main

from ftrun import config as cfgmod, layout
from ftrun.check.analyze import analyze
from ftrun.cli import app
from ftrun.commands.run_check import NO_TRACES, SKIPPED, check_run, print_check
from ftrun.errors import BadInput, RunFailed
from ftrun.report.inspect_view import render_text, verdict_line
from train_fixtures import CPU_RUN, failed_commits_run, train_summary, write_toml


def test_a_run_dir_gets_inspects_verdict_line(capsys) -> None:
    checked = check_run([CPU_RUN], ["traces/x.json"])
    assert checked.judged and not checked.failed and checked.report is not None
    v = checked.verdict
    assert v.verdict == "pass" and v.why is None and v.problems == []
    inspected = render_text(analyze([CPU_RUN]), width=400).splitlines()[-1]  # inspect-trace's last line
    assert v.line == inspected and v.line.startswith("PASS 8 events on 2 worker(s) landed as expected")
    print_check(checked)
    assert " ".join(capsys.readouterr().out.split()) == v.line


def test_a_failing_run_dir_fails_with_the_first_problem(tmp_path) -> None:
    run = tmp_path / "run"
    shutil.copytree(CPU_RUN, run)
    m = msgspec.json.decode((run / layout.MANIFEST).read_bytes())
    m["schedule"]["fragment_sync_delay"] -= 1  # the traces now show every send one step "early"
    (run / layout.MANIFEST).write_bytes(msgspec.json.encode(m))
    report = analyze([run])
    assert not report.ok
    checked = check_run([run], ["traces/x.json"])
    assert checked.failed and checked.verdict.verdict == "fail"
    assert checked.verdict.line == verdict_line(report).plain and checked.verdict.line.startswith("FAIL ")
    assert checked.verdict.problems[0] == report.problems()[0]


@pytest.mark.parametrize(
    ("traces", "enabled", "why_not", "why"),
    [
        ([], True, None, NO_TRACES),
        (["t.json"], False, None, SKIPPED),
        (["t.json"], True, "only replica group 1's traces are on this host", "only replica group 1's traces"),
    ],
    ids=["no traces", "--no-check", "one host of several"],
)
def test_nothing_judged_is_not_checked_never_pass(capsys, traces, enabled, why_not, why) -> None:
    checked = check_run([CPU_RUN], traces, enabled=enabled, why_not=why_not)
    assert checked.verdict.verdict == "not checked" and checked.verdict.line is None
    assert checked.verdict.why.startswith(why) and checked.report is None
    assert checked.judged and not checked.failed
    checked.raise_unjudged()  # nothing to raise: the run's exit code is its own
    print_check(checked)
    out = capsys.readouterr().out
    assert out.count("schedule not checked: ") == 1 and "PASS" not in out


def test_traces_nothing_can_judge_fail_the_run(tmp_path, capsys) -> None:
    (tmp_path / "t.json").write_text('{"traceEvents": []}')
    checked = check_run([tmp_path], ["t.json"])
    assert not checked.judged and checked.failed and checked.verdict.verdict == "not checked"
    assert checked.verdict.why
    with pytest.raises((RunFailed, BadInput)):
        checked.raise_unjudged()
    print_check(checked)
    assert capsys.readouterr().out == ""  # the caller's one error line says why


def _params(command: str) -> dict[str, list[str]]:
    cmd = typer.main.get_command(app).commands[command]
    return {p.name: [*p.opts, *getattr(p, "secondary_opts", [])] for p in cmd.params}


def test_the_setting_is_one_config_field_check(tmp_path) -> None:
    f = cfgmod.fields()["check"]
    assert f.kind is bool and f.default is True and f.opt.commands == ("train",)
    assert sorted(_params("train")["check"]) == ["--check", "--no-check"]
    assert "check" not in _params("compare") and "check" not in _params("sweep")  # they check themselves
    assert cfgmod.build(check=False).verdict.check is False
    assert (
        cfgmod.build(file_values=cfgmod.load_toml(write_toml(tmp_path / "c.toml", {"check": False}))).get("check")
        is False
    )
    assert "--no-check" in _params("launch")["no_inspect"]


def test_the_summary_carries_the_verdict_typed() -> None:
    d = train_summary()
    assert layout.TrainSummary.__struct_fields__.count("check") == 1
    old = msgspec.json.decode(msgspec.json.encode(d), type=layout.TrainSummary)
    assert old.check is None  # a summary of an ftrun before the field
    d["check"] = {"verdict": "fail", "line": "FAIL 1 problem(s) in 8 events", "problems": ["p"]}
    s = msgspec.json.decode(msgspec.json.encode(d), type=layout.TrainSummary)
    assert s.check == layout.RunCheck(verdict="fail", line="FAIL 1 problem(s) in 8 events", problems=["p"])
    d["check"]["verdict"] = "ok"
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(msgspec.json.encode(d), type=layout.TrainSummary)


def test_api_train_raises_on_a_failed_check_as_the_cli_exits_1(tmp_path, monkeypatch) -> None:
    import ftrun
    import ftrun.commands.train as train_cmd

    line = "FAIL 1 problem(s) in 8 events; first: replica 0 rank 0: send of fragment 0 expected at step 3"

    def fake(cfg, overwrite=False, json_out=False, quiet=False, on_run_dir=None):
        run = Path(cfg.out) / cfg.run_name
        run.mkdir(parents=True)
        on_run_dir(run)
        check = {"verdict": "fail", "line": line, "problems": ["p"]}
        (run / layout.SUMMARY).write_text(msgspec.json.encode(train_summary(run_dir=str(run), check=check)).decode())
        return 1  # trained, its check FAILed: what ftrun train exits with

    monkeypatch.setattr(train_cmd, "train", fake)
    with pytest.raises(ftrun.TrainFailed) as e:
        ftrun.train({"steps": 20, "run_name": "late"}, out=tmp_path)
    assert str(e.value) == f"{line} (run dir {tmp_path / 'late'})" and e.value.run.path == tmp_path / "late"


def test_without_traces_unexplained_failed_commits_still_fail_the_run(tmp_path, capsys) -> None:
    """Issue 45: a --profile none run whose every commit failed said "not checked" and ok. The
    failed-commit rule reads the event logs, so it holds without traces: FAIL, the schedule still
    "not checked" (its why kept), the problems inspect-trace names for the same logs."""
    run = failed_commits_run(tmp_path)
    checked = check_run([run], [])
    v = checked.verdict
    assert checked.failed and checked.judged and checked.report is None
    assert v.verdict == "fail" and v.why == NO_TRACES
    assert v.problems == analyze([run], allow_failed_commits=False).run_problems_by_class["commits"]  # one rule
    assert v.problems == [
        f"replica {r} rank 0: 2 commit(s) failed (sync steps 10, 20; event log: commit: false) and no injected "
        "fault explains it (--allow-failed-commits to accept)"
        for r in (0, 1)
    ]
    assert (
        v.line is not None
        and v.line.startswith("FAIL 2 problem(s)")
        and f"schedule not checked ({NO_TRACES})" in v.line
    )
    checked.raise_unjudged()  # judged: the exit code says it (1), no error line
    print_check(checked)
    out = " ".join(capsys.readouterr().out.split())
    assert out == v.line and "PASS" not in out


def test_without_traces_failed_commits_a_fault_explains_are_no_failure(tmp_path) -> None:
    fired = [
        {"replica": r, "step": s, "action": "fail-commit", "fired_at": 1.0, "fired_step": s}
        for r in (0, 1)
        for s in (10, 20)
    ]
    checked = check_run([failed_commits_run(tmp_path, fired=fired)], [])
    assert checked.verdict == layout.RunCheck(verdict="not checked", why=NO_TRACES) and not checked.failed
