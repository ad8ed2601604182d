"""Evidence that cannot go missing silently: a damaged or missing event-log record is named by
file and line (``EventLog.damage``), never skipped; a torn line is accepted only where its
writer ended (the file's end, or a relaunched incarnation writing after it)."""

from __future__ import annotations

import json

import pytest

from ftrun.errors import BadInput
from ftrun.event_log import read_event_log
from train_fixtures import event_record


def _line(step, **kw) -> str:
    return json.dumps(event_record(step, **kw))


def _log(tmp_path, *lines: str, end: str = "\n"):
    p = tmp_path / "replica1_rank0.jsonl"
    p.write_text("\n".join(lines) + end)
    return p


def test_a_clean_log_has_no_damage(tmp_path):
    got = read_event_log(_log(tmp_path, *(_line(s) for s in range(1, 5))), strict=True)
    assert [r.step for r in got] == [1, 2, 3, 4] and got.damage == []


def test_a_torn_last_line_is_where_its_writer_ended(tmp_path):
    p = _log(tmp_path, _line(1), _line(2), _line(3)[:-9], end="")
    got = read_event_log(p, strict=True)
    assert [r.step for r in got] == [1, 2] and got.damage == []


def test_a_torn_line_before_a_relaunched_incarnation_is_accepted(tmp_path):
    """The group was killed mid-write; its relaunch (restart 1) appended after the cut line."""
    p = _log(
        tmp_path,
        _line(1),
        _line(2),
        _line(3)[:-9],
        _line(None, restart=1),
        _line(3, restart=1, rejoined={"local_step": 1, "aligned_step": 3}),
    )
    got = read_event_log(p, strict=True)
    assert [r.step for r in got] == [1, 2, None, 3] and got.damage == []


def test_a_torn_line_the_same_incarnation_wrote_past_is_damage_naming_file_and_line(tmp_path):
    p = _log(tmp_path, _line(1), _line(2)[:40], _line(3))
    got = read_event_log(p, strict=True)
    assert [r.step for r in got] == [1, 3]
    assert len(got.damage) == 1 and got.damage[0].startswith(f"{p}:2: a cut record"), got.damage
    assert "\n" not in got.damage[0]


@pytest.mark.parametrize("where", ["middle", "last"])
def test_a_nan_value_is_damage_anywhere(tmp_path, where):
    nan = _line(2).replace('"loss": 0.0', '"loss": NaN')
    assert "NaN" in nan
    lines = (
        [_line(1), nan, _line(3)]
        if where == "middle"
        else [_line(1), _line(2), _line(3).replace('"loss": 0.0', '"loss": NaN')]
    )
    p = _log(tmp_path, *lines)
    got = read_event_log(p, strict=True)
    n = 2 if where == "middle" else 3
    assert len(got.damage) == 1 and got.damage[0].startswith(f"{p}:{n}: a damaged record"), got.damage


def test_a_deleted_line_is_a_step_missing_from_its_incarnation(tmp_path):
    p = _log(tmp_path, _line(8), _line(9), _line(11), _line(12))
    got = read_event_log(p, strict=True)
    assert got.damage == [
        f"{p}:3: step 11 follows step 9 of the same incarnation (line 2): the record of step 10 is missing"
    ]


def test_steps_after_a_rejoin_or_in_a_new_incarnation_may_jump(tmp_path):
    p = _log(
        tmp_path,
        _line(1),
        _line(2),
        _line(None, restart=1),
        _line(7, restart=1, rejoined={"local_step": 2, "aligned_step": 7}),
        _line(8, restart=1),
        _line(5, restart=2),
    )
    assert read_event_log(p, strict=True).damage == []


def test_a_400_digit_integer_is_one_line_naming_file_line_and_field(tmp_path):
    sketch = {"proj": [0.5] * 4, "norm": 1.0, "numel": int("9" * 400), "dtype": "float32"}
    part = {"phase": "send", "fragment": 0, "manager_step": 1, "quorum_id": 1, "contribution": sketch}
    p = _log(tmp_path, _line(1), json.dumps({**event_record(2), "numerics": [part]}), _line(3))
    with pytest.raises(BadInput) as e:
        read_event_log(p, strict=True)
    msg = str(e.value)
    assert msg.startswith(f"{p}:2: a number out of range") and "numel" in msg and "\n" not in msg, msg
    assert len(msg) < 300
    assert [r.step for r in read_event_log(p)] == [1, 3]  # not strict (a live reader): skipped


def test_a_float_beyond_double_is_one_line(tmp_path):
    p = _log(tmp_path, _line(1), _line(2).replace('"loss": 0.0', '"loss": 1e400'))
    with pytest.raises(BadInput, match=r"replica1_rank0\.jsonl:2: not an event record \(Number out of range"):
        read_event_log(p, strict=True)


def test_several_steps_missing_or_steps_out_of_order_are_named(tmp_path):
    p = _log(tmp_path, _line(1), _line(2), _line(6), _line(3))
    assert read_event_log(p, strict=True).damage == [
        f"{p}:3: step 6 follows step 2 of the same incarnation (line 2): the records of steps 3..5 are missing",
        f"{p}:4: step 3 follows step 6 of the same incarnation (line 3): its steps out of order",
    ]
