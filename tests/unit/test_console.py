"""What ftrun prints: text literally (no rich markup, no emoji codes), at most 80 columns on an
80-column terminal, and error lines that name the real flag (or ``FILE: key``).

Unit tests: no process is started. The views are fed real-looking data; the CLI runs in
process through typer's CliRunner, and only for --help or bad input (nothing trains).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import msgspec
import pytest
import typer.main

from ftrun import config as cfgmod, layout
from ftrun.check.commits import FailedCommit
from ftrun.check.result import EventResult, Report, ReportSchedule, StepNumbering, SyncFigures, WorkerReport
from ftrun.cli import app
from ftrun.console import console
from ftrun.errors import BadInput
from ftrun.launch.progress import GroupProgress
from ftrun.link_spec import parse_link
from ftrun.report import compare_view, inspect_view, train_view
from train_fixtures import cli, one_line, train_summary

WIDTH = 80
TRICKY = "x:smile:y [rank0] [/y] [enforce fail at alloc.cpp:83] 5:100"  # markup, emoji codes, a closing tag


@pytest.fixture(autouse=True)
def _columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", str(WIDTH))


def _lines(text: str) -> list[str]:
    return text.splitlines()


def _fits(text: str) -> None:
    long = [ln for ln in _lines(text) if len(ln.rstrip()) > WIDTH]
    assert not long, f"{len(long)} line(s) over {WIDTH} columns:\n" + "\n".join(long)


def _flat(text: str) -> str:
    """Output with line breaks and padding collapsed: wrapped text reads as one string."""
    return re.sub(r"\s+", " ", text)


# --- real-looking data ------------------------------------------------------------------------


def summary(run_dir: str = "ws/x[/y]", failures: list[str] | None = None, **fields) -> layout.TrainSummary:
    link = dict(bandwidth_bps=260e6, latency_s=0.01, emulated=True, describe="260 Mbit/s, 10 ms")
    data = train_summary(
        run_dir=run_dir,
        manifest=f"{run_dir}/manifest.json",
        link=link,
        traces=["a", "b"],
        failures=failures if failures is not None else [],
        **fields,
    )
    return msgspec.convert(data, layout.TrainSummary)


def report(
    problem: str | None = None, notes: list[str] | None = None, run_dir: str = "profiles/streaming-demo"
) -> Report:
    events = []
    for r in (0, 1):
        for step, kind, frag in ((25, "send", 0), (30, "sync", 0), (35, "send", 1), (40, "sync", 1)):
            e = EventResult(
                replica=r,
                rank=0,
                kind=kind,
                fragment=frag,
                expected_fragment=frag,
                expected_step=step,
                observed_step=step,
                ok=True,
                fragment_checked=True,
            )
            if kind == "sync":
                e.sync = SyncFigures(
                    exposed_comm_ms=12345.88,
                    hidden_comm_ms=21.97,
                    send_to_done_ms=23.85,
                    comm_union_ms=None,
                    should_commit_ms=0.65,
                    exposed_data_ms=12345.88,
                    exposed_control_ms=42.5,
                    quorum_ms=None,
                    serialized=False,
                    serialized_collectives=0,
                    send_captured=True,
                )
            events.append(e)
    if problem:
        e = events[1]
        e.ok, e.observed_step, e.problem = False, 31, problem
        e.sync = msgspec.structs.replace(e.sync, serialized=True, serialized_collectives=3)
    events[3].notes = list(notes or [])
    workers = [
        WorkerReport(
            replica=r,
            rank=0,
            source="manifest",
            files=["f"],
            step_source="ftrun",
            step_ranges=[(21, 40)],
            failed_cycles=[2] if r else [],
        )
        for r in (0, 1)
    ]
    return Report(
        verdict="fail" if problem else "pass",
        mode="manifest",
        files=["a", "b"],
        replicas=[0, 1],
        schedule=ReportSchedule(fragments=2, sync_every=20, fragment_sync_delay=5, window=10),
        step_numbering=StepNumbering("top", "", False, "top"),
        workers=workers,
        events=events,
        cross_replica=[],
        run_dir=run_dir,
        notes=[f"note {TRICKY}"],
        run_problems=[f"run problem {TRICKY}"] if problem else [],
        failed_commits=[FailedCommit(replica=1, rank=0, sync_step=30, fragment=0, source="event_log")],
    )


def compare_result(problem: str | None = None, faults: bool = True) -> layout.CompareReport:
    def run(name: str, verdict: str, f: int, tau: int) -> dict:
        return dict(
            name=name,
            verdict=verdict,
            schedule=dict(fragments=f, sync_every=20, fragment_sync_delay=tau, steps=60),
            steps_per_s=11.17,
            steps_per_s_per_replica=[11.2, 11.14],
            tokens_per_s_per_replica=[11436.0, 11400.0],
            wall_s=25.4,
            syncs=6,
            commits=6,
            exposed_comm_s=0.02,
            per_sync_exposed_ms=2.7,
            hidden_comm_share=0.98,
            peak_sync_bytes=740_000,
            total_bytes=4_270_000,
            final_loss=2.0062,
            loss_at_steps={"10": 2.345, "20": 2.2, "40": 2.1, "60": 2.0062},
            recovery=dict(faults=["kill 1@25"], restarts=1, heals=1, commits_lost=1, recovered_s=[3.2])
            if faults
            else None,
            problems=[problem] if problem and verdict == "fail" else [],
        )

    d = "profiles/compare-20261130-052207"
    result = dict(
        compare_dir=d,
        runs=[run("streaming", "pass", 2, 5), run("baseline", "fail" if problem else "pass", 1, 0)],
        link=dict(
            describe="260 Mbit/s, 10 ms",
            emulated=True,
            chosen="default: plain DiLoCo's full-model sync ~ one step of compute",
        ),
        conclusion="streaming hid 98% of its communication and exposed 0.02 s (3 ms per sync); baseline hid 10%.",
        expect_hidden=dict(ok=True, min=0.5, observed=0.98),
        timeline=f"{d}/timeline.png",
        verdict="fail" if problem else "pass",
    )
    return msgspec.convert(result, layout.CompareReport)


class _State:
    def __init__(self, run_dir: str, steps: int) -> None:
        self.run_dir, self.cfg, self.progress = run_dir, type("C", (), {"steps": steps})(), {}


def progress_state(
    run_dir: str = "profiles/streaming-20261130-092233", last_sync: str = "frag 12 @ 12345 FAILED"
) -> _State:
    st = _State(run_dir, 100_000)
    for r in (0, 1):
        p = GroupProgress(r)
        p.step, p.loss, p.manager_step, p.commits, p.failed_commits, p.participants = (
            99_999,
            12.3456,
            9999,
            9999,
            999,
            2,
        )
        p.last_sync = last_sync if r == 0 else "rejoining (restart 10)"
        st.progress[r] = p
    return st


def render_to_text(renderable) -> str:
    con = console(width=WIDTH, record=True, file=open("/dev/null", "w"))
    con.print(renderable)
    return con.export_text()


# --- text is printed literally ----------------------------------------------------------------


def test_summary_prints_paths_and_log_text_literally(capsys):
    """A run dir like ws/x[/y] used to end a successful run in rich's MarkupError; bracketed log
    text vanished from failure lines."""
    train_view.print_summary(summary(run_dir="ws/x[/y]", failures=[f"group 0 exited: {TRICKY}"]))
    out = capsys.readouterr().out
    assert "ws/x[/y]/traces" in out and "ws/x[/y]/manifest.json" in out
    assert TRICKY in _flat(out)
    assert "😄" not in out and "💯" not in out


def test_inspect_view_prints_problems_and_notes_literally(capsys):
    inspect_view.render(report(problem=f"sync landed at step 31 {TRICKY}", notes=[f"send not captured {TRICKY}"]))
    out = _flat(capsys.readouterr().out)
    assert f"sync landed at step 31 {TRICKY}" in out
    assert f"send not captured {TRICKY}" in out
    assert f"run problem {TRICKY}" in out and f"note {TRICKY}" in out
    assert "[/]" not in out and "😄" not in out  # no markup of ftrun's own leaks either


def test_compare_view_prints_problems_literally(capsys):
    compare_view.print_report(compare_result(problem=f"replica 0 rank 0: {TRICKY}"))
    out = capsys.readouterr().out
    assert TRICKY in _flat(out) and "[/]" not in out and "😄" not in out


def test_live_view_prints_run_dir_literally(capsys):
    view = train_view.LiveView(progress_state(), enabled=False)
    view.console.print(train_view.progress_table(progress_state(run_dir="ws/run[/x]:smile:")))
    assert "ws/run[/x]:smile:" in _flat(capsys.readouterr().out)


def test_every_console_comes_from_the_factory():
    """One home: no module but ftrun/console.py makes a rich Console (or prints with rich's print)."""
    root = Path(cfgmod.__file__).parent
    offenders = [
        f"{p.relative_to(root)}:{i}"
        for p in root.rglob("*.py")
        if p.name != "console.py" or p.parent != root
        for i, ln in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"\bConsole\(|from rich import print|rich\.print\(|rich\.markup", ln)
    ]
    assert not offenders, offenders


