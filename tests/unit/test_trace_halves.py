"""A large plain trace read in two halves (``ftrun.trace.stream``'s seam and forked child) gives
what it gives read in one piece: the same spans, the same events counted, the same metadata, or
the same one-line error — wherever the seam falls (between events, inside a string that looks
like one, inside a name holding escaped quotes), and whatever becomes of the child.

The child runs in this process here (unit tests start no process: conftest's ``halves`` puts
``_InProcess`` in for ``ftrun.trace.forked.Forked``, running its function at ``result()``);
tests/e2e/test_trace_halves_e2e.py forks a real one."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ftrun.trace import stream, stream_source
from ftrun.trace.stream import TraceFile
from fuzz_traces import read_both_ways as _both, traces

DATA = Path(__file__).parent.parent / "data" / "cpu_run" / "traces"


def _events(n: int, arg: str = "x") -> list[dict]:
    out = []
    for i in range(n):
        out.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "ts": float(i * 10),
                    "dur": 5.0, "pid": 1, "tid": 1, "args": {"a": arg}})  # fmt: skip
        out.append({"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "ts": i * 10 + 1.0, "dur": 1.0,
                    "pid": 1, "tid": 1, "args": {"Input Dims": [[4, 2]], "s": arg}})  # fmt: skip
        out.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": i * 10 + 2.0, "pid": 1, "tid": 1})
    return out


def _write(tmp_path: Path, events: list[dict], **keys) -> Path:
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"schemaVersion": 1, **keys.pop("before", {}), "traceEvents": events, **keys}))
    return p


@pytest.mark.parametrize("first", [0.05, 0.3, 0.45, 0.5, 0.77, 0.95])
def test_same_spans_count_and_keys_wherever_the_seam_falls(halves, tmp_path, monkeypatch, first):
    monkeypatch.setattr(stream, "FIRST_HALF", first)
    p = _write(tmp_path, _events(300), distributedInfo={"rank": 3}, trace_id="t1", before={"baseTimeNanoseconds": 7})
    whole, halved = _both(p)
    assert not isinstance(whole, str), whole
    assert halved == whole and halved.rank == 3
    tf = TraceFile(p)
    kept = sum(len(c) for c in tf.chunks(lambda name: not name.startswith("aten::mm")))
    assert tf.events == 900 and kept == 600
    assert tf.meta.distributedInfo.rank == 3 and tf.meta.trace_id == "t1" and tf.meta.baseTimeNanoseconds == 7
    assert halves.made and all(c.frames is not None for c in halves.made)


@pytest.mark.parametrize(
    "arg",
    [
        '"}, {"ph": "X", "name": "ProfilerStep#99"}, {',  # a seam candidate inside a string
        '\\"}, {\\"',  # escaped quotes around it
        "}, {" * 40,
    ],
)
def test_a_seam_inside_a_string_is_refused_and_the_file_read_on(halves, tmp_path, monkeypatch, arg):
    """The seam is found by bytes alone: one inside a string is only a guess, which the first
    half's last decode refuses; the file is then read on in one piece, the child's result unused."""
    events = _events(200, arg)
    for e in events:
        if e["name"] == "aten::copy_":
            e["name"] = 'aten::copy_ "}, {"name": "ProfilerStep#7"}'  # the pattern in a name, escaped quotes
    for first in (0.2, 0.45, 0.6):
        monkeypatch.setattr(stream, "FIRST_HALF", first)
        p = _write(tmp_path, events)
        whole, halved = _both(p)
        assert not isinstance(whole, str), whole
        assert halved == whole
        tf = TraceFile(p)
        assert sum(len(c) for c in tf.chunks(lambda name: True)) == tf.events == 600
    assert any(c.closed for c in halves.made)  # some seam fell inside a string: its child closed


def test_a_child_without_result_the_second_half_is_read_here(halves, tmp_path):
    halves.fail = True
    p = _write(tmp_path, _events(200), distributedInfo={"rank": 1})
    whole, halved = _both(p)
    assert halved == whole and halved.rank == 1
    tf = TraceFile(p)
    assert sum(len(c) for c in tf.chunks(lambda name: True)) == tf.events == 600


@pytest.mark.parametrize(
    "bad",
    [
        b'{"ph": "X", "name": "ProfilerStep#1", "ts": "soon"}',  # not a TraceEvent: load_trace's words
        b'{"ph": "X", "name": "ProfilerStep#1", "ts": 1,,}',  # not JSON
    ],
)
@pytest.mark.parametrize("gz", [False, True])
def test_a_bad_event_in_either_half_gives_the_same_error(halves, tmp_path, bad, gz):
    events = json.dumps(_events(200))[1:-1].encode()
    parts = events.split(b"}, {")
    for at in (10, len(parts) // 2, len(parts) - 5):
        body = b"}, {".join(parts[:at]) + b"}, " + bad + b", {" + b"}, {".join(parts[at:])
        raw = b'{"traceEvents": [' + body + b"]}"
        p = tmp_path / ("t.json.gz" if gz else "t.json")
        p.write_bytes(gzip.compress(raw) if gz else raw)
        whole, halved = _both(p)
        assert isinstance(whole, str) and halved == whole


def test_events_re_encoded_by_the_child_decode_to_the_same(halves, tmp_path):
    """What the child sends back is the events re-encoded: absent fields, string pids, odd floats,
    nested args, a name with escaped quotes and a non-ASCII character survive the round trip."""
    events = [
        {"name": "ProfilerStep#1", "ph": "X", "ts": 1e-7, "dur": 123456789.123456, "pid": "Spans", "tid": "x"},
        {"name": 'torchft::local_sgd::prepare_sync "q" \u00e9', "ph": "X", "ts": -0.0, "args": {"k": [1, {"n": None}]}},
        {"name": "torchft::manager::allreduce"},
    ] * 100  # fmt: skip
    p = _write(tmp_path, events)
    plain, halved = [], []
    for out, keep in ((plain, None), (halved, lambda name: True)):
        tf = TraceFile(p)
        out.extend(e for c in tf.chunks(keep) for e in c)
    assert halves.made and halves.made[-1].frames is not None
    as_tuples = lambda evs: [(*msgspec.structs.astuple(e)[:-1], bytes(e.args)) for e in evs]  # noqa: E731
    assert as_tuples(halved) == as_tuples(plain) and len(halved) == 300


def test_small_files_are_read_in_one_piece(halves, tmp_path, monkeypatch):
    monkeypatch.setattr(stream, "PARALLEL_BYTES", 1 << 20)
    monkeypatch.setattr(stream, "GZ_PARALLEL_BYTES", 1 << 20)  # a gzip split, where enabled, has its threshold too
    p = _write(tmp_path, _events(50))
    list(TraceFile(p).chunks(lambda name: True))
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(json.dumps({"traceEvents": _events(50)}).encode()))
    list(TraceFile(gz).chunks(lambda name: True))
    assert halves.made == []


def test_the_split_is_chosen_by_what_pays(halves, tmp_path, monkeypatch):
    """Issue 42 item 17: a plain file from ``PARALLEL_BYTES`` is split; a gzip stream never is by
    default (both processes would inflate it up to the seam), however large."""
    monkeypatch.setattr(stream, "PARALLEL_BYTES", 1 << 10)
    monkeypatch.setattr(stream, "GZ_PARALLEL_BYTES", None)  # the tree's default (halves sets 0)
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(json.dumps({"traceEvents": _events(200)}).encode()))
    list(TraceFile(gz).chunks(lambda name: True))
    assert halves.made == []
    list(TraceFile(_write(tmp_path, _events(200))).chunks(lambda name: True))
    assert len(halves.made) == 1


def test_the_measured_defaults():
    """Split only plain files of 32 MB and more (a folder of 19 MB files split cost 1.3-1.5x the
    CPU); never a gzip stream (scripts/bench_inspect.py --parallelism)."""
    assert stream.PARALLEL_BYTES == 32 << 20 and stream.GZ_PARALLEL_BYTES is None


def _gz(tmp_path: Path, events: list[dict], **keys) -> Path:
    plain = _write(tmp_path, events, **keys)
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    return gz


@pytest.mark.parametrize("first", [0.05, 0.45, 0.5, 0.95])
def test_a_gzip_stream_in_halves_same_spans(halves, tmp_path, monkeypatch, first):
    """Both sides inflate the stream and find the same seam in it: the same spans, events and
    keys as one piece, and the child's result is used."""
    monkeypatch.setattr(stream, "FIRST_HALF", first)
    gz = _gz(tmp_path, _events(300), distributedInfo={"rank": 3}, trace_id="t1")
    whole, halved = _both(gz)
    assert not isinstance(whole, str) and halved == whole and halved.rank == 3
    tf = TraceFile(gz)
    assert sum(len(c) for c in tf.chunks(lambda name: not name.startswith("aten::mm"))) == 600 and tf.events == 900
    assert tf.meta.trace_id == "t1"
    assert halves.made and halves.made[-1].frames is not None


