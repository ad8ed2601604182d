"""``plan --check`` never says PASS on zero evidence: a compare or sweep whose runs report no
measured figure (a crashed cell, a compare whose runs have no steps) compares nothing, and its
verdict says so (exit 1), not "every prediction within tolerance"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_plan_cli import invoke, make_compare, make_run

from train_fixtures import one_line


def test_a_compare_with_nothing_measured_is_not_a_pass(tmp_path: Path) -> None:
    cmp_dir = make_compare(tmp_path, data_ms=1000.0, control_ms=60.0, sps=2.7)
    rep = json.loads((cmp_dir / "report.json").read_text())
    for r in rep["runs"]:
        r.update(per_sync_exposed_ms=None, per_sync_exposed_control_ms=None, steps_per_s=None)
    (cmp_dir / "report.json").write_text(json.dumps(rep))
    res = invoke("--check", str(cmp_dir), "--json")
    assert res.exit_code == 1, res.output
    out = json.loads(res.output)
    assert out["verdict"] == "not checked" and out["not_checked"] == ["baseline"]
    text = invoke("--check", str(cmp_dir))
    assert text.exit_code == 1 and "PASS" not in text.output and "NOT CHECKED" in text.output


def test_a_sweep_cell_without_figures_is_named_beside_the_ones_that_pass(tmp_path: Path) -> None:
    sweep = tmp_path / "sw"
    good, crashed = make_run(sweep / "cell-0"), make_run(sweep / "cell-1")
    cells = [
        {
            "name": "good",
            "verdict": "pass",
            "steps_per_s": 2.7,
            "exposed_comm_per_sync_ms": 1010.0,
            "run_dir": str(good),
        },
        {
            "name": "crashed",
            "verdict": "crashed",
            "steps_per_s": None,
            "exposed_comm_per_sync_ms": None,
            "run_dir": str(crashed),
        },
    ]
    (sweep / "sweep.json").write_text(json.dumps({"cells": cells}))
    res = invoke("--check", str(sweep), "--json")
    assert res.exit_code == 0, res.output  # the good cell is evidence; the crashed one is named
    out = json.loads(res.output)
    assert out["verdict"] == "pass" and out["not_checked"] == ["crashed"]
    assert "not checked: crashed" in " ".join(invoke("--check", str(sweep)).output.split())


def test_a_recovery_with_no_phase_measured_is_not_a_pass() -> None:
    """A kill whose recovery left no measured phase (the group never came back) compares nothing."""
    from test_plan_recovery import BW, LAT, inputs, recovery

    from ftrun.plan.recovery import predict_recovery
    from ftrun.plan.recovery_check import recovery_rows, recovery_verdict

    pred = predict_recovery(inputs(kill_step=15), BW, LAT)
    rows, failed = recovery_rows(pred, [recovery({}, float("nan"), heal_bytes_=None)], 0.25)
    assert not failed
    assert recovery_verdict(rows, failed) == "not checked"
    t = 100.0
    rows, failed = recovery_rows(pred, [recovery({"detect": (t, t + 2.2)}, float("nan"), heal_bytes_=None)], 0.25)
    assert recovery_verdict(rows, failed) == "pass"


@pytest.mark.parametrize(
    "name, text, needle",
    [
        ("report.json", '{"runs": [{}]}', "missing required field `name` - at `$.runs[0]`"),
        ("report.json", '{"runs": {"a": 1}}', "Expected `array`, got `object` - at `$.runs`"),
        ("report.json", '{"runs": [{"name": "x", "run_dir": 3}]}', "got `int` - at `$.runs[0].run_dir`"),
        (
            "report.json",
            '{"runs": [{"name": "x", "repeat_runs": [1]}]}',
            "Expected `object`, got `int` - at `$.runs[0].repeat_runs[0]`",
        ),
        ("sweep.json", '{"cells": [1]}', "Expected `object`, got `int` - at `$.cells[0]`"),
        ("sweep.json", '{"cells": [{"run_dir": [2, "a"]}]}', "got `array` - at `$.cells[0].run_dir`"),
    ],
)
def test_a_result_of_another_shape_is_one_line(tmp_path: Path, name: str, text: str, needle: str) -> None:
    (tmp_path / name).write_text(text)
    one_line(invoke("--check", str(tmp_path)), needle)


def test_a_measured_figure_that_is_not_a_number_is_one_line(tmp_path: Path) -> None:
    cmp_dir = make_compare(tmp_path, data_ms=1000.0, control_ms=60.0, sps=2.7)
    rep = json.loads((cmp_dir / "report.json").read_text())
    rep["runs"][0]["per_sync_exposed_ms"] = "1000"
    (cmp_dir / "report.json").write_text(json.dumps(rep))
    one_line(invoke("--check", str(cmp_dir)), "not an ftrun result", "got `str` - at `$.runs[0].per_sync_exposed_ms`")


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf"])
def test_tokens_per_step_beside_step_ms_is_checked_too(value: str) -> None:
    """With --step-ms, --tokens-per-step only divides --train-tokens: 0 was a ZeroDivisionError, a
    negative one printed negative hours."""
    res = invoke(
        "--params", "1e9", "--step-ms", "100", "--link", "1gbit", "--train-tokens", "1e9", "--tokens-per-step", value
    )
    one_line(res, "--tokens-per-step", "must be a number > 0")