def test_error_line_is_literal_and_one_line():
    """--profile 5:100 used to print "5💯"; the message is also one line, exit 2."""
    res = cli("train", "--profile", "5:100", "--steps", "60")
    assert res.exit_code == 2, res.output
    assert "--profile 5:100:" in res.output and "💯" not in res.output
    one_line(cli("train", "--data", "x:smile:y[/b]"), "--data x:smile:y[/b]:")


# --- 80 columns ---------------------------------------------------------------------------------


def _commands() -> dict:
    return typer.main.get_command(app).commands


@pytest.mark.parametrize(
    "name", [None, "train", "compare", "inspect-trace", "lighthouse", "view", "plan", "sweep", "launch"]
)
def test_help_fits_80_columns_with_every_flag_whole(name):
    res = cli(*([name] if name else []), "--help", env={"COLUMNS": str(WIDTH)})
    assert res.exit_code == 0, res.output
    _fits(res.output)
    if name is None:
        for cmd in _commands():
            assert re.search(rf"^\s+{cmd}\s", res.output, re.M), cmd
        return
    for p in _commands()[name].params:
        for opt in [*p.opts, *getattr(p, "secondary_opts", [])]:
            if opt.startswith("-"):
                assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", res.output), f"{opt} cut or missing"
    # the description is wrapped by the renderer: no short line in the middle of a paragraph
    desc = re.split(r"^\S[^\n]*:$", res.output.split("\n\n", 1)[1], maxsplit=1, flags=re.M)[0]  # to 1st section
    for para in desc.strip().split("\n\n"):
        lines = para.splitlines()
        ragged = [ln for ln in lines[:-1] if len(ln.strip()) < 50]
        assert not ragged, f"ragged help text: {ragged}"


