"""The CLI's --help panels and its generated reference (docs/cli.md, scripts/gen_cli_reference.py).

Unit tests: the generator runs in process on the typer app (no subprocess, no --help shelled out).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import typer.main

from ftrun import config as cfgmod
from ftrun.cli import app, panel_order
from ftrun.config.parts import PANELS
from train_fixtures import cli

ROOT = Path(__file__).resolve().parents[2]
PANELLED = ("train", "compare", "sweep", "launch")
COMMAND_PANELS = {"Arguments", "Options", "Comparison", "Grid"}  # besides the config tree's


def _commands() -> dict:
    return typer.main.get_command(app).commands  # type: ignore[attr-defined]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_cli_reference", ROOT / "scripts" / "gen_cli_reference.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


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
