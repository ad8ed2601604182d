"""The chunked reader (``ftrun.trace.stream``) gives what the whole-file reader gives.

Same spans from ``extract`` (or the same one-line ``BadInput``) whether a trace is read whole
(``load_trace``) or in chunks (``TraceFile``), for any chunk size: cuts that land inside a
string or a nested value, gzip, metadata keys before and after ``traceEvents``, files the fast
path hands back to ``load_trace``.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ftrun.trace import stream, stream_source
from ftrun.trace.stream import Fallback, TraceFile
from fuzz_traces import read_both_ways as _both, traces

DATA = Path(__file__).parent.parent / "data" / "cpu_run" / "traces"


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(stream, "CHUNK", 512)
    monkeypatch.setattr(stream_source, "CHUNK", 512)
    monkeypatch.setattr(stream_source, "_INFLATED", 512)  # a gzip stream too, in small pieces


def test_real_trace_same_spans_at_any_chunk_size(monkeypatch, tmp_path):
    src = next(DATA.glob("*.json*"))
    for chunk in (256, 4096, 1 << 20):
        monkeypatch.setattr(stream, "CHUNK", chunk)
        monkeypatch.setattr(stream_source, "CHUNK", chunk)
        whole, chunked = _both(src)
        assert not isinstance(whole, str), whole
        assert chunked == whole
    gz = tmp_path / "t.json.gz"
    raw = gzip.decompress(src.read_bytes()) if src.read_bytes()[:2] == b"\x1f\x8b" else src.read_bytes()
    gz.write_bytes(gzip.compress(raw))
    monkeypatch.setattr(stream, "CHUNK", 1000)
    monkeypatch.setattr(stream_source, "CHUNK", 1000)
    whole, chunked = _both(gz)
    assert chunked == whole


def test_chunks_are_bounded_and_count_every_event(small_chunks, tmp_path):
    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": f"ProfilerStep#{i}",
            "ts": float(i * 10),
            "dur": 5.0,
            "pid": 1,
            "tid": 1,
            "args": {"x": "}, {" * 3},
        }
        for i in range(400)
    ]
    p = tmp_path / "t.json"
    p.write_text(
        json.dumps({"schemaVersion": 1, "traceEvents": events, "distributedInfo": {"rank": 3}, "traceName": "x"})
    )
    tf = TraceFile(p)
    sizes = [len(c) for c in tf.chunks()]
    assert len(sizes) > 10 and sum(sizes) == tf.events == 400
    assert tf.meta.distributedInfo is not None and tf.meta.distributedInfo.rank == 3
    whole, chunked = _both(p)
    assert chunked == whole and chunked.rank == 3


@pytest.mark.parametrize(
    "data",
    [
        b'{"traceEvents": [1, 2]}',  # not events: the whole-file reader skips them
        b'{"a": "\\"traceEvents\\": [", "traceEvents": []}',  # the key inside a string first
        b'{"x": {"traceEvents": [{"name": "ProfilerStep#1"}]}, "traceEvents": []}',  # nested key first
        b'{"traceEvents": [{"name": "ProfilerStep#1", "ph": "X", "ts": "soon"}]}',
        b'{"traceEvents": [{"name": "aten::mm", "ph": "X", "ts": "soon"}, {"name": "ProfilerStep#1", "ph": "X"}]}',
        b'{"traceEvents": [{"name": "ProfilerStep#1", "ph": "X"}]',  # truncated
    ],
)
def test_fast_path_refuses_what_it_cannot_read_exactly(small_chunks, tmp_path, data):
    p = tmp_path / "t.json"
    p.write_bytes(data)
    whole, chunked = _both(p)
    assert chunked == whole


def test_fallback_on_unreadable(tmp_path):
    with pytest.raises(Fallback):
        list(TraceFile(tmp_path / "missing.json").chunks())
    p = tmp_path / "b.json.gz"
    p.write_bytes(gzip.compress(b'{"traceEvents": []}')[:-9])
    with pytest.raises(Fallback):
        list(TraceFile(p).chunks())
    assert _both(p)[0] == _both(p)[1]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=traces, gz=st.booleans(), chunk=st.sampled_from([16, 64, 300]))
def test_trace_shaped_files_same_either_way(tmp_path, monkeypatch, value, gz, chunk):
    monkeypatch.setattr(stream, "CHUNK", chunk)
    monkeypatch.setattr(stream_source, "CHUNK", chunk)
    data = json.dumps(value).encode()
    p = tmp_path / ("t.json.gz" if gz else "t.json")
    p.write_bytes(gzip.compress(data) if gz else data)
    whole, chunked = _both(p)
    assert chunked == whole


def test_gzip_inflating_thread_ends_with_the_reader(small_chunks, tmp_path):
    """The thread that inflates a .gz ahead of the decoder stops and is joined when the reader
    stops early (a consumer that breaks off, a Fallback) and when it reaches the end."""
    import threading

    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": f"ProfilerStep#{i}",
            "ts": float(i),
            "dur": 1.0,
            "pid": 1,
            "tid": 1,
        }
        for i in range(3000)
    ]
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    before = threading.active_count()
    it = TraceFile(p).chunks()
    first = next(it)
    assert first and any(t.name == "ftrun-gunzip" for t in threading.enumerate())
    it.close()
    assert threading.active_count() == before
    tf = TraceFile(p)
    assert sum(len(c) for c in tf.chunks()) == tf.events == 3000
    assert threading.active_count() == before
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode())[:-100])  # truncated stream
    with pytest.raises(Fallback):
        list(TraceFile(bad).chunks())
    assert threading.active_count() == before


def test_a_device_side_copy_outside_any_restore_is_counted_as_the_whole_file_path_counts_it(tmp_path):
    """Hypothesis found it: a gpu_user_annotation ``aten::copy_`` outside a restore was held back
    by the reader's ``inside`` filter (never yielded), so ``device_copies`` read 0 where the whole-file path reads 1."""
    value = {
        "traceEvents": [
            {"name": "ProfilerStep#1", "ph": "X"},
            {"name": "aten::copy_", "ph": "X", "cat": "gpu_user_annotation"},
        ]
    }
    p = tmp_path / "t.json"
    p.write_bytes(json.dumps(value).encode())
    whole, chunked = _both(p)
    assert chunked == whole and chunked.device_copies == 1
