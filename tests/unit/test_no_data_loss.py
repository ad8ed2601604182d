"""Issue 24 items 1-3: nothing a user wrote is replaced, and no output is ever left 0-byte or
partial under its final name. The one write path is ``ftrun.output``; these reproduce each
report through the command that hit it. Unit tests: no process is started.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest

from ftrun.errors import BadInput
from train_fixtures import cli, one_line, two_runs

DATA = Path(__file__).parent.parent / "data" / "cpu_run"


# --- item 1: --export-perfetto onto a user's file or symlink --------------------------------


def test_export_perfetto_refuses_an_existing_user_file(tmp_path):
    mine = tmp_path / "mine.json"
    mine.write_text("precious\n")
    res = cli("inspect-trace", str(DATA), "--export-perfetto", str(mine))
    assert res.exit_code == 2, res.output
    assert "--export-perfetto" in one_line(res) and "--overwrite" in res.output
    assert mine.read_text() == "precious\n"
    res = cli("inspect-trace", str(DATA), "--export-perfetto", str(mine), "--overwrite", "--json")
    assert res.exit_code == 0, res.output[-500:]
    assert json.loads(mine.read_text())["traceEvents"]  # replaced only when asked


def test_export_perfetto_never_turns_a_symlink_into_a_file(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("precious\n")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    res = cli("inspect-trace", str(DATA), "--export-perfetto", str(link))
    assert res.exit_code == 2 and "symlink" in one_line(res), res.output
    assert link.is_symlink() and real.read_text() == "precious\n"
    res = cli("inspect-trace", str(DATA), "--export-perfetto", str(link), "--overwrite", "--json")
    assert res.exit_code == 0, res.output[-500:]
    assert link.is_symlink() and json.loads(real.read_text())["traceEvents"]  # written through the link


def test_export_perfetto_to_a_new_file_needs_no_flag(tmp_path):
    out = tmp_path / "new.json.gz"
    res = cli("inspect-trace", str(DATA), "--export-perfetto", str(out), "--json")
    assert res.exit_code == 0 and out.is_file(), res.output[-500:]


# --- item 2: compare into an existing folder ftrun did not make -----------------------------


def test_compare_refuses_to_overwrite_a_users_report_md(tmp_path):
    a, b = two_runs(tmp_path)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.md").write_text("my notes\n")
    res = cli("compare", str(a), str(b), "--out", str(tmp_path), "--name", "mine")
    assert res.exit_code == 2, res.output
    assert "report.md" in one_line(res) and "--overwrite" in res.output
    assert sorted(p.name for p in mine.iterdir()) == ["report.md"] and (mine / "report.md").read_text() == "my notes\n"


def test_compare_writes_into_its_own_dir_again_with_overwrite(tmp_path):
    a, b = two_runs(tmp_path)
    res = cli("compare", str(a), str(b), "--out", str(tmp_path), "--name", "cmp")
    assert res.exit_code == 0, res.output[-800:]
    assert (tmp_path / "cmp" / ".ftrun-out").is_file() and (tmp_path / "cmp" / "report.md").is_file()
    res = cli("compare", str(a), str(b), "--out", str(tmp_path), "--name", "cmp", "--overwrite")
    assert res.exit_code == 0, res.output[-800:]


# --- item 3: temp + rename for every output; a full disk is one line -------------------------


def _enospc(*a, **k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_full_disk_while_drawing_the_timeline_is_one_line_and_leaves_no_empty_png(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    a, b = two_runs(tmp_path)

    def half_then_full(self, fname, *a, **k):
        Path(fname).write_bytes(b"")  # what a full disk leaves: a 0-byte file
        _enospc()

    monkeypatch.setattr(Figure, "savefig", half_then_full)
    res = cli("compare", str(a), str(b), "--out", str(tmp_path), "--name", "full")
    assert res.exit_code == 2, res.output
    line = one_line(res)
    assert "timeline.png" in line and "No space left on device" in line
    # the --name dir this compare made held only its marker: it is removed (issue 42)
    assert not (tmp_path / "full").exists(), sorted(p.name for p in (tmp_path / "full").iterdir())


def test_full_disk_in_any_atomic_write_keeps_the_old_file(tmp_path, monkeypatch):
    from ftrun.output import atomic_write

    target = tmp_path / "run" / "summary.json"
    target.parent.mkdir()
    (target.parent / ".ftrun-run").write_text("{}")
    target.write_text("old")
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", _enospc)
    with pytest.raises(BadInput, match="No space left on device"):
        atomic_write(target, "new")
    monkeypatch.setattr(os, "replace", real_replace)
    assert target.read_text() == "old" and sorted(p.name for p in target.parent.iterdir()) == [
        ".ftrun-run",
        "summary.json",
    ]


class _Prof:
    """Stands in for torch.profiler.profile: writes half a trace, then the signal arrives."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def export_chrome_trace(self, path: str) -> None:
        # ftrun has torch write plain JSON under a temporary name and compresses it itself
        assert Path(path).name.startswith(".ftrun-tmp-") and path.endswith(".json")
        Path(path).write_bytes(b'{"traceEvents": [half a trace')
        raise self.exc