def test_inspect_tables_fit_80_columns(capsys):
    problem = "sync of fragment 0 landed at step 31, expected 30 (send at 26)"
    inspect_view.render(report(problem=problem, notes=["ambiguous fragment: 0 or 1"]))
    out = capsys.readouterr().out
    _fits(out)
    rows = [ln for ln in _lines(out) if ln.startswith("│")]
    assert rows and all(ln.rstrip().endswith("│") and ln.count("│") == len(inspect_view._COLUMNS) + 1 for ln in rows), (
        "a table was cropped:\n" + out
    )
    assert "12345.88" in out and "30→31" in out
    assert problem in _flat(out) and "1 commit(s) failed, at sync steps [30] (event_log)" in _flat(out)


def test_inspect_tables_use_the_width_there_is():
    con = console(width=140, record=True, file=open("/dev/null", "w"))
    inspect_view.render(report(), con)
    text = con.export_text()
    assert (
        "exposed data ms" in text and "exposed ctrl ms" in text and "send→done ms" in text
    )  # one-line headers on a wide terminal


def test_compare_table_fits_80_columns(capsys):
    compare_view.print_report(compare_result(problem="replica 0 rank 0: sync of fragment 0 landed at step 31"))
    out = capsys.readouterr().out
    _fits(out)
    for label, _, _ in compare_view.ROWS + [compare_view.RECOVERY_ROW]:
        assert any(label in ln for ln in _lines(out)), f"row label {label!r} split or missing"


