"""Issue 24 items 7, 8, 9, 17: every verdict says what the evidence says. Unit tests: no process."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

from train_fixtures import cli

DATA = Path(__file__).parent / "data" / "cpu_run"


def _two_runs(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "runA", tmp_path / "runB"
    shutil.copytree(DATA, a)
    shutil.copytree(DATA, b)
    return a, b


# --- item 8: compare --expect-hidden never prints PASS with exit 1 ---------------------------

def test_expect_hidden_just_above_the_observed_share_fails_everywhere(tmp_path):
    a, b = _two_runs(tmp_path)
    res = cli("compare", str(a), str(b), "--out", str(tmp_path), "--name", "probe", "--json")
    assert res.exit_code == 0, res.output[-500:]
    share = json.loads(res.output)["runs"][0]["hidden_comm_share"]
    want = (math.floor(share * 100) + 1) / 100  # e.g. 0.985 hidden, --expect-hidden 0.99
    assert share < want
    res = cli("compare", str(a), str(b), "--out", str(tmp_path), "--name", "exp", "--expect-hidden", str(want))
    assert res.exit_code == 1, res.output
    last = [ln for ln in res.output.splitlines() if ln.strip()][-1]
    assert last.strip() == "FAIL", res.output[-600:]
    exp_line = next(ln for ln in res.output.splitlines() if ln.startswith("--expect-hidden"))
    shown = float(exp_line.split(" hid ")[1].split("%")[0])
    assert shown < want * 100 and "below" in exp_line and exp_line.rstrip().endswith("FAIL"), exp_line
    report = json.loads((tmp_path / "exp" / "report.json").read_text())
    assert report["verdict"] == "fail" and report["expect_hidden"]["ok"] is False
    assert report["expect_hidden"]["observed"] == share  # the exact value, not a rounded one
    assert "FAIL" in (tmp_path / "exp" / "report.md").read_text()


def test_expect_hidden_met_passes(tmp_path):
    a, b = _two_runs(tmp_path)
    res = cli("compare", str(a), str(b), "--out", str(tmp_path), "--name", "ok", "--expect-hidden", "0.01")
    assert res.exit_code == 0, res.output[-500:]
    assert [ln for ln in res.output.splitlines() if ln.strip()][-1].strip() == "PASS"


def test_pct_against_shows_the_side_of_the_threshold():
    from ftrun.report.compare_view import pct_against

    assert pct_against(0.9853, 0.99) == "98.5%"
    assert pct_against(0.98999, 0.99) == "98.999%"
    assert pct_against(0.995, 0.99) == "99.5%"
    assert pct_against(0.99, 0.99) == "99%"
