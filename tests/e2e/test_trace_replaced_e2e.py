"""A large trace renamed over between the parent's open and a real forked child's start is read
as the file that was opened, plain and gzip: the child reads through the inherited descriptor
(tests/unit/test_trace_replaced.py runs the same with the child in-process). ~2 s."""

from __future__ import annotations

import gzip
import os

import pytest
from test_trace_halves_e2e import _trace

from ftrun.trace import forked, stream
from ftrun.trace.load import load_trace
from ftrun.trace.spans import extract
from ftrun.trace.stream import TraceFile


@pytest.mark.e2e
@pytest.mark.skipif(not forked.usable(), reason="needs os.fork, one thread and two CPUs")
@pytest.mark.parametrize("gz", [False, True])
def test_a_trace_renamed_over_before_the_child_reads_it(tmp_path, monkeypatch, gz):
    monkeypatch.setattr(stream, "PARALLEL_BYTES", 1 << 20)
    monkeypatch.setattr(stream, "GZ_PARALLEL_BYTES", 1 << 20)  # the gzip split, off by default, still works
    p = _trace(tmp_path, 20000, gz=gz)
    whole = extract(p, load_trace(p))
    raw = p.read_bytes()
    other = (gzip.decompress(raw) if gz else raw).replace(b'"rank": 2', b'"rank": 5').replace(b"aten::mm", b"aten::mx")
    other = gzip.compress(other, compresslevel=1) if gz else other
    made = []
    real = stream.Forked

    def renamed_over(fn, max_bytes):
        tmp = p.with_name("tmp")
        tmp.write_bytes(other)
        os.replace(tmp, p)  # after the parent's open, before the child exists
        made.append(real(fn, max_bytes))
        return made[-1]

    monkeypatch.setattr(stream, "Forked", renamed_over)
    halved = extract(p, TraceFile(p))
    assert made and made[-1].pid is None, "the file was not read in halves"
    assert halved == whole and halved.rank == 2
    assert extract(p, load_trace(p)).rank == 5  # the path now names the other file