def test_train_summary_fits_80_columns(capsys):
    train_view.print_summary(
        summary(run_dir="profiles/streaming-demo", failures=["group 1 exited with code 1 at step 6: " + "x" * 90])
    )
    out = capsys.readouterr().out
    _fits(out)
    for col in ("replica", "steps/s", "final loss", "manager step"):
        assert col in out


def test_live_view_fits_80_columns_one_line_per_group():
    text = render_to_text(train_view.progress_table(progress_state()))
    _fits(text)
    rows = [ln for ln in _lines(text) if "FAILED" in ln or "rejoining" in ln]
    assert len(rows) == 2, text  # one line per group: no cell split over two lines
    assert "frag 12 @ 12345 FAILED" in rows[0] and "rejoining (restart 10)" in rows[1]
    for value in ("99999", "12.3456", "9999", "999"):
        assert value in rows[0]
    assert "…" not in text, text  # nothing cut (headers included)


# --- messages -------------------------------------------------------------------------------------


def _build_error(**kw) -> str:
    with pytest.raises(BadInput) as e:
        cfgmod.build(**kw)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_config_messages_name_real_flags():
    """Every config field that has a flag is named in messages by that flag (--stall-timeout, not
    --stall-timeout-s); fields without a flag are not named as if they had one."""
    train = _commands()["train"]
    opts = {p.name: p.opts for p in train.params}
    for name in cfgmod.FIELD_NAMES:
        if name in opts:
            assert cfgmod.flag(name) in opts[name], (name, cfgmod.flag(name), opts[name])
        else:
            assert not cfgmod.flag(name).startswith("--"), f"{name}: no such flag {cfgmod.flag(name)}"
    assert _build_error(stall_timeout_s=0.0).startswith("--stall-timeout 0.0:")
    assert _build_error(quorum_timeout_s=-1.0).startswith("--quorum-timeout -1.0:")


def test_schedule_rule_is_blamed_on_the_value_given():
    """--fragments 5 with the streaming preset (H=20, tau=5): the user gave F, not tau."""
    msg = _build_error(fragments=5)
    assert msg.startswith("--fragments 5:"), msg
    assert "--fragment-sync-delay 5 (preset streaming)" in msg and "--sync-every 20 (preset streaming)" in msg
    assert "tau < H/F" in msg
    # all given: the rule's own value leads
    assert _build_error(fragments=2, sync_every=6, fragment_sync_delay=3).startswith("--fragment-sync-delay 3:")


def test_config_file_values_are_named_file_and_key(tmp_path):
    p = tmp_path / "run.toml"
    p.write_text("fragments = 5\nstall-timeout-s = 1\n")
    msg = _build_error(file_values=cfgmod.load_toml(p), out=str(tmp_path))
    assert msg.startswith(f"{p}: fragments = 5:"), msg
    p.write_text("heartbeat-timeout-ms = 5\n")
    assert _build_error(file_values=cfgmod.load_toml(p), out=str(tmp_path)).startswith(
        f"{p}: heartbeat-timeout-ms = 5:"
    )
    p.write_text('link = "1"\n')
    assert _build_error(file_values=cfgmod.load_toml(p), out=str(tmp_path)).startswith(f"{p}: link = '1':")
    p.write_text('out = ""\n')
    assert _build_error(file_values=cfgmod.load_toml(p)).startswith(f"{p}: out = '':")
    # a flag still beats the file, and is named as a flag
    p.write_text("stall_timeout_s = 5\n")
    assert _build_error(file_values=cfgmod.load_toml(p), stall_timeout_s=-2.0, out=str(tmp_path)).startswith(
        "--stall-timeout -2.0:"
    )


