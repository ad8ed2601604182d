"""Every path a command will write is checked before its work starts (issue 42 item 11): a
``--junit`` into a directory that does not exist is one line, exit 2, before any cell trains;
``--export-perfetto`` and ``plan --png`` make their own directory (refused under a file). No
process is started: a training that would start fails the test instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftrun.errors import BadInput
from ftrun.output import check_writable
from ftrun.sweep import runner as sweep_runner
from train_fixtures import cli, one_line


def test_a_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match=r"--junit .*: its directory .*missing does not exist"):
        check_writable(tmp_path / "missing" / "j.xml", "--junit")
    (tmp_path / "file").write_text("x")
    with pytest.raises(BadInput, match="is not a directory"):
        check_writable(tmp_path / "file" / "j.xml", "--junit")
    assert check_writable(tmp_path / "a" / "b" / "p.json", "--export-perfetto", parent_made=True)
    with pytest.raises(BadInput, match="is not a directory"):
        check_writable(tmp_path / "file" / "b" / "p.json", "--export-perfetto", parent_made=True)


def test_sweep_refuses_a_junit_in_a_missing_dir_before_training(tmp_path: Path, monkeypatch) -> None:
    def trained(self, cell):  # was: every cell trained, then exit 2
        raise AssertionError("a cell trained before --junit was checked")

    monkeypatch.setattr(sweep_runner.Runner, "train", trained)
    junit = tmp_path / "missing" / "j.xml"
    res = cli("sweep", "--axis", "fragments=1,2", "--out", str(tmp_path), "--name", "s", "--junit", str(junit))
    one_line(res, "--junit", "does not exist")
    assert not (tmp_path / "s").exists()


def test_plan_png_under_a_file_is_refused_first(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    png = tmp_path / "file" / "d" / "p.png"  # (a missing directory is made, as before)
    res = cli("plan", "--params", "1e9", "--step-ms", "400", "--link", "1gbit", "--png", str(png))
    one_line(res, "--png", "is not a directory")


@pytest.mark.parametrize("profile", [["--profile", "none"], ["--axis", "profile=auto,none"]])
def test_sweep_refuses_an_unprofiled_cell_before_training(tmp_path: Path, monkeypatch, profile) -> None:
    """A cell's verdict is the check of its traces: --profile none (shared, or one value of an
    axis) was every such cell trained, then failed ("lists no traces"), exit 1."""

    def trained(self, cell):
        raise AssertionError("a cell trained before --profile none was refused")

    monkeypatch.setattr(sweep_runner.Runner, "train", trained)
    res = cli("sweep", "--axis", "fragments=1,2", *profile, "--out", str(tmp_path), "--name", "s")
    one_line(res, "--profile none leaves a cell no traces")
    assert not (tmp_path / "s").exists()
