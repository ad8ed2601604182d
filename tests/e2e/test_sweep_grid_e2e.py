"""``ftrun sweep`` bad axes through the real CLI (a child process)."""

from __future__ import annotations

import pytest

from train_fixtures import one_line, run_ftrun


@pytest.mark.e2e
def test_sweep_bad_input_is_one_line_exit_2(tmp_path):
    """Bad axes through the real CLI: exit 2, one line, nothing written."""
    for args in (
        ["--axis", "fragments=1,x"],
        ["--axis", "nope=1"],
        [],
        ["--preset", "pgs", "--backend", "gloo"],
        ["--axis", "steps=8", "--metric", "bogus"],
        ["--axis", "steps=8", "--parallel", "0"],
    ):
        line = one_line(run_ftrun("sweep", "--out", str(tmp_path), "--name", "s", *args))
        assert line.startswith("error: "), (args, line)
    assert not (tmp_path / "s").exists()
