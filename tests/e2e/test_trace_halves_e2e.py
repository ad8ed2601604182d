"""A large trace, plain or gzip, read in two halves with a real forked child
(``ftrun.trace.forked``): the same spans and counts as read in one piece (the restores' copies
placed across the two processes), and the child reaped on success, on a seam refused, and
when the reader is interrupted (KeyboardInterrupt, as ftrun's SIGINT/SIGTERM handlers raise
it). Files of a few MB, with the size threshold lowered; ~4 s."""

from __future__ import annotations

import gzip
import json
import os
import threading
from pathlib import Path

import pytest

from ftrun.trace import forked, stream
from ftrun.trace.load import load_trace
from ftrun.trace.spans import extract
from ftrun.trace.stream import TraceFile


def _trace(tmp_path: Path, n: int, arg: str = "x", gz: bool = False) -> Path:
    """``n`` steps; every 50th syncs, its restore copying 2 tensors (and 2 copies outside it)."""
    events = []
    for i in range(n):
        t = float(i * 10)
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "ts": t,
                       "dur": 9.0, "pid": 1, "tid": 1, "args": {"a": arg}})  # fmt: skip
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": t + 2.0, "pid": 1, "tid": 1})
        for c in (1.0, 8.0) + ((3.0, 4.0) if i % 50 == 0 else ()):
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "ts": t + c, "dur": 0.5, "pid": 1,
                           "tid": 1, "args": {"Input Dims": [[i, 2], [i, 2]]}})  # fmt: skip
        if i % 50 == 0:
            events.append({"ph": "X", "cat": "user_annotation", "name": "torchft::local_sgd::perform_sync",
                           "ts": t + 2.5, "dur": 4.0, "pid": 1, "tid": 1})  # fmt: skip
            events.append({"ph": "X", "cat": "user_annotation", "name": "torchft::local_sgd::restore_parameters",
                           "ts": t + 3.0, "dur": 1.5, "pid": 1, "tid": 1})  # fmt: skip
    p = tmp_path / "t.json"
    raw = json.dumps({"traceEvents": events, "distributedInfo": {"rank": 2}}).encode()
    if gz:
        p = tmp_path / "t.json.gz"
        raw = gzip.compress(raw, compresslevel=1)
    p.write_bytes(raw)
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
    monkeypatch.setattr(stream, "GZ_PARALLEL_BYTES", 1 << 20)  # the gzip split, off by default, still works
    made = []
    real = stream.Forked

    def spy(fn, max_bytes):
        made.append(real(fn, max_bytes))
        return made[-1]

    monkeypatch.setattr(stream, "Forked", spy)
    return made


@pytest.mark.e2e
@pytest.mark.skipif(not forked.usable(), reason="needs os.fork, one thread and two CPUs")
@pytest.mark.parametrize("gz", [False, True])
def test_halves_with_a_real_child_same_spans_and_reaped(small, tmp_path, gz):
    p = _trace(tmp_path, 20000, gz=gz)
    whole = extract(p, load_trace(p))
    halved = extract(p, TraceFile(p))
    assert small, "the file was not read in halves"
    assert small[-1].pid is None  # reaped, by its result
    assert halved == whole and halved.rank == 2 and len(halved.steps) == 20000
    assert len(halved.syncs) == 400 and all(s.restore_copies == 2 for s in halved.syncs)
    assert _no_children()


@pytest.mark.e2e
@pytest.mark.skipif(not forked.usable(), reason="needs os.fork, one thread and two CPUs")
@pytest.mark.parametrize("gz", [False, True])
def test_a_seam_inside_a_string_the_child_is_killed_and_reaped(small, tmp_path, monkeypatch, gz):
    p = _trace(tmp_path, 20000, arg="}, {" * 64, gz=gz)  # every seam candidate but one in 65 lies in a string
    whole = extract(p, load_trace(p))
    for first in (0.3, 0.45, 0.6):
        monkeypatch.setattr(stream, "FIRST_HALF", first)
        assert extract(p, TraceFile(p)) == whole
    assert len(small) == 3 and _no_children()


@pytest.mark.e2e
@pytest.mark.skipif(not forked.usable(), reason="needs os.fork, one thread and two CPUs")
@pytest.mark.parametrize("gz", [False, True])
def test_an_interrupted_reader_reaps_its_child(small, tmp_path, gz):
    p = _trace(tmp_path, 20000, gz=gz)
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
    assert threading.active_count() == 1  # a gzip source's inflating thread is joined too
