"""A large plain trace read in two halves with a real forked child (``ftrun.trace.forked``):
the same spans and counts as read in one piece, and the child reaped on success, on a seam
refused, and when the reader is interrupted (KeyboardInterrupt, as ftrun's SIGINT/SIGTERM
handlers raise it). Files of a few MB, with the size threshold lowered; ~2 s."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ftrun.trace import forked, stream
from ftrun.trace.load import load_trace
from ftrun.trace.spans import extract
from ftrun.trace.stream import TraceFile


def _trace(tmp_path: Path, n: int, arg: str = "x") -> Path:
    events = []
    for i in range(n):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "ts": float(i * 10),
                       "dur": 5.0, "pid": 1, "tid": 1, "args": {"a": arg}})  # fmt: skip
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": i * 10 + 2.0, "pid": 1, "tid": 1})
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events, "distributedInfo": {"rank": 2}}))
    return p


def _no_children() -> bool:
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


@pytest.fixture
def small(monkeypatch):
    monkeypatch.setattr(stream, "PARALLEL_BYTES", 1 << 20)
    made = []
    real = stream.Forked

    def spy(fn, max_bytes):
        made.append(real(fn, max_bytes))
        return made[-1]

    monkeypatch.setattr(stream, "Forked", spy)
    return made


@pytest.mark.e2e
@pytest.mark.skipif(not forked.usable(), reason="needs os.fork, one thread and two CPUs")
def test_halves_with_a_real_child_same_spans_and_reaped(small, tmp_path):
    p = _trace(tmp_path, 20000)
    whole = extract(p, load_trace(p))
    halved = extract(p, TraceFile(p))
    assert small, "the file was not read in halves"
    assert halved == whole and halved.rank == 2 and len(halved.steps) == 20000
    assert _no_children()


@pytest.mark.e2e
@pytest.mark.skipif(not forked.usable(), reason="needs os.fork, one thread and two CPUs")
def test_a_seam_inside_a_string_the_child_is_killed_and_reaped(small, tmp_path, monkeypatch):
    p = _trace(tmp_path, 20000, arg="}, {" * 64)  # every seam candidate but one in 65 lies in a string
    whole = extract(p, load_trace(p))
    for first in (0.3, 0.45, 0.6):
        monkeypatch.setattr(stream, "FIRST_HALF", first)
        assert extract(p, TraceFile(p)) == whole
    assert len(small) == 3 and _no_children()


@pytest.mark.e2e
@pytest.mark.skipif(not forked.usable(), reason="needs os.fork, one thread and two CPUs")
def test_an_interrupted_reader_reaps_its_child(small, tmp_path):
    p = _trace(tmp_path, 20000)
    me = os.getpid()
    seen = [0]

    def keep(name: str) -> bool:
        seen[0] += os.getpid() == me
        if os.getpid() == me and seen[0] > 3000:
            raise KeyboardInterrupt  # what ftrun's handlers raise on SIGINT / SIGTERM
        return True

    with pytest.raises(KeyboardInterrupt):
        for _ in TraceFile(p).chunks(keep):
            pass
    assert small and _no_children()
