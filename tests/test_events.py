"""The one event-log reader: torn records (killed group, relaunched after it) are skipped."""

from __future__ import annotations

import pytest

from ftrun.errors import BadInput
from ftrun.events import read_events


def test_torn_record_mid_file_and_at_end_are_skipped(tmp_path):
    p = tmp_path / "replica1_rank0.jsonl"
    p.write_text('{"step": 1}\n{"step": 2, "los\n{"step": 3}\n{"step": 4')
    assert [r["step"] for r in read_events(p, strict=True)] == [1, 3]


def test_garbage_line_is_bad_input_only_when_strict(tmp_path):
    p = tmp_path / "e.jsonl"
    p.write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(BadInput, match=r"e\.jsonl:2: not a JSON line"):
        read_events(p, strict=True)
    assert [r["step"] for r in read_events(p)] == [1, 2]


def test_missing_file(tmp_path):
    assert read_events(tmp_path / "nope.jsonl") == []
    with pytest.raises(BadInput, match="unreadable event log"):
        read_events(tmp_path / "nope.jsonl", strict=True)
