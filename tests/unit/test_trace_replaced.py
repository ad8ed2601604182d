"""A trace replaced by rename while it is read in halves is read as the file that was opened:
the child reads the second half through the descriptor the parent opened (inherited across the
fork, read with ``os.pread``), never by the path again, so a temp+rename writer that replaces
the file between the parent's open and the child's read cannot splice two files into one.

The child runs in this process (conftest's ``halves``: no process starts); the rename happens
where a real child would start, after the parent opened the file and before the child reads.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from ftrun.trace import stream, stream_source
from ftrun.trace.stream import TraceFile


def _raw(tag: str, n: int = 300) -> bytes:
    """A trace of ``n`` steps whose every event carries ``tag`` (same length for every tag: the
    two files' bytes line up, so a child reading the other file finds a seam at the same place)."""
    events = []
    for i in range(n):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "ts": float(i * 10),
                       "dur": 5.0, "pid": 1, "tid": 1, "args": {"run": tag}})  # fmt: skip
        events.append({"ph": "X", "cat": "cpu_op", "name": f"aten::mm_{tag}", "ts": i * 10 + 2.0, "pid": 1, "tid": 1})
    return json.dumps({"traceEvents": events, "distributedInfo": {"rank": 1}}).encode()


def _replaced_at_fork(halves, path: Path, other: bytes):
    """``halves``' in-process child, but the file is renamed over as it is made (after the
    parent's open, before the child's first read)."""

    class _RenamedOver(halves):
        def __init__(self, fn, max_bytes: int) -> None:
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_bytes(other)
            os.replace(tmp, path)  # as a temp+rename writer does
            super().__init__(fn, max_bytes)

    return _RenamedOver


def _events(path: Path, halves: bool = True) -> list[tuple]:
    """The file's events (name, ts, args), sorted; in halves, or (without ``keep``) in one piece."""
    tf = TraceFile(path)
    evs = [e for c in tf.chunks((lambda name: True) if halves else None) for e in c]
    assert tf.events == len(evs)
    return sorted((e.name, e.ts, bytes(e.args) if e.args else b"") for e in evs)


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("first", [0.3, 0.5, 0.7])
def test_a_trace_renamed_over_mid_read_is_read_as_the_file_opened(halves, tmp_path, monkeypatch, gz, first):
    monkeypatch.setattr(stream, "FIRST_HALF", first)
    monkeypatch.setattr(stream, "GZ_FIRST_HALF", first)
    original, other = _raw("A"), _raw("B")
    assert len(original) == len(other)
    if gz:
        original, other = gzip.compress(original), gzip.compress(other)
    kept = tmp_path / ("kept.json.gz" if gz else "kept.json")
    kept.write_bytes(original)
    p = tmp_path / ("t.json.gz" if gz else "t.json")
    p.write_bytes(original)
    expected = _events(kept, halves=False)
    assert len(expected) == 600 and not halves.made
    monkeypatch.setattr(stream, "Forked", _replaced_at_fork(halves, p, other))
    got = _events(p)
    assert halves.made and halves.made[-1].frames is not None, "the file was not read in halves"
    assert p.read_bytes() == other  # the path now names the other file
    assert got == expected
    assert not any(name.endswith("_B") for name, _, _ in got)


def test_the_childs_source_leaves_the_parents_descriptor_open_and_its_offset_alone(tmp_path):
    """The child's source borrows the parent's fd: it reads by offset (``pread``), so the
    parent's position is not moved, and closing it does not close the parent's fd."""
    p = tmp_path / "t.json"
    p.write_bytes(_raw("A"))
    parent = stream_source.Source(p, 1 << 30)
    try:
        child = stream_source.Source(p, 1 << 30, start=1000, split_first=False, fd=parent.fd)
        buf = bytearray(100)
        assert child.fill(memoryview(buf)) == 100 and bytes(buf) == p.read_bytes()[1000:1100]
        child.close()
        os.fstat(parent.fd)  # still open
        assert parent.fill(memoryview(buf)) == 100 and bytes(buf) == p.read_bytes()[:100]
    finally:
        parent.close()
