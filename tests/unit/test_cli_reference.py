"""The CLI's --help panels and its generated reference (docs/cli.md, scripts/gen_cli_reference.py).

Unit tests: the generator runs in process on the typer app (no subprocess, no --help shelled out).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import typer.main

from ftrun import config as cfgmod
from ftrun.cli import app
from ftrun.cli_support import panel_order
from ftrun.config.parts import PANELS
from train_fixtures import cli, load_script

ROOT = Path(__file__).resolve().parents[2]
PANELLED = ("train", "compare", "sweep", "launch")
COMMAND_PANELS = {"Arguments", "Options", "Comparison", "Grid"}  # besides the config tree's


def _commands() -> dict:
    return typer.main.get_command(app).commands  # type: ignore[attr-defined]


def _generator():
    return load_script("gen_cli_reference")


def test_a_config_fields_panel_is_its_parts():
    f = cfgmod.fields()
    assert f["fragments"].panel == "Schedule" and f["kill"].panel == "Faults" and f["link"].panel == "Link and compute"
    assert f["seq_len"].panel == f["model"].panel == "Model and data"
    assert f["replica_group_id"].panel == "Several hosts" and f["replicas"].panel == "Replica groups"  # Opt.panel
    assert all(x.panel in PANELS for x in f.values())


@pytest.mark.parametrize("name", PANELLED)
def test_every_option_has_a_known_panel_and_one_line_of_help(name):
    for p in _commands()[name].params:
        if p.name == "help":
            continue
        panel = getattr(p, "rich_help_panel", None) or ("Arguments" if p.param_type_name == "argument" else None)
        assert panel in PANELS or panel in COMMAND_PANELS, f"{name} {p.name}: panel {panel!r}"
        assert p.help and "\n" not in p.help and len(p.help) <= 110, f"{name} {p.name}: help not one line"


@pytest.mark.parametrize("name", PANELLED)
def test_help_shows_the_panels_in_order_and_examples_last(name):
    out = cli(name, "--help", env={"COLUMNS": "100"}).output
    panels = panel_order([getattr(p, "rich_help_panel", None) or "Options" for p in _commands()[name].params])
    at = [out.index(f"\n{panel}:\n") for panel in panels if panel != "Arguments"]
    assert at == sorted(at), panels
    assert out.rstrip().splitlines()[-1].strip() and "Example" in out[at[-1] :], "examples belong in the epilog"


def test_panel_order_puts_the_commands_own_first_and_help_last():
    assert panel_order(["Options", "Output", "Faults", "Grid", "Schedule"]) == [
        "Grid",
        "Schedule",
        "Faults",
        "Output",
        "Options",
    ]


def test_the_checked_in_reference_is_current():
    """docs/cli.md is what the generator writes now (after a CLI change: python scripts/gen_cli_reference.py)."""
    gen = _generator()
    assert gen.render() == (ROOT / "docs" / "cli.md").read_text(), "docs/cli.md is stale: run " + gen.COMMAND


def test_the_reference_lists_every_command_and_option():
    text = _generator().render()
    for name, cmd in _commands().items():
        assert f"## ftrun {name}\n" in text, name
        for p in cmd.params:
            for opt in [*p.opts, *getattr(p, "secondary_opts", [])]:
                if opt.startswith("--") and opt != "--help":
                    assert f"`{opt}" in text or f", {opt}" in text, f"{name} {opt}"
    assert "ftrun train --mode streaming --replicas 2 --steps 60" in text  # an example, as a code block
    assert "| `--steps` | `<int>` | `60` |" in text  # a config field's default, from the config tree


def test_check_mode_is_one_line_and_exit_1_when_stale(tmp_path, capsys):
    gen = _generator()
    page = tmp_path / "cli.md"
    assert gen.main(["--out", str(page)]) == 0
    capsys.readouterr()
    assert gen.main(["--check", "--out", str(page)]) == 0
    page.write_text(page.read_text().replace("--steps", "--stepz"))
    assert gen.main(["--check", "--out", str(page)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "stale" in err and gen.COMMAND in err
