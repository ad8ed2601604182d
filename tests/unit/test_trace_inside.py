"""``TraceFile.chunks(keep, inside)``: an event of an ``inside`` name is yielded exactly when it
starts within a span of its container's name on its pid and tid, wherever the two lie in the
file (the container before or after it, in either half of a file read in two), in time order
or not; and ``extract`` (which reads the copies of a restore this way) gives what the
whole-file path gives.

The second half's child runs in this process (conftest's ``halves``: unit tests start no
process)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ftrun.trace import stream, stream_source
from ftrun.trace.spans import LABELS
from ftrun.trace.stream import TraceFile
from ftrun.trace.stream_held import Held as _Held, within as _within
from fuzz_traces import read_both_ways

COPY, RESTORE, OTHER = "aten::copy_", LABELS.restore_parameters, "aten::mm"
INSIDE = {COPY: RESTORE}


def _inside(events: list[dict]) -> set[int]:
    """The ids of the copies within a restore span of their pid and tid (by definition)."""
    spans = [e for e in events if e["name"] == RESTORE and e.get("ph") == "X"]
    return {
        e["args"]["i"]
        for e in events
        if e["name"] == COPY
        and any(
            (c.get("pid", 0), c.get("tid", 0)) == (e.get("pid", 0), e.get("tid", 0))
            and float(c.get("ts", 0)) <= float(e.get("ts", 0)) <= float(c.get("ts", 0)) + float(c.get("dur", 0))
            for c in spans
        )
    }


def _read(p: Path) -> tuple[set[int], list[str], int]:
    """(ids of the copies yielded, the other names yielded, events counted)."""
    tf = TraceFile(p)
    evs = [e for c in tf.chunks(lambda name: name != OTHER, INSIDE) for e in c]
    copies = {msgspec.json.decode(e.args)["i"] for e in evs if e.name == COPY}
    return copies, sorted(e.name for e in evs if e.name != COPY), tf.events


def _write(tmp_path: Path, events: list[dict]) -> Path:
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events}))
    return p


def _syncs(n: int, order: str) -> list[dict]:
    """``n`` restores with copies at their borders, inside, just outside, on another thread; in
    time order, the container after its copies, or shuffled."""
    events, i = [], 0
    for k in range(n):
        t = 100.0 * k
        group = [{"ph": "X", "cat": "user_annotation", "name": RESTORE, "ts": t + 2, "dur": 4.0, "pid": 1, "tid": 1}]
        for ts, tid in ((t + 2, 1), (t + 4, 1), (t + 6, 1), (t + 1.5, 1), (t + 6.5, 1), (t + 4, 2)):
            group.append({"ph": "X", "cat": "cpu_op", "name": COPY, "ts": ts, "dur": 0.1, "pid": 1, "tid": tid,
                          "args": {"i": i, "Input Dims": [[i, 2]]}})  # fmt: skip
            i += 1
        group.append({"ph": "X", "cat": "cpu_op", "name": OTHER, "ts": t + 3, "pid": 1, "tid": 1})
        events += group[::-1] if order == "container last" else group
    if order == "shuffled":
        random.Random(7).shuffle(events)
    return events


def _run_like(n: int) -> list[dict]:
    """``_syncs`` shuffled, each restore in a perform_sync in a step: spans extract reads."""
    events = _syncs(n, "shuffled")
    for k in range(n):
        t = 100.0 * k
        events.append({"ph": "X", "cat": "user_annotation", "name": LABELS.perform_sync, "ts": t, "dur": 10.0,
                       "pid": 1, "tid": 1})  # fmt: skip
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "ts": t - 1, "dur": 20.0,
                       "pid": 1, "tid": 1})  # fmt: skip
    return events


@pytest.mark.parametrize("order", ["time", "container last", "shuffled"])
def test_copies_inside_a_restore_exactly_in_one_piece(tmp_path, order):
    events = _syncs(20, order)
    copies, others, n = _read(_write(tmp_path, events))
    assert copies == _inside(events) and len(copies) == 60  # the borders in, the rest out
    assert others == [RESTORE] * 20 and n == len(events)


@pytest.mark.parametrize("order", ["time", "container last", "shuffled"])
@pytest.mark.parametrize("first", [0.1, 0.45, 0.5, 0.9])
def test_copies_inside_a_restore_exactly_in_halves(halves, tmp_path, monkeypatch, order, first):
    """A restore in one half and its copies in the other: each side's held copies are placed
    against both sides' restores (the parent's sent to the child, the child's sent back)."""
    monkeypatch.setattr(stream, "FIRST_HALF", first)
    events = _syncs(20, order)
    p = _write(tmp_path, events)
    copies, others, n = _read(p)
    assert halves.made and halves.made[-1].frames is not None  # the child's result was used
    assert copies == _inside(events) and others == [RESTORE] * 20 and n == len(events)


