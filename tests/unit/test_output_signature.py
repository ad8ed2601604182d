"""``output.written_by_ftrun``: a file ftrun may replace without ``--overwrite`` is a regular file
that starts like one it writes (a Perfetto export, plain or gzip; JUnit XML); anything else
(a user's file, a FIFO, a directory, a missing path) is not, and a FIFO is never waited on."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

from ftrun.output import written_by_ftrun


def test_ftrun_files_plain_gzip_and_xml(tmp_path: Path):
    (tmp_path / "p.json").write_bytes(b'{"ftrun_export": 1, "traceEvents": []}')
    (tmp_path / "p.json.gz").write_bytes(gzip.compress(b'  {"ftrun_export": 1}'))
    (tmp_path / "j.xml").write_bytes(b'<?xml version="1.0"?>\n<testsuites name="ftrun" tests="1"/>')
    assert all(written_by_ftrun(tmp_path / n) for n in ("p.json", "p.json.gz", "j.xml"))


def test_not_ftrun_files(tmp_path: Path, deadline):
    (tmp_path / "mine.json").write_bytes(b'{"traceEvents": []}')
    (tmp_path / "bad.gz").write_bytes(b"\x1f\x8bnot gzip")
    os.mkfifo(tmp_path / "fifo")  # no writer: an open without O_NONBLOCK would wait forever
    (tmp_path / "dir").mkdir()
    for name in ("mine.json", "bad.gz", "fifo", "dir", "missing"):
        assert not written_by_ftrun(tmp_path / name), name
