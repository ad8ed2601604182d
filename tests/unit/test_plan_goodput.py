"""The goodput model (ftrun.plan.goodput) and compare's chaos-vs-twin pairing
(ftrun.check.chaos_run.goodput_comparison) on hand-made inputs. Unit tests: no process."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import msgspec
import pytest

from ftrun import layout
from ftrun.chaos_summary import Goodput
from ftrun.check import chaos_run
from ftrun.config import RunConfig
from ftrun.plan.goodput import GoodputInputs, predict_goodput, relative_error
from train_fixtures import recovery_record


def test_each_fault_costs_recovery_half_a_commit_window_and_the_survivors_stall():
    x = GoodputInputs(replicas=8, mtbf_s=30.0, recovery_s=20.0, step_s=1.0, sync_window=10, stall_s=0.5)
    p = predict_goodput(x)
    assert p.uncommitted_s == pytest.approx(5.0)  # half of 10 steps of 1 s
    assert p.stall_s == pytest.approx(3.5)  # 7 survivors x 0.5 s
    assert p.cost_s == pytest.approx(28.5)
    assert p.retained == pytest.approx(1 - 28.5 / (8 * 30.0))


def test_more_groups_or_rarer_faults_keep_more_and_the_share_never_goes_below_zero():
    base = dict(recovery_s=20.0, step_s=1.0, sync_window=10)
    few = predict_goodput(GoodputInputs(replicas=2, mtbf_s=30.0, **base)).retained
    many = predict_goodput(GoodputInputs(replicas=32, mtbf_s=30.0, **base)).retained
    rare = predict_goodput(GoodputInputs(replicas=2, mtbf_s=3000.0, **base)).retained
    assert few < many < 1 and few < rare < 1
    assert predict_goodput(GoodputInputs(replicas=2, mtbf_s=1.0, **base)).retained == 0.0
    with pytest.raises(ValueError):
        predict_goodput(GoodputInputs(replicas=2, mtbf_s=0.0, **base))


def test_relative_error():
    assert relative_error(0.9, 1.0) == pytest.approx(0.1)
    assert relative_error(0.5, 0.0) is None


def _goodput(rate):
    return Goodput(useful_steps=10, lost_steps=0, tail_steps=0, train_s=1.0, steps_per_s=rate, groups=[])


def test_compare_pairs_the_chaos_run_with_its_twin_and_names_what_else_differs(monkeypatch):
    configs = {
        "c1": {"chaos": ["kill:30"], "chaos_seed": 1, "replicas": 8, "steps": 300, "run_name": "c1", "out": "x"},
        "c2": {"chaos": ["kill:30"], "chaos_seed": 1, "replicas": 8, "steps": 300, "run_name": "c2", "out": "x"},
        "t1": {"chaos": [], "chaos_seed": 0, "replicas": 8, "steps": 300, "run_name": "t1", "out": "y"},
        "t2": {"chaos": [], "replicas": 4, "steps": 300},
    }
    rates = {"c1": 6.0, "c2": 8.0, "t1": 10.0, "t2": 10.0}
    fake = {k: (SimpleNamespace(config=RunConfig.from_keys(**c)), _goodput(rates[k])) for k, c in configs.items()}
    monkeypatch.setattr(chaos_run, "run_goodput", lambda d: fake[Path(d).name])
    got = chaos_run.goodput_comparison(["twin", "chaos"], [[Path("t1")], [Path("c1"), Path("c2")]])
    assert got is not None and (got.chaos, got.twin) == ("chaos", "twin")
    assert got.chaos_steps_per_s == pytest.approx(7.0)  # the median over the repeats
    assert got.retained == pytest.approx(0.7) and got.differs == []
    assert (got.repeats, got.chaos_repeats_steps_per_s, got.twin_repeats_steps_per_s) == (2, [6.0, 8.0], [10.0])
    assert got.retained_per_repeat == [pytest.approx(0.6)] and got.retained_spread is None  # one twin: no spread
    other = chaos_run.goodput_comparison(["chaos", "twin"], [[Path("c1")], [Path("t2")]])
    assert other is not None and other.differs == ["replicas"]
    # two chaos runs, or two fault-free ones: no twin, no goodput retained
    assert chaos_run.goodput_comparison(["a", "b"], [[Path("c1")], [Path("c2")]]) is None
    assert chaos_run.goodput_comparison(["a", "b"], [[Path("t1")], [Path("t2")]]) is None


def test_plan_check_holds_the_prediction_against_the_measured_retained_share(tmp_path, monkeypatch):
    import json

    from ftrun.plan import goodput_run as plan_goodput

    x = GoodputInputs(replicas=8, mtbf_s=30.0, recovery_s=20.0, step_s=0.0, sync_window=10)
    monkeypatch.setattr(plan_goodput, "inputs_from_run", lambda d: (x, {"mtbf_s": "run"}))
    predicted = predict_goodput(GoodputInputs(8, 30.0, 20.0, 8 / 10.0, 10)).retained  # the twin's step: 8 / 10 steps/s
    runs = [{"name": "chaos", "run_dir": "../chaos"}, {"name": "twin", "run_dir": "../twin"}]
    for measured, want in ((predicted * 1.05, 0), (predicted * 1.25, 1)):
        none = {"useful_steps": 0, "lost_steps": 0, "tail_steps": 0, "train_s": None, "steps_per_s": None, "groups": []}
        g = {"chaos": "chaos", "twin": "twin", "twin_steps_per_s": 10.0, "retained": measured, "differs": []}
        g |= {"chaos_steps_per_s": None, "chaos_goodput": none, "twin_goodput": none}  # (the check reads none)
        (tmp_path / "report.json").write_text(json.dumps({"runs": runs, "goodput": g}))
        assert plan_goodput.has_goodput(tmp_path)
        out = plan_goodput.check_goodput(tmp_path, 0.10)
        assert out.prediction.retained == pytest.approx(predicted, abs=1e-4)
        assert out.verdict == ("pass" if want == 0 else "fail")
    (tmp_path / "report.json").write_text(json.dumps({"runs": runs, "goodput": None}))
    assert not plan_goodput.has_goodput(tmp_path)


def test_inputs_from_a_chaos_run_its_realized_mtbf_mean_recovery_and_mean_detect(monkeypatch, tmp_path):
    """Means, not medians: the cost is linear per fault, and one long stall is most of a storm's."""
    from ftrun.chaos_summary import RecoveryStats
    from ftrun.errors import BadInput
    from ftrun.plan import goodput_run as plan_goodput

    stats = RecoveryStats(
        count=3, never_back=0, absorbed=0, median_s=20.0, p90_s=60.0, totals_s=[10, 20, 60], phases_median_s={}
    )
    chaos = SimpleNamespace(by_kind={"kill": 3}, realized_mtbf_s=50.0, recoveries=stats, fired=3, chaos_s=150.0)
    spans = [
        msgspec.convert(recovery_record(spans={"detect": d}), layout.RecoveryRecord)
        for d in ([0.0, 1.0], [0.0, 59.0], [0.0, 3.0], None)
    ]
    summary = SimpleNamespace(chaos=chaos, recovery=spans)
    manifest = SimpleNamespace(replicas=4, schedule=SimpleNamespace(sync_every=20, fragments=2))
    monkeypatch.setattr(plan_goodput, "_chaos_of", lambda d: (summary, manifest))
    monkeypatch.setattr(plan_goodput, "_median_step_s", lambda d, m: 0.5)
    x, sources = plan_goodput.inputs_from_run(tmp_path)
    assert x == GoodputInputs(replicas=4, mtbf_s=50.0, recovery_s=30.0, step_s=0.5, sync_window=10, stall_s=21.0)
    assert (
        "mean of its 3 detect intervals" in sources["stall_s"] and "mean of its 3 recoveries" in sources["recovery_s"]
    )
    chaos.by_kind = {"kill": 2, "hang": 1}
    with pytest.raises(BadInput, match="hangs, which the goodput model does not cover"):
        plan_goodput.inputs_from_run(tmp_path)