@pytest.mark.parametrize("copy_first", [True, False])
def test_a_restore_and_its_copy_on_either_side_of_the_seam(halves, tmp_path, monkeypatch, copy_first):
    """The copy in the first half and its restore in the second (the parent places its copy
    with the child's restores), and the other way round (the child with the parent's)."""
    monkeypatch.setattr(stream, "FIRST_HALF", 0.5)
    copy = {"ph": "X", "cat": "cpu_op", "name": COPY, "ts": 5.0, "pid": 1, "tid": 1, "args": {"i": 0}}
    restore = {"ph": "X", "cat": "user_annotation", "name": RESTORE, "ts": 1.0, "dur": 10.0, "pid": 1, "tid": 1}
    filler = [{"ph": "X", "name": OTHER, "ts": float(i), "pid": 1, "tid": 1} for i in range(300)]
    events = [copy, *filler, restore] if copy_first else [restore, *filler, copy]
    copies, others, _ = _read(_write(tmp_path, events))
    assert halves.made and halves.made[-1].frames is not None
    assert copies == {0} and others == [RESTORE]


def test_a_child_without_the_parents_restores_sends_all_it_held(halves, tmp_path, monkeypatch):
    """No message from the parent: the child cannot place its copies and sends them all (a
    superset); the spans are still the whole-file path's."""
    monkeypatch.setattr(halves, "send", lambda self, message: True)  # nothing reaches the child
    events = _run_like(20)
    p = _write(tmp_path, events)
    copies, _, _ = _read(p)
    assert copies >= _inside(events) and copies != _inside(events)
    whole, halved = read_both_ways(p)
    assert not isinstance(whole, str) and halved == whole


def test_a_failed_child_the_copies_are_placed_here(halves, tmp_path):
    halves.fail = True
    events = _syncs(20, "shuffled")
    copies, _, n = _read(_write(tmp_path, events))
    assert copies == _inside(events) and n == len(events)


def test_restore_shapes_same_as_the_whole_file(halves, tmp_path):
    """extract reads a sync's restore copies (their shapes) from the held copies."""
    p = _write(tmp_path, _run_like(6))
    whole, halved = read_both_ways(p)
    assert not isinstance(whole, str) and halved == whole
    assert [s.restore_copies for s in whole.syncs] == [3] * 6 and whole.syncs[0].restore_shapes


_tids = st.sampled_from([0, 1, "a"])
_event = st.fixed_dictionaries(
    {"name": st.sampled_from([COPY, COPY, RESTORE, OTHER]), "ph": st.sampled_from(["X", "X", "i"])},
    optional={
        "ts": st.integers(0, 40) | st.floats(0, 40, allow_nan=False),
        "dur": st.integers(0, 10) | st.floats(-1, 10, allow_nan=False),
        "tid": _tids,
        "pid": st.integers(0, 1),
    },
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(_event, max_size=40), first=st.floats(0.0, 0.99), chunk=st.sampled_from([32, 128, 1024]))
def test_any_events_any_order_same_as_the_definition(halves, tmp_path, monkeypatch, events, first, chunk):
    monkeypatch.setattr(stream, "FIRST_HALF", first)
    monkeypatch.setattr(stream, "CHUNK", chunk)
    monkeypatch.setattr(stream_source, "CHUNK", chunk)
    for i, e in enumerate(events):
        e["args"] = {"i": i}
    p = _write(tmp_path, events)
    copies, _, n = _read(p)
    assert copies == _inside(events) and n == len(events)
    whole, halved = read_both_ways(p)
    assert halved == whole


def test_within_picks_by_thread_and_union_of_spans():
    """Overlapping and nested spans are one union; a thread without spans keeps nothing; the
    indices come back ascending across threads."""
    held = _Held()
    held.add([msgspec.convert(e, stream.TraceEvent) for e in (
        {"name": COPY, "pid": 1, "tid": 1, "ts": 5.0},   # in (1, 10)
        {"name": COPY, "pid": 1, "tid": 2, "ts": 5.0},   # in (4, 6) on tid 2
        {"name": COPY, "pid": 1, "tid": 1, "ts": 12.0},  # in (8, 12]: the union (1, 12)
        {"name": COPY, "pid": 1, "tid": 3, "ts": 5.0},   # no span on tid 3
        {"name": COPY, "pid": 1, "tid": 1, "ts": 0.5},   # before every span
        {"name": COPY, "pid": 1, "tid": 1, "ts": 3.0},   # out of order: in (1, 10)
    )])  # fmt: skip
    spans = [(1, 1, 1.0, 9.0), (1, 1, 8.0, 4.0), (1, 1, 2.0, 1.0), (1, 2, 4.0, 2.0)]
    assert _within(held, spans) == [0, 1, 2, 5]
    assert [e.ts for e in held.pick([0, 2, 5])] == [5.0, 12.0, 3.0]
    assert _within(held, []) == [] and _within(_Held(), spans) == []