@pytest.mark.parametrize("fail", [False, True])
def test_a_gzip_seam_inside_a_string_or_a_failed_child_read_on_here(halves, tmp_path, monkeypatch, fail):
    """The paused first half goes on from either side of the seam: from its "}" when the seam
    was a guess inside a string, from its "{" when the child gave nothing."""
    halves.fail = fail
    events = _events(200, '"}, {"ph": "X", "name": "ProfilerStep#99"}, {')
    for first in (0.2, 0.45, 0.6):
        monkeypatch.setattr(stream, "FIRST_HALF", first)
        gz = _gz(tmp_path, events)
        whole, halved = _both(gz)
        assert not isinstance(whole, str) and halved == whole
        tf = TraceFile(gz)
        assert sum(len(c) for c in tf.chunks(lambda name: True)) == tf.events == 600
    assert halves.made and (fail or any(c.closed for c in halves.made))  # a seam in a string: its child closed


@pytest.mark.parametrize("trailer", [b"\xff\xff\xff\x7f", b"\x00\x00\x00\x00", b"\x10\x00\x00\x00"])
def test_a_gzip_trailer_that_lies_costs_only_the_halves(halves, tmp_path, trailer):
    """The inflated size is the trailer's word (one member, mod 2**32): bytes after the stream
    (never read) can say anything; too large, zero or too small, the result is the same."""
    gz = _gz(tmp_path, _events(300))
    gz.write_bytes(gz.read_bytes() + b"junk" + trailer)
    whole, halved = _both(gz)
    assert not isinstance(whole, str) and halved == whole


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=traces, first=st.floats(0.0, 0.99), chunk=st.sampled_from([16, 64, 300]))
def test_trace_shaped_files_same_in_halves(halves, tmp_path, monkeypatch, value, first, chunk):
    monkeypatch.setattr(stream, "CHUNK", chunk)
    monkeypatch.setattr(stream_source, "CHUNK", chunk)
    monkeypatch.setattr(stream, "FIRST_HALF", first)
    p = tmp_path / "t.json"
    p.write_bytes(json.dumps(value).encode())
    whole, halved = _both(p)
    assert halved == whole


def test_real_trace_in_halves(halves, tmp_path):
    src = next(DATA.glob("*.json*"))
    raw = gzip.decompress(src.read_bytes())
    p = tmp_path / "t.json"
    p.write_bytes(raw)
    whole, halved = _both(p)
    assert not isinstance(whole, str) and halved == whole
    assert halves.made and halves.made[-1].frames is not None
