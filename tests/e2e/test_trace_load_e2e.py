"""Bad input to inspect-trace through a child process: one line on stderr, nothing on stdout, no
traceback (that the inspect path imports no torch: test_torch_free.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from train_fixtures import one_line, run_ftrun

FLAGS = ["--fragments", "2", "--sync-every", "8", "--fragment-sync-delay", "2"]


def _mk(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


@pytest.mark.e2e
def test_subprocess_no_traceback(tmp_path):
    p = _mk(tmp_path, "n.json.gz", b"\x1f\x8bnot really")
    res = run_ftrun("inspect-trace", str(p), *FLAGS)
    one_line(res, "broken gzip")
    assert res.stdout == "", res.stdout
