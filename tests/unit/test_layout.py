"""The run-dir contract (``ftrun.layout``): records as typed Structs, the format gate. Unit tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import msgspec
import pytest

from ftrun import layout
from ftrun.errors import BadInput
from train_fixtures import event_record, inspect, one_line

CPU_RUN = Path(__file__).parent.parent / "data" / "cpu_run"


def _record(**over) -> layout.EventRecord:
    base = dict(
        manager_step=1,
        manager_step_after=2,
        participants=2,
        quorum_id=1,
        loss=5.0,
        step_time_s=0.1,
        synced=1,
        commit=True,
        fingerprint="ab",
        t=1.0,
    )
    return layout.EventRecord(**event_record(3, **{**base, **over}))


def test_event_record_keeps_null_keys_and_leaves_out_unmeasured_timings() -> None:
    d = json.loads(layout.to_json(_record(exposed_s=0.25)))
    assert d["sent"] is None and "sent" in d  # always present, null when nothing was sent
    assert d["exposed_s"] == 0.25
    assert not {"send_s", "sync_s", "quorum_s", "commit_s", "quorums", "healed", "rejoined"} & set(d)


def test_event_record_round_trips() -> None:
    rec = _record(quorums=[layout.Quorum(4, [0, 1], 0, 2, True, 1, 2.0)], healed=layout.Healed(1, 7, 2))
    assert msgspec.json.decode(layout.to_json(rec), type=layout.EventRecord) == rec


def test_run_event_refuses_a_field_outside_the_contract() -> None:
    with pytest.raises(TypeError):
        layout.RunEvent(event="stall", t=1.0, replica=0, colour="red")
    assert json.loads(layout.to_json(layout.RunEvent(event="stopped", t=1.0, signal="SIGINT"))) == {
        "event": "stopped",
        "t": 1.0,
        "signal": "SIGINT",
    }


def test_fault_marker_key_and_label() -> None:
    m = layout.FaultMarker(1, 25, "kill", fired_at=3.0, fired_step=25, pid=9)
    assert m.key == "kill-r1-s25"
    assert layout.fault_marker(Path("/r"), m.key) == Path("/r/faults/kill-r1-s25.json")
    assert layout.fault_label("hang", 0, 7) == "hang 0@7"


def test_spec_that_is_not_one_is_bad_input(tmp_path: Path) -> None:
    p = tmp_path / layout.SPEC
    p.write_text(json.dumps({"config": {}, "run_dir": "x", "format": layout.FORMAT}))
    with pytest.raises(BadInput, match="not an ftrun spec"):
        layout.read_spec(p)


def test_the_manifest_holds_the_config_tree_and_reads_with_its_type() -> None:
    m = layout.read_manifest(CPU_RUN)
    assert isinstance(m, layout.Manifest) and m.format == layout.FORMAT and m.schedule.fragments == 2
    assert m.config.schedule.sync_every == m.schedule.sync_every and m.config.run_name == m.run_name
    res = inspect(str(CPU_RUN), "--json")
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("name", [layout.MANIFEST, layout.SPEC, layout.SUMMARY])
def test_a_run_dir_file_of_an_earlier_format_is_refused_in_one_line_naming_it(tmp_path: Path, name: str) -> None:
    """One rule (``layout.refuse_format``): a file without ``format`` is format 1 (the manifest's
    ``config`` was flat then), refused with what to do; no compatibility reader converts it."""
    m = json.loads((CPU_RUN / layout.MANIFEST).read_text())
    del m["format"]
    (tmp_path / name).write_text(json.dumps(m))
    read = {
        layout.MANIFEST: lambda: layout.read_manifest(tmp_path),
        layout.SPEC: lambda: layout.read_spec(tmp_path / layout.SPEC),
        layout.SUMMARY: lambda: layout.read_train_summary(tmp_path),
    }[name]
    with pytest.raises(BadInput) as e:
        read()
    assert str(e.value) == (
        f"{tmp_path / name}: run dir format 1, this ftrun reads format {layout.FORMAT} "
        "(read it with the ftrun that wrote it, or run it again with this one)"
    )


def test_manifest_of_another_shape_is_refused_in_one_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(CPU_RUN, run)
    m = json.loads((run / layout.MANIFEST).read_text())
    del m["schedule"]["sync_every"]
    (run / layout.MANIFEST).write_text(json.dumps(m))
    one_line(inspect(str(run)), "not an ftrun manifest", "sync_every")


def test_manifest_of_another_format_is_refused_in_one_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(CPU_RUN, run)
    m = json.loads((run / layout.MANIFEST).read_text())
    (run / layout.MANIFEST).write_text(json.dumps({**m, "format": layout.FORMAT + 1}))
    one_line(inspect(str(run)), f"format {layout.FORMAT + 1}")
