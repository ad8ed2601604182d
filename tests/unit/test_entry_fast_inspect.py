"""``ftrun.entry``: the typer-free ``inspect-trace`` shortcut hands ``inspect_trace`` exactly what
typer would, and sends every command line it does not plainly understand to typer."""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec
import pytest
import typer.main

from ftrun import entry
from ftrun.cli import app


def _typer_params():
    return {p.name: p for p in typer.main.get_command(app).commands[entry.INSPECT].params}


def test_the_tables_are_typers_declaration() -> None:
    params = _typer_params()
    assert params["paths"].nargs == -1 and params["paths"].required
    flags = {o: p.name for p in params.values() if getattr(p, "is_flag", False) for o in p.opts}
    assert flags == entry.INSPECT_FLAGS
    assert all(not p.secondary_opts for p in params.values() if getattr(p, "is_flag", False))
    values = {
        o: p.name for p in params.values() if p.name != "paths" and not getattr(p, "is_flag", False) for o in p.opts
    }
    assert values == {o: name for o, (name, _) in entry.INSPECT_VALUES.items()}
    for opt, (name, kind) in entry.INSPECT_VALUES.items():
        assert type(params[name].type).__name__ == ("IntParamType" if kind is int else "StringParamType"), opt


def _via_typer(argv: list[str], monkeypatch) -> tuple[list[Path], dict]:
    """What typer's ``inspect-trace`` passes to ``inspect_trace`` for ``argv``."""
    import ftrun.commands.inspect_trace as mod

    seen = {}

    def fake(paths, opts, **kw):
        seen.update(paths=list(paths), kw={**msgspec.structs.asdict(opts), **kw})
        return 0

    monkeypatch.setattr(mod, "inspect_trace", fake)
    app(argv, prog_name="ftrun", standalone_mode=False)
    return seen["paths"], seen["kw"]


def _via_entry(argv: list[str], monkeypatch) -> tuple[list[Path], dict]:
    import ftrun.commands.inspect_trace as mod

    seen = {}

    def fake(paths, opts, **kw):
        seen.update(paths=list(paths), kw={**msgspec.structs.asdict(opts), **kw})
        return 0

    monkeypatch.setattr(mod, "inspect_trace", fake)
    got = entry.plain_inspect(argv)
    assert got is not None, argv
    assert entry._inspect(got) == 0
    # the one thing typer's path does not pass: the command line ends the process once all is written
    assert seen["kw"].pop("on_done") is entry._exit_now
    return seen["paths"], seen["kw"]


def test_the_fast_exit_flushes_then_ends_with_the_code(monkeypatch) -> None:
    import io
    import os

    class Out(io.StringIO):
        flushed = False

        def flush(self) -> None:
            self.flushed = True

    out, err, codes = Out(), Out(), []
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(os, "_exit", codes.append)
    entry._exit_now(1)
    assert out.flushed and err.flushed and codes == [1]


PLAIN = [
    ["inspect-trace", "run"],
    ["inspect-trace", "a.json", "b.json.gz", "--json"],
    ["inspect-trace", "--fragments", "2", "t.json", "--sync-every=8", "--fragment-sync-delay", " 3 ", "--json"],
    [
        "inspect-trace",
        "r",
        "--step-numbering",
        "auto",
        "--max-trace-mb",
        "12",
        "--allow-failed-commits",
        "--merge-jobs",
    ],
    ["inspect-trace", "r", "--export-perfetto", "o.json", "--junit=j.xml", "--overwrite", "--step-numbering= end"],
]


@pytest.mark.parametrize("argv", PLAIN)
def test_a_plain_command_line_gets_what_typer_gives(argv, monkeypatch) -> None:
    assert _via_entry(argv, monkeypatch) == _via_typer(argv, monkeypatch)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["inspect-trace"],
        ["inspect-trace", "--json"],
        ["train", "x"],
        ["inspect-trace", "r", "--help"],
        ["inspect-trace", "r", "--fragments"],
        ["inspect-trace", "r", "--fragments", "two"],
        ["inspect-trace", "r", "--fragments", "1.5"],
        ["inspect-trace", "r", "--fragments", "-1"],
        ["inspect-trace", "r", "--fragments", "2", "--fragments", "3"],
        ["inspect-trace", "r", "--json", "--json"],
        ["inspect-trace", "r", "--json=1"],
        ["inspect-trace", "r", "--frag", "2"],
        ["inspect-trace", "-", "r"],
        ["inspect-trace", "--", "r"],
        ["inspect-trace", ""],
        ["inspect-trace", "r", "--junit", " "],
        ["inspect-trace", "r", "--junit="],
        ["inspect-trace", "r", "--junit", "--json"],
        ["inspect-trace", "r", "-h"],
    ],
)
def test_anything_else_goes_to_typer(argv) -> None:
    assert entry.plain_inspect(argv) is None


def test_errors_read_as_the_cli_words_them(tmp_path, capsys) -> None:
    cmd = ["inspect-trace", str(tmp_path / "nothing-here"), "--json"]
    got = entry.plain_inspect(cmd)
    assert got is not None
    assert entry._inspect(got) == 2
    fast = capsys.readouterr()
    assert app(cmd, prog_name="ftrun", standalone_mode=False) == 2
    slow = capsys.readouterr()
    assert fast == slow and "nothing-here" in fast.err and len(fast.err.strip().splitlines()) == 1


def test_the_console_script_goes_through_the_entry(monkeypatch) -> None:
    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert 'ftrun = "ftrun.__main__:main"' in text
    import ftrun.__main__ as console

    seen = []
    monkeypatch.setattr(entry, "main", lambda: seen.append("entry"))
    monkeypatch.setattr("ftrun.errors.exit_on_signal", lambda: seen.append("signals"))
    console.main()
    assert seen == ["signals", "entry"]
