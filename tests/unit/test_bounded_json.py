"""Every reader of JSON is bounded in depth: a value nested thousands deep in a few KB is one
line naming the file, exit 2, never a ``RecursionError`` traceback (issue 42 items 4 and 6).
No process is started."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from ftrun.errors import BadInput
from ftrun.plan.check import check
from ftrun.small_files import decode_json, read_json
from ftrun.trace.load import load_trace
from ftrun.trace.stream import Fallback, TraceFile

DEEP = 3000  # above the interpreter's recursion limit (1000): the decoders recurse per level


def _deep_trace(path: Path) -> Path:
    ev = {"ph": "X", "name": "x", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": {"deep": None}}
    text = json.dumps({"traceEvents": [ev, dict(ev, ts=2)]}).replace("null", "[" * DEEP + "]" * DEEP, 1)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize("name", ["deep.json", "deep.json.gz"])
def test_the_streaming_reader_falls_back_and_the_loader_says_one_line(tmp_path: Path, name: str) -> None:
    p = _deep_trace(tmp_path / name)
    with pytest.raises(Fallback):  # was: RecursionError out of the chunk decoder
        list(TraceFile(p).chunks(keep=lambda n: True))
    with pytest.raises(BadInput, match=rf"^{p}: not a readable chrome trace \(nested too deeply\)$"):
        load_trace(p)


def test_decode_json_names_the_file(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_text("[" * DEEP + "]" * DEEP)
    for kw in ({}, {"python_json": True}):
        with pytest.raises(BadInput, match=rf"^{p}: unreadable record \(nested too deeply\)$"):
            read_json(p, 1 << 20, "record", **kw)
    with pytest.raises(BadInput, match=r"unreadable record \(JSON is malformed"):
        decode_json(b"{x", p, "record")
    with pytest.raises(BadInput, match=r"x.json: not an ftrun record \(Expected `object`"):
        decode_json(b"[1]", p, "record", type=dict)
    assert decode_json(b"[NaN]", p, "record", python_json=True)[0] != 0  # what json.dumps wrote


def test_plan_check_on_a_deep_report(tmp_path: Path) -> None:
    (tmp_path / "report.json").write_text('{"runs": ' + "[" * DEEP + "]" * DEEP + "}")
    with pytest.raises(BadInput, match=r"report.json: unreadable result \(nested too deeply\)$"):
        check(str(tmp_path), 0.25)


def test_run_dir_records_are_bounded_in_depth(tmp_path: Path) -> None:
    from ftrun import layout

    deep = "[" * DEEP + "]" * DEEP
    (tmp_path / layout.MANIFEST).write_text(f'{{"format": {layout.FORMAT}, "traces": ' + deep + "}")
    with pytest.raises(BadInput, match=r"manifest.json: unreadable manifest \(nested too deeply\)$"):
        layout.read_manifest(tmp_path)
    cell = tmp_path / "sweep-cell.json"
    cell.write_text('{"verdict": "pass", "notes": ' + deep + "}")
    # every field of a sweep cell is typed: the decode stops at the first level of the wrong type
    with pytest.raises(
        BadInput, match=r"not an ftrun sweep cell result \(Expected `str`, got `array` - at `\$.notes\[0\]`\)$"
    ):
        layout.read_sweep_cell(cell)
    (tmp_path / layout.RUN_MARKER).write_text('{"pid": ' + deep + "}")
    assert layout.read_run_marker(tmp_path) is None  # (a marker that is not one: no holder to name)