@pytest.mark.parametrize("text", ["1", "999", "0.5kbit", "999bit,20ms", "1001gbit", "2000000mbit", "1e13"])
def test_link_outside_1kbit_1tbit_is_refused(text):
    with pytest.raises(BadInput) as e:
        parse_link(text)
    assert str(e.value).startswith(f"--link {text!r}:") and "1kbit" in str(e.value)


@pytest.mark.parametrize(
    "text, bw", [("1kbit", 1e3), ("1000", 1e3), ("1000gbit,5ms", 1e12), ("1e12", 1e12), ("1tbit,5ms", 1e12)]
)
def test_link_bounds_are_inclusive(text, bw):
    assert parse_link(text).bandwidth_bps == pytest.approx(bw)


def test_a_terabit_link_is_named_as_plan_prints_it():
    """plan prints Tbit/s; the same words are a --link (and a link describes itself in them)."""
    assert (
        parse_link("0.5tbit").description == "500 Gbit/s, 0 ms" and parse_link("1tbit").description == "1 Tbit/s, 0 ms"
    )
    assert parse_link(parse_link("1tbit,2ms").as_flag()) == parse_link("1tbit,2ms")


@pytest.mark.parametrize(
    "args, needle",
    [
        (["train", "--mode", ""], "--mode ''"),
        (["train", "--out", ""], "--out ''"),
        (["train", "--backend", " "], "--backend ' '"),
        (["train", "--config", ""], "--config ''"),
        (["compare", "streaming", "baseline", "--out", ""], "--out ''"),
        (["compare", "streaming", "baseline", "--name", ""], "--name ''"),
        (["compare", "", "baseline"], "A/B ''"),
        (["inspect-trace", ""], "PATH ''"),
        (["inspect-trace", "x", "--export-perfetto", ""], "--export-perfetto ''"),
        (["view", ""], "RUN_DIR ''"),
        (["lighthouse", "--min-replicas", "1", "--bind", ""], "--bind ''"),
    ],
)
def test_empty_strings_are_refused(args, needle):
    one_line(cli(*args), needle, "empty")


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["train", "--steps", "abc"], "ftrun train: Invalid value for '--steps'"),
        (["trian"], "ftrun: No such command 'trian'"),
        (["train", "--nope"], "ftrun train: No such option: --nope"),
        (["inspect-trace"], "ftrun inspect-trace: Missing argument"),
    ],
)
def test_usage_errors_are_one_line_exit_2(monkeypatch, capsys, argv, needle):
    """The console script turns typer's usage block (4 lines) into the one error line every bad input gets."""
    from ftrun import cli

    monkeypatch.setattr(sys, "argv", ["ftrun", *argv])
    with pytest.raises(SystemExit) as e:
        cli.main()
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert [ln for ln in err.splitlines() if ln.strip()] == [
        f"error: {needle}" + err.split(needle, 1)[1].splitlines()[0]
    ], err
    assert "Usage:" not in err and "Try '" not in err


# --- terminal control characters never reach the terminal raw (issue 24 item 16) --------------

RAW = ("\x1b", "\u202e", "\x07", "\r", "\x9b")  # ESC, right-to-left override, bell, carriage return, CSI


