"""compare's pure parts: the default link, --repeat's order and aggregation, the throughput claim."""

from __future__ import annotations

import pytest

from ftrun.check.metrics import FIGURES, aggregate
from ftrun.commands.compare import repeat_plan
from ftrun.link_spec import link_for
from ftrun.report.compare_view import conclusion, rows, throughput_claim


@pytest.mark.parametrize("step_s, model_bytes, replicas, h", [(0.03, 400_000, 2, 20), (0.2, 50_000_000, 4, 100), (0.005, 80_000, 8, 10)])
def test_default_link_makes_plain_sync_a_quarter_of_h(step_s: float, model_bytes: int, replicas: int, h: int) -> None:
    link = link_for(step_s, model_bytes, replicas, h)
    share = link.plain_sync_s(model_bytes, replicas) / (h * step_s)
    assert share == pytest.approx(0.25, rel=0.05)  # bandwidth rounded to 2 significant digits
    assert link.latency_s <= 0.01


def test_repeat_alternates_who_goes_first() -> None:
    assert repeat_plan(["s", "b"], 1) == [(0, "s"), (1, "b")]
    assert repeat_plan(["s", "b"], 3) == [(0, "s-1"), (1, "b-1"), (1, "b-2"), (0, "s-2"), (0, "s-3"), (1, "b-3")]


def _run(name: str, sps: float, **over) -> dict:
    r = {"name": name, "run_dir": f"/c/{name}", "verdict": "pass", "problems": [], "steps_per_s": sps,
         "exposed_comm_s": 1.0, "exposed_control_s": 0.2, "per_sync_exposed_ms": 50.0, "per_sync_exposed_control_ms": 10.0,
         "hidden_comm_share": 0.5, "compute_utilisation": 0.8, "peak_sync_bytes": 100, "final_loss": 3.0}
    r.update(over)
    return r


def test_aggregate_median_spread_and_verdict() -> None:
    reps = [_run("a", 10.0, run_dir="/c/a-1", steps_per_s_per_replica=[9.0, 11.0]),
            _run("a", 14.0, run_dir="/c/a-2", verdict="fail", problems=["x"], steps_per_s_per_replica=[15.0, 13.0]),
            _run("a", 11.0, run_dir="/c/a-3", steps_per_s_per_replica=[12.0, None])]
    got = aggregate(reps)
    assert got["steps_per_s_per_replica"] == [12.0, None]  # per replica; a missing value stays missing
    assert got["steps_per_s"] == 11.0 and got["spread"]["steps_per_s"] == [10.0, 14.0]
    assert got["repeats"] == 3 and got["verdict"] == "fail" and got["problems"] == ["a-2: x"]
    assert [r["run_dir"] for r in got["repeat_runs"]] == ["/c/a-1", "/c/a-2", "/c/a-3"]
    assert set(got["spread"]) <= set(FIGURES)
    one = aggregate([_run("a", 10.0)])
    assert one["repeats"] == 1 and one["spread"] == {} and one["steps_per_s"] == 10.0


def test_throughput_claimed_only_beyond_the_spread() -> None:
    a = aggregate([_run("a", x) for x in (10.0, 10.5, 11.0)])
    b_far = aggregate([_run("b", x) for x in (8.0, 8.2, 8.4)])
    b_near = aggregate([_run("b", x) for x in (9.0, 10.2, 11.5)])
    assert "beyond the spread of 3 runs" in throughput_claim(a, b_far)
    near = throughput_claim(a, b_near)
    assert "within the spread" in near and "no difference claimed" in near
    assert "spread not measured" in throughput_claim(aggregate([_run("a", 10.0)]), aggregate([_run("b", 5.0)]))
    assert "no difference claimed" in conclusion([a, b_near])


def test_table_shows_median_and_range() -> None:
    a = aggregate([_run("a", x) for x in (10.0, 12.0, 11.0)])
    b = aggregate([_run("b", 9.0)])
    base = {"schedule": {"fragments": 1, "sync_every": 2, "fragment_sync_delay": 0}, "syncs": 2, "commits": 2, "loss_at_steps": {}}
    table = {r[0]: r[1:] for r in rows({"runs": [{**base, **a}, {**base, **b}]})}
    assert table["steps/s (mean)"] == ["11.00 (10.00 to 12.00)", "9.00"]
    assert table["compute utilisation"] == ["80% (80% to 80%)", "80%"]
    assert table["exposed control per sync"][1] == "10.0 ms"