class _WholeProf:
    """Stands in for torch.profiler.profile: writes a whole (small) trace as plain JSON."""

    def export_chrome_trace(self, path: str) -> None:
        Path(path).write_text('{"traceEvents": [{"name": "ProfilerStep#1"}]}')


@pytest.mark.parametrize(
    "exc",
    [KeyboardInterrupt("SIGTERM"), OSError(errno.ENOSPC, "No space left on device")],
    ids=["SIGTERM", "full disk"],
)
def test_a_worker_cut_short_while_writing_its_trace_leaves_no_trace_under_the_final_name(tmp_path, exc):
    from ftrun.worker.profiling import export_trace

    run = tmp_path / "run"
    (run / "traces").mkdir(parents=True)
    (run / ".ftrun-run").write_text("{}")
    final = run / "traces" / "replica0_rank0.21.pt.trace.json.gz"
    with pytest.raises((KeyboardInterrupt, BadInput)):
        export_trace(_Prof(exc), final)
    assert list((run / "traces").iterdir()) == []


def test_an_exported_trace_is_the_profilers_json_compressed_and_nothing_else_is_left(tmp_path):
    import gzip

    from ftrun.worker.profiling import export_trace

    run = tmp_path / "run"
    (run / "traces").mkdir(parents=True)
    (run / ".ftrun-run").write_text("{}")
    final = run / "traces" / "replica0_rank0.1.pt.trace.json.gz"
    assert export_trace(_WholeProf(), final) == final
    assert json.loads(gzip.decompress(final.read_bytes())) == {"traceEvents": [{"name": "ProfilerStep#1"}]}
    assert list((run / "traces").iterdir()) == [final]


def test_a_leftover_temporary_trace_is_never_read(tmp_path):
    """A worker killed mid-write (SIGKILL: no clean-up) leaves ``.ftrun-tmp-*``: not a trace."""
    run = tmp_path / "run"
    shutil.copytree(DATA, run)
    (run / "traces" / ".ftrun-tmp-123-replica0_rank0.41.pt.trace.json.gz").write_bytes(b"\x1f\x8b half")
    res = cli("inspect-trace", str(run), "--json")
    assert res.exit_code == 0, res.output[-500:]
    assert not any(".ftrun-tmp-" in f for f in json.loads(res.output)["files"])


def test_atomic_path_renames_only_a_complete_file(tmp_path):
    from ftrun.output import atomic_path

    out = tmp_path / "x.png"
    with atomic_path(out, "test") as tmp:
        assert tmp.parent == out.parent and tmp.name.endswith("x.png") and not out.exists()
        tmp.write_bytes(b"png")
    assert out.read_bytes() == b"png"


@pytest.mark.parametrize(
    "flag, name", [("--export-perfetto", "out.json"), ("--export-perfetto", "out.json.gz"), ("--junit", "junit.xml")]
)
def test_ftruns_own_export_is_rewritten_without_a_flag_a_users_file_is_not(tmp_path, flag, name):
    out = tmp_path / name
    for _ in range(2):  # the second run replaces what the first wrote: recognised as ftrun's
        res = cli("inspect-trace", str(DATA), flag, str(out), "--json")
        assert res.exit_code == 0, res.output[-500:]
    out.write_text("<testsuites name='mine'/>\n")
    res = cli("inspect-trace", str(DATA), flag, str(out))
    assert res.exit_code == 2 and "ftrun did not write it" in one_line(res), res.output
    assert out.read_text() == "<testsuites name='mine'/>\n"
