"""Bad input to inspect-trace: one line naming the file and the problem, exit 2, no traceback.

And a property: the loader (read + decode + span extraction) raises only ``BadInput`` for any
bytes and any JSON.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, example, given, settings, strategies as st

from ftrun.errors import BadInput
from ftrun.trace.load import decode
from ftrun.trace.spans import extract
from fuzz_traces import json_values, traces
from train_fixtures import inspect as cli, one_line, torchft_events

FLAGS = ["--fragments", "2", "--sync-every", "8", "--fragment-sync-delay", "2"]
STEP = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 1.0, "dur": 5.0, "pid": 1, "tid": 1}


def _mk(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


CASES = {
    "missing path": (lambda t: t / "nope.json", "no such file or directory"),
    "empty folder": (lambda t: (t / "empty").mkdir() or t / "empty", "no trace files"),
    "empty file": (lambda t: _mk(t, "e.json", b""), "empty file"),
    "truncated json": (lambda t: _mk(t, "t.json", json.dumps({"traceEvents": [STEP]}).encode()[:-7]), "truncated JSON"),
    "not json": (lambda t: _mk(t, "n.json", b"hello, world"), "not JSON"),
    "broken gzip": (lambda t: _mk(t, "b.json.gz", gzip.compress(b'{"traceEvents": []}')[:-9]), "broken gzip"),
    "gzip garbage": (lambda t: _mk(t, "g.json.gz", b"\x1f\x8b" + b"garbage" * 5), "broken gzip"),
    "json not a trace": (lambda t: _mk(t, "x.json", b'{"hello": [1, 2]}'), "JSON but not a chrome trace"),
    "json list": (lambda t: _mk(t, "l.json", b"[1, 2, 3]"), "JSON but not a chrome trace"),
    "bad event": (
        lambda t: _mk(t, "v.json", b'{"traceEvents": [{"name": "ProfilerStep#1", "ph": "X", "ts": "soon"}]}'),
        "JSON but not a chrome trace",
    ),
    "no step spans": (
        lambda t: _mk(t, "s.json", json.dumps({"traceEvents": [{**STEP, "name": "aten::mm"}]}).encode()),
        "no step spans",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_exit_2_one_line(tmp_path, case):
    make, phrase = CASES[case]
    path = make(tmp_path)
    one_line(cli(str(path), *FLAGS), phrase, str(path))


def _torchft(tmp_path: Path) -> Path:
    return _mk(tmp_path, "ok.json", json.dumps({"traceEvents": torchft_events(range(1, 5))}).encode())


def test_missing_schedule_flags(tmp_path):
    p = _torchft(tmp_path)
    res = cli(str(p))
    assert res.exit_code == 2
    assert str(p) in res.output and "--fragments --sync-every --fragment-sync-delay" in res.output


def test_bad_step_numbering_and_bad_schedule(tmp_path):
    p = _torchft(tmp_path)
    res = cli(str(p), *FLAGS, "--step-numbering", "middle")
    assert res.exit_code == 2 and "--step-numbering 'middle'" in res.output
    res = cli(str(p), "--fragments", "3", "--sync-every", "8", "--fragment-sync-delay", "0")
    assert res.exit_code == 2 and "multiple of fragments" in res.output


def test_minimal_torchft_trace_passes(tmp_path):
    res = cli(str(_torchft(tmp_path)), *FLAGS)
    assert res.exit_code == 0, res.output


# ---------------------------------------------------------------- property: only BadInput


def _load(data: bytes) -> None:
    p = Path("fuzz.json")
    try:
        extract(p, decode(p, data))
    except BadInput as e:
        assert "\n" not in str(e)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_arbitrary_bytes_only_badinput(data):
    _load(data)
    _load(b"\x1f\x8b" + data)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_arbitrary_json_only_badinput(value):
    _load(json.dumps(value).encode())


@settings(max_examples=300, deadline=None)
@given(traces)
def test_trace_shaped_json_only_badinput(value):
    _load(json.dumps(value).encode())


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=traces, gz=st.booleans())
@example(value={"traceEvents": torchft_events(range(1, 5))}, gz=True)  # a real schedule: a verdict, "pass"
@example(value={"traceEvents": torchft_events(range(1, 5), delay=1)}, gz=False)  # each send a step late: "fail"
def test_trace_shaped_files_through_analyze(tmp_path, value, gz):
    from ftrun.check.analyze import analyze

    data = json.dumps(value).encode()
    p = tmp_path / ("t.json.gz" if gz else "t.json")
    p.write_bytes(gzip.compress(data) if gz else data)
    try:
        r = analyze([p], fragments=2, sync_every=8, fragment_sync_delay=2)
    except BadInput as e:  # NotChecked included: nothing to check is said, never a verdict
        assert "\n" not in str(e)
        event("BadInput")
        return
    event(f"verdict {r.verdict}")
    # a verdict only with evidence: checked events, and it passes exactly when nothing is wrong
    assert r.events, "a verdict on zero checked events"
    assert r.verdict == ("fail" if r.problems() else "pass"), (r.verdict, r.problems())
