"""scripts/gen_pgs_page.py: sweeps from two venvs merged into one table, each unavailable cell
with what it needs (hand-made sweep.json files; nothing runs)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _page():
    spec = importlib.util.spec_from_file_location("gen_pgs_page", ROOT / "scripts" / "gen_pgs_page.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _sweep(tmp: Path, name: str, torchft: str, torch: str, cells: list[dict]) -> Path:
    dist, version = torchft.split()
    p = tmp / f"{name}.json"
    versions = {"torchft_distribution": dist, "torchft": version, "torch": torch}
    p.write_text(json.dumps({"versions": versions, "cells": cells}))
    return p


def _cell(backend: str, verdict: str, **extra) -> dict:
    params = {"backend": backend, "mode": "streaming", "bucketize": False, "quantize": False, "kill": []}
    return {"name": backend, "params": params, "verdict": verdict, **extra}


def test_two_venvs_merge_into_one_table_with_what_each_unavailable_cell_needs(tmp_path):
    page = _page()
    old = _sweep(
        tmp_path,
        "old",
        "torchft 0.2.0",
        "2.13.0+cpu",
        [
            _cell("gloo", "pass", numerics={"status": "checked"}, commits=2.0),
            _cell("nccl", "unavailable", problem="--backend nccl: no GPU visible on this host"),
            _cell("nccl", "unavailable", problem="--backend nccl: no GPU visible on this host"),
        ],
    )
    kill = {**_cell("gloo", "pass", recovery_s=4.25, recovery_largest_phase="relaunch"), "torch": "2.14.1"}
    kill["params"]["kill"] = ["1@15"]
    new = _sweep(
        tmp_path,
        "new",
        "torchft-nightly 2026.10.26",
        "2.14.1",
        [
            kill,
            _cell("torchcomms", "unavailable", problem="--backend torchcomms: torchcomms is not installed (pip ...)"),
            _cell(
                "gloo-native",
                "unavailable",
                problem="--backend gloo-native: torch 2.13.0 cannot reconfigure a native group",
            ),
        ],
    )
    rec = page.record([old, new])
    assert [(c.torchft, c.torch) for c in rec.cells][:1] == [("torchft 0.2.0", "2.13.0+cpu")]
    text = page.render(rec)
    assert "## torchft 0.2.0, torch 2.13.0+cpu" in text and "## torchft-nightly 2026.10.26, torch 2.14.1" in text
    assert "| gloo | streaming | off | off | none | **pass** | checked | 2 |  |  |" in text
    assert "| gloo | streaming | off | off | 1@15 | **pass** |  |  | 4.2 (relaunch) |  |" in text
    assert "| nccl | 2 | a GPU (CUDA) |" in text  # two cells, one line, what they need
    assert "| torchcomms | 1 | the torchcomms package" in text and "| gloo-native | 1 | torch >= 2.14" in text
    assert page.render(rec) == text  # deterministic: the page is its record's


def test_a_reason_no_rule_knows_is_shown_as_it_is():
    page = _page()
    assert page.needs("--backend x: something new") == "--backend x: something new"
    assert page.needs(None) == "not said"
