"""compare's report.json and sweep's sweep.json (and sweep-cell.json) are typed records
(``ftrun.layout.CompareReport``, ``SweepResult``, ``SweepCell``), each read back with one typed,
bounded decode: a real file's shape decodes into nested Structs; a field of another type is one
line naming the file and the field (a report.json compare wrote: ``test_api``'s
``test_compare_reads_two_runs``). Unit tests: nothing trains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ftrun import layout
from ftrun.errors import BadInput

ROOT = Path(__file__).resolve().parents[2]
SWEEP_JSON = ROOT / "docs" / "img" / "src" / "sweep.json"  # a real sweep's (the docs' picture is drawn from it)
RECORDED = ROOT / "tests" / "data" / "gbit_baseline" / "report.json"


def test_a_real_sweep_json_decodes_into_nested_records() -> None:
    got = layout.read_sweep_result(SWEEP_JSON)
    raw = json.loads(SWEEP_JSON.read_text())
    assert [c.name for c in got.cells] == [c["name"] for c in raw["cells"]]
    assert isinstance(got.machine, layout.Machine) and got.machine.cpus == raw["machine"]["cpus"]
    assert [(a.key, a.values) for a in got.axes] == [(a["key"], a["values"]) for a in raw["axes"]]
    cell = got.cells[0]
    assert isinstance(cell, layout.SweepRow) and isinstance(cell.numerics, layout.NumericsBrief)
    assert cell.numerics.status == raw["cells"][0]["numerics"]["status"]
    assert cell.params == raw["cells"][0]["params"] and cell.config == raw["cells"][0]["config"]
    assert got.counts == raw["counts"] and got.exit_code == raw["exit_code"]


def test_a_recorded_report_json_decodes_into_nested_records() -> None:
    got = layout.read_compare_report(RECORDED)
    (run,) = got.runs
    assert run.name == "baseline" and run.run_dirs == ["baseline"]
    assert isinstance(run.link, layout.Link) and run.link.description == "1 Gbit/s, 2 ms"
    assert got.link.chosen == "by --link" and got.link.bandwidth_bps == 1e9


@pytest.mark.parametrize(
    "name, text, needle",
    [
        ("report.json", '{"runs": [{"name": "x", "steps_per_s": "fast"}]}', "$.runs[0].steps_per_s"),
        ("report.json", '{"runs": [{"name": "x", "numerics": {"status": 1}}]}', "$.runs[0].numerics.status"),
        ("report.json", '{"link": {"emulated": "yes"}}', "$.link.emulated"),
        ("sweep.json", '{"cells": [{"name": "c", "verdict": "pass", "numerics": []}]}', "$.cells[0].numerics"),
        ("sweep.json", '{"cells": [{"name": "c", "verdict": "maybe"}]}', "$.cells[0].verdict"),
        ("sweep.json", '{"machine": {"cpus": "two"}}', "$.machine.cpus"),
    ],
)
def test_a_field_of_another_type_is_one_line_naming_the_file_and_the_field(
    tmp_path: Path, name: str, text: str, needle: str
) -> None:
    p = tmp_path / name
    p.write_text(text)
    read = layout.read_compare_report if name == "report.json" else layout.read_sweep_result
    with pytest.raises(BadInput) as e:
        read(p)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{p}: not an ftrun result (") and needle in msg, msg


def test_a_sweep_cell_json_holds_a_trained_cells_verdict_only(tmp_path: Path) -> None:
    p = tmp_path / layout.SWEEP_CELL
    p.write_text(json.dumps({"name": "c", "verdict": "pass", "numerics": {"status": "checked", "checked": 2}}))
    cell = layout.read_sweep_cell(p)
    assert cell.numerics == layout.NumericsBrief("checked", 2, 0, None)
    p.write_text(json.dumps({"name": "c", "verdict": "invalid"}))  # a verdict of a cell that did not train
    with pytest.raises(BadInput, match=r"sweep-cell.json: not an ftrun sweep cell result \(.*`\$.verdict`\)$"):
        layout.read_sweep_cell(p)