@pytest.mark.parametrize(
    "args",
    [
        ["train", "--model", "x\x1b[2J.py:f"],  # used to clear the screen
        ["inspect-trace", "/tmp/ab\u202ecd"],  # used to reorder the line
        ["train", "--data", "/tmp/no\x07such\rfile"],
        ["compare", "/tmp/a\x9bb", "/tmp/c"],
    ],
)
def test_control_characters_in_user_strings_are_escaped(args, tmp_path):
    res = cli(*([*args, "--out", str(tmp_path)] if args[0] == "train" else args))
    assert res.exit_code == 2, res.output
    assert not any(c in res.output for c in RAW), repr(res.output)
    assert any(e in res.output for e in ("\\x1b", "\\u202e", "\\x07", "\\x9b")), res.output  # shown, escaped


def test_one_helper_escapes_and_the_console_applies_it_everywhere():
    from ftrun.console import escape_controls, line, styled

    assert escape_controls("plain [x] é 中") == "plain [x] é 中"  # printable text is untouched
    assert escape_controls("a\x1b[2Jb\u202ec") == "a\\x1b[2Jb\\u202ec"
    assert escape_controls("two\nlines\ttab", keep="\n\t") == "two\nlines\ttab"
    con = console(width=80, record=True, file=open("/dev/null", "w"))
    con.print("path p\x1b[2J")  # a plain string
    con.print(line(("error:", "bold red"), " ", "q\u202e"))  # assembled parts
    con.print(styled("r\x07", "bold"))
    appended = line("step 30 sync: ")
    appended.append("t\x1b[31m", "red")  # a Text built up by hand (inspect's problem lines)
    con.print(appended)
    from rich.table import Table

    t = Table()
    t.add_column("file")
    t.add_row("s\x1b]0;title\x07")  # a table cell
    con.print(t)
    text = con.export_text()
    assert not any(c in text for c in RAW), repr(text)
    for shown in ("p\\x1b[2J", "q\\u202e", "r\\x07", "s\\x1b]0;title\\x07", "t\\x1b[31m"):
        assert shown in text.replace("\n", "").replace("│", "").replace(" ", "") or shown in text, (shown, text)


def test_readme_inspect_sample_shows_the_columns_the_cli_prints():
    """Issue 24 item 19: the README's sample had other columns (exposed ms, commit ms) than
    ``inspect-trace`` prints. Its header row must be the wide table's headers, in order."""
    from ftrun.report.inspect_view import _COLUMNS

    readme = (Path(__file__).resolve().parents[2] / "docs" / "inspect-trace.md").read_text()  # the full sample
    sample = readme.split("$ ftrun inspect-trace profiles/streaming-demo", 1)[1].split("```", 1)[0]
    header = next(ln for ln in sample.splitlines() if ln.startswith("┃"))
    assert [h.strip() for h in header.strip("┃").split("┃")] == [head for head, _, _ in _COLUMNS], header


def test_summary_of_one_group_claims_no_agreement_it_did_not_check(capsys):
    """A group's own run dir (several hosts) compares nothing: "agreed after all 0 commits" under
    "commits 6" was wrong; it points at the job-wide check instead."""
    one = train_summary()["replicas"][:1]
    s = summary(
        replicas=one, agreement=dict(ok=True, commits_checked=0, disagreements=[], groups_here=1, groups_in_job=2)
    )
    train_view.print_summary(s)
    out = _flat(capsys.readouterr().out)
    assert "agreed after" not in out
    assert (
        "one replica group of 2 here: agreement across groups is checked by `ftrun inspect-trace` "
        "of all 2 groups' run dirs" in out
    )
    s = summary(agreement=dict(ok=True, commits_checked=0, disagreements=[], groups_here=2, groups_in_job=2))
    train_view.print_summary(s)
    assert "no commit seen by two replicas: agreement not checked" in _flat(capsys.readouterr().out)
    train_view.print_summary(summary())
    assert "replicas agreed after all 6 commits" in _flat(capsys.readouterr().out)
