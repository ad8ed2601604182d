"""docs/benchmarks.md's generator (scripts/gen_benchmarks_page.py) renders records, never invents.

Unit tests: a page is rendered from small fixture records in a temp folder; nothing is run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from train_fixtures import load_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gen():
    return load_script("gen_benchmarks_page")


MACHINE = {
    "cpus": 2,
    "cpu": "Test CPU",
    "memory_gb": 8.0,
    "os": "Linux 6.1",
    "python": "3.11.7",
    "torch": "2.13.0",
    "torchft": "0.2.0",
}


def _record(bench: str, result, **over) -> dict:
    rec = {
        "bench": bench,
        "command": f"python scripts/{bench}.py",
        "date": "2030-01-02 03:04 UTC",
        "machine": MACHINE,
        "load_before": 1.5,
        "load_after": 2.25,
        "seconds": 42.0,
        "exit_code": 0,
        "result": result,
    }
    return {**rec, **over}


def _page(gen, tmp_path, *records: dict) -> str:
    folder = tmp_path / "benchmarks"
    folder.mkdir(parents=True)
    for r in records:
        (folder / f"{r['bench']}.json").write_text(json.dumps(r))
    out = tmp_path / "benchmarks.md"
    assert gen.main(["--records", str(folder), "--out", str(out)]) == 0
    return out.read_text()


def test_a_record_renders_its_figures_with_command_date_machine_and_load(gen, tmp_path):
    inspect = {"trace_mb": 20.1, "inspect_s": 0.5, "json_load_s": 0.4, "hta_s": 12.5, "ratio": 25.0, "load_avg": 1}
    inspect["hta"] = "traceinsight 0.6.1"
    text = _page(gen, tmp_path, _record("inspect", inspect))
    section = text.split("## inspect-trace vs HTA", 1)[1].split("\n## ", 1)[0]
    assert "| inspect-trace, 20.1 MB trace, end to end | 0.5 s |" in section
    assert "| HTA TraceAnalysis load (traceinsight 0.6.1) | 12.5 s |" in section
    assert "| HTA load / inspect-trace (goal >= 20x) | 25.0x |" in section
    assert "| wall time of the command | 42.0 s (exit 0) |" in section
    assert "- Command: `python scripts/inspect.py`" in section and "- Date: 2030-01-02 03:04 UTC" in section
    assert "2 CPUs (Test CPU), 8.0 GB, Linux 6.1, Python 3.11.7, torch 2.13.0, torchft 0.2.0" in section
    assert "1.5 → 2.25" in section


def test_hta_missing_is_said_not_guessed(gen, tmp_path):
    inspect = {"trace_mb": 20.1, "inspect_s": 0.5, "json_load_s": 0.4, "hta_s": None, "ratio": None}
    text = _page(gen, tmp_path, _record("inspect", inspect))
    assert "not compared: HTA was not installed" in text and "x |" not in text.split("## Large traces")[0]


def test_an_unmeasured_benchmark_names_its_command_and_no_number(gen, tmp_path):
    text = _page(gen, tmp_path, _record("suite", None, exit_code=1))
    large = text.split("## Large traces", 1)[1].split("\n## ", 1)[0]
    assert "Not measured yet: run `python scripts/gen_benchmarks_page.py --run inspect-large`" in large
    assert "|" not in large  # no table: nothing measured
    suite = text.split("## Test suite", 1)[1]
    assert "| wall time of the command | 42.0 s (exit 1) |" in suite  # what ran, and how it ended


def test_any_other_result_shows_its_top_level_values(gen, tmp_path):
    text = _page(gen, tmp_path, _record("suite", {"passed": True, "tolerance": 0.1, "rows": [1, 2]}))
    section = text.split("## Test suite", 1)[1].split("\n## ", 1)[0]
    assert "| passed | true |" in section and "| tolerance | 0.1 |" in section and "rows" not in section


def test_a_result_of_another_shape_falls_back_to_its_top_level_values(gen, tmp_path):
    text = _page(gen, tmp_path, _record("plan-validation", {"passed": True, "tolerance": 0.1}))
    section = text.split("## Plan validation", 1)[1].split("\n## ", 1)[0]
    assert "| passed | true |" in section and "| tolerance | 0.1 |" in section


PAIRED = {"ratio": 1.0807, "repeats": 3, "ci95": [0.9459, 1.2346], "verdict": "not resolved"}


def test_overhead_shows_both_sides_and_the_paired_ratios_with_their_intervals(gen, tmp_path):
    result = {
        "bare_ms_per_step": 60.9,
        "ftrun_ms_per_step": 61.4,
        "paired_ratio": {**PAIRED, "ratio": 1.01, "ci95": [0.99, 1.03]},
        "paired_cpu_ratio": PAIRED,
        "outside_step_body_ms_per_step": 0.196,
        "valid": True,
    }
    section = _page(gen, tmp_path, _record("overhead", result)).split("## Overhead per step", 1)[1]
    assert "| bare torchft DiLoCo loop, wall ms per step (median of repeats) | 60.9 ms |" in section
    assert "1.01x over 3 repeats, 95% interval 0.99-1.03: not resolved" in section
    assert "| ftrun / bare, CPU time of all processes, paired per repeat | 1.0807x over 3 repeats" in section


def test_compare_shows_streaming_over_plain_per_link(gen, tmp_path):
    row = {
        "link": "1gbit,20ms",
        "fragments": 2,
        "verdict": "pass",
        "exposed_ratio": 0.1205,
        "per_sync_exposed_ms": [3.25, 53.9],
        "per_sync_exposed_control_ms": [58.2, 53.9],
        "peak_vs_1_over_f": 1.0477,
        "hidden_share": [0.936, 0.809],
        "steps_per_s": [21.6, 22.0],
    }
    section = _page(gen, tmp_path, _record("compare", [row])).split("## Streaming vs plain DiLoCo", 1)[1]
    assert "| 1gbit,20ms: exposed data, streaming / plain DiLoCo (goal &lt;= 0.10) | 0.120 |" in section
    assert "| 1gbit,20ms: peak bytes per sync, streaming / plain x F (goal 1 +- 0.10) | 1.048 (F = 2) |" in section
    assert "| 1gbit,20ms: hidden share of data communication, streaming / plain | 94% / 81% |" in section


def test_a_table_the_script_printed_is_shown_as_printed(gen, tmp_path):
    table = ["| link | run | check |", "|---|---|---|", "| 1 Gbit/s, 2 ms | streaming | pass |"]
    rec = _record("plan-validation", {"rows": 1, "passed": 1, "tolerance": 0.1}, table=table)
    section = _page(gen, tmp_path, rec).split("## Plan validation", 1)[1].split("\n## ", 1)[0]
    assert "| rows within tolerance 0.1 | 1 of 1 |" in section
    assert "The script's table, as it printed it (each cell: predicted / measured):" in section
    assert "\n".join(table) in section


def test_the_page_is_deterministic_and_a_bad_record_is_one_line(gen, tmp_path):
    rec = _record("paper", None)
    assert _page(gen, tmp_path, rec) == gen.render(gen.read_records(tmp_path / "benchmarks"))
    (tmp_path / "benchmarks" / "bad.json").write_text('{"bench": 1}')
    with pytest.raises(SystemExit, match="bad.json: not a benchmark record"):
        gen.read_records(tmp_path / "benchmarks")


def test_the_last_json_a_script_printed_is_its_result(gen):
    assert gen.last_json('progress\n{"a": 1}\n') == {"a": 1}
    assert gen.last_json('rows\n[\n {"a": 1}\n]\n') == [{"a": 1}]
    assert gen.last_json("no json here\n") is None


def test_numerics_shows_the_largest_error_against_its_tolerance(gen, tmp_path):
    le = {"check": "SUM = sum of contributions", "where": "sync step 10", "error": 2e-7, "tolerance": 4e-5}
    result = {"checked": 4, "replica_syncs_checked": 8, "largest_error": {**le, "ratio": 0.005}, "z": 8.0}
    section = _page(gen, tmp_path, _record("numerics", {**result, "problems": 0}))
    section = section.split("## The numeric check on a clean run", 1)[1].split("\n## ", 1)[0]
    assert "| syncs checked (replica syncs) | 4 (8) |" in section
    assert "| largest error / tolerance (SUM = sum of contributions, sync step 10) | 0.005 (error 2e-07" in section


def test_recovery_shows_each_phase_predicted_and_measured(gen, tmp_path):
    phases = {"detect": [1.0, 1.1, -0.09, True], "relaunch": [4.0, 4.0, 0.0, None], "heal": [None, 0.04, None, None]}
    result = {"verdict": "pass", "tolerance": 0.25, "floor_s": 0.5, "outside_tolerance": []}
    result["faults"] = [{"fault": "kill 1@15", "replica": 1, "phases": phases}]
    section = _page(gen, tmp_path, _record("recovery", result)).split("## Recovery of a killed group", 1)[1]
    assert "| kill 1@15, replica 1: detect, predicted / measured s | 1.00 / 1.10 (-9%) |" in section
    assert "| kill 1@15, replica 1: relaunch, measured s | 4.00 (plan's input) |" in section  # never "+0%"
    assert "| kill 1@15, replica 1: heal, predicted / measured s | not predicted / 0.04 |" in section
    assert "| plan --check verdict (tolerance 25% or 0.5 s per phase) | pass; outside tolerance: none |" in section


def test_spares_show_each_variant_median_each_kill_phases_and_memory(gen, tmp_path):
    kill = {"fault": "kill 1@25", "total_s": 0.9, "phases": {"join": 0.5}, "unaccounted_s": 0.0}
    row = {"variant": "--spares 1", "back": "2 of 2", "median_total_s": 0.95}
    row |= {"kills": [kill, {**kill, "total_s": None}]}
    row |= {"median_phases_s": {"detect": 0.01, "join": 0.5, "heal": None}, "group_pss_mb": 560.0}
    row |= {"spare_pss_mb": 540.5, "exit_code": 1}
    failed = {"variant": "no spares", "exit_code": 1, "error": "no JSON summary"}
    page = _page(gen, tmp_path, _record("recovery-spares", {"spares_compare": [row, failed]}))
    section = page.split("## Kill -> first commit with and without warm spares", 1)[1]
    assert "| --spares 1: kill -> first commit, median s (2 of 2 back) | 0.95 |" in section
    assert "| --spares 1: each kill, s | 0.90, - |" in section
    assert "| --spares 1: median phases, s | detect 0.01, join 0.50 |" in section
    assert "| --spares 1: PSS per process tree, MB | group 560.0, waiting spare 540.5 |" in section
    assert "| no spares | no recovery measured (exit 1: no JSON summary) |" in section
    assert "| --spares 1: ftrun train's exit code | 1 |" in section


def test_worker_memory_shows_the_verdict_quarter_medians_and_heap_growth(gen, tmp_path):
    q = {"rss": [400.0, 417.0], "arena": [165.0, 183.0], "held": [137.0, 137.5], "free": [28.0, 45.0]}
    w = {"replica": "replica0_rank0", "samples": 300, "steps": [10, 3990], "quarters": q}
    w["growth_bytes_per_step"] = {"first_half": {"arena": 9000.0}, "second_half": {"arena": 400.0}}
    result = {"steps": 4000, "replicas": 2, "verdict": "allocator retention", "plateau": True, "retained_share": 0.8}
    half = {"rss": 8000.0, "arena": 9000.0, "held": 1500.0, "free": 7500.0}
    result["growth_bytes_per_step"] = {"first_half": half, "second_half": {**half, "held": -300.0}}
    result["workers"] = [w, {"replica": "replica1_rank0", "samples": 2}]
    section = _page(gen, tmp_path, _record("worker-memory", result)).split("## A training rank's memory", 1)[1]
    assert "| verdict (4000 steps, 2 groups) | allocator retention, plateau: True |" in section
    assert "| replica0_rank0, steps 10-3990: held, MB, first / last quarter's median | 137.0 / 137.5 |" in section
    assert "| replica0_rank0: heap growth per step, bytes, first / second half | +9000 / +400 |" in section
    assert "| replica1_rank0 | 2 sample(s): too few |" in section
    assert "| growth per step, bytes, all workers, first / second half: held | +1500 / -300 |" in section


def test_chaos_shows_faults_recoveries_goodput_and_plans_prediction(gen, tmp_path):
    rec = {
        "count": 7,
        "median_s": 84.0,
        "p90_s": 98.3,
        "phases_median_s": {"detect": 0.5, "relaunch": 67.0, "heal": None},
    }
    chaos = {"fired": 7, "requested": 7, "by_kind": {"kill": 4, "sigterm": 3}, "mtbf_s": 30.0, "realized_mtbf_s": 55.3}
    chaos |= {"recoveries": rec, "missed_steps_per_fault": 93.9}
    goodput = {"chaos_steps_per_s": 6.35, "twin_steps_per_s": 9.0, "retained": 0.7056}
    check = {"prediction": {"retained": 0.75}, "verdict": "pass", "relative_error": 0.063}
    result = {"chaos_summary": chaos, "compare": {"verdict": "pass", "goodput": goodput}, "plan_check": check}
    section = _page(gen, tmp_path, _record("chaos", result)).split("## Goodput under a fault storm", 1)[1]
    assert '| faults injected (requested) | 7 (7): {"kill": 4, "sigterm": 3} |' in section
    assert "| recoveries back, median / p90 s | 7, 84.0 / 98.3 |" in section
    assert "| recovery phases, median s | detect 0.50, relaunch 67.00 |" in section
    assert "| goodput chaos / twin, steps/s | 6.35 / 9.0 |" in section
    assert "| goodput retained, predicted (plan) | 0.75 |" in section
    assert "| plan --check (tolerance 10%) | pass, error 0.063 |" in section


def test_chaos_shows_the_acceptance_cases_length_and_its_timeline(gen, tmp_path):
    """The chaos part's seconds against ``--min-chaos-s`` (met or not), the run's size, and the
    kept whole-run timeline as a link from the page (docs/) to the picture."""
    rec = {"count": 0, "median_s": None, "p90_s": None, "phases_median_s": {}}
    chaos = {"fired": 0, "requested": 0, "by_kind": {}, "mtbf_s": 30.0, "realized_mtbf_s": None, "chaos_s": 312.5}
    chaos |= {"recoveries": rec, "missed_steps_per_fault": None}
    result = {"chaos_summary": chaos, "compare": {"verdict": "pass", "goodput": {}}, "plan_check": None}
    result |= {"replicas": 8, "steps": 750, "min_chaos_s": 300.0, "min_chaos_s_met": True}
    result |= {"timeline": "docs/img/chaos_timeline.png"}
    section = _page(gen, tmp_path, _record("chaos", result)).split("## Goodput under a fault storm", 1)[1]
    assert "| chaos part, s (required ≥ 300: met) | 312.5 |" in section
    assert "| replica groups × steps | 8 × 750 |" in section
    assert (
        "| whole-run timeline (faults, recoveries) | [docs/img/chaos_timeline.png](img/chaos_timeline.png) |" in section
    )
    short = _page(gen, tmp_path / "short", _record("chaos", result | {"min_chaos_s_met": False}))
    assert "| chaos part, s (required ≥ 300: not met) | 312.5 |" in short


def _warm_parts() -> tuple[dict, dict, dict]:
    """A warm-start record's sweep side (one cell), memory and sharing figures."""
    cell = {"cell": "seed-2", "verdict": "pass", "wall_s": 2.0, "steps_s": 0.9, "check_s": 0.1}
    cell["wall_over_steps_and_check"] = 2.0
    side = {"sweep_wall_s": 9.0, "cells": [cell], "median_wall_s": 2.0, "median_steps_s": 0.9}
    side |= {"median_check_s": 0.1, "median_wall_over_steps_and_check": 2.0}
    memory = {"per_group_mb": {"pss": 300.0, "rss": 500.0, "private": 200.0}}
    sharing = {"fresh_import_private_mb": 190.0, "forked_child_private_mb": 1.2}
    return side, memory, sharing


def test_warm_start_shows_the_cpu_to_park_when_recorded(gen, tmp_path):
    side, memory, sharing = _warm_parts()
    result = {"cells": 3, "steps": 20, "cold": side, "warm": side, "sharing": sharing}
    before = _page(gen, tmp_path / "a", _record("warm-start", {**result, "memory": memory}))
    assert "CPU s to park" not in before  # a record from before it was measured
    park = {"agent": 4.5, "rank": 0.6, "groups": 5.1}
    page = _page(gen, tmp_path / "b", _record("warm-start", {**result, "memory": {**memory, "park_cpu_s": park}}))
    assert "| CPU s to park the training's groups, fresh agents: agents + ranks | 5.1 (4.5 + 0.6) |" in page


def test_warm_start_shows_the_zygotes_figures_when_recorded(gen, tmp_path):
    side, memory, sharing = _warm_parts()
    result = {"cells": 4, "steps": 20, "cold": side, "sharing": sharing, "memory": memory}
    before = _page(gen, tmp_path / "a", _record("warm-start", {**result, "warm": side}))
    assert "| the zygote" not in before and "| warm: median cell wall over" not in before  # recorded before it
    zygote = {
        "per_group_mb": {"pss": 210.0, "rss": 480.0, "private": 135.0},
        "park_cpu_s": {"agent": 0.3, "rank": 0.1, "groups": 0.4},
        "zygote": {"pss": 240.0, "private": 200.0, "cpu_s": 2.6},
    }
    warm = {**side, "median_wall_over_cold_steps_and_check": 2.5}
    page = _page(gen, tmp_path / "b", _record("warm-start", {**result, "warm": warm, "memory_zygote": zygote}))
    assert "| warm: median cell wall over the cold cells' steps + check | 2.5x |" in page
    assert (
        "| one replica group parked, its agent forked by the zygote: PSS / RSS / private MB | 210.0 / 480.0 / 135.0 |"
        in page
    )
    assert (
        "| CPU s to park the training's groups, agents forked by the zygote: agents + ranks | 0.4 (0.3 + 0.1) |" in page
    )
    assert (
        "| the zygote (once per sweep), before it forks: PSS / private MB, CPU s of its imports | 240.0 / 200.0, 2.60 |"
        in page
    )
    assert "PSS of all its processes" not in page  # (recorded since)
    zygote["total_pss_mb"] = 540.0
    memory["total_pss_mb"] = 600.0
    page = _page(gen, tmp_path / "c", _record("warm-start", {**result, "warm": warm, "memory_zygote": zygote}))
    row = "| a parked 2-group training, PSS of all its processes MB: fresh agents / forked by the zygote |"
    assert f"{row} 600.0 / 540.0 |" in page


def test_warm_start_shows_the_sweeps_cpu_and_bytecode_cache_when_recorded(gen, tmp_path):
    side, memory, sharing = _warm_parts()
    result = {"cells": 4, "steps": 20, "cold": side, "warm": side, "sharing": sharing, "memory": memory}
    before = _page(gen, tmp_path / "a", _record("warm-start", result))
    assert "CPU s of the whole sweep" not in before and "| Python bytecode cache" not in before  # recorded before them
    cold, warm = {**side, "sweep_cpu_s": 15.25}, {**side, "sweep_cpu_s": 12.5}
    record = {
        **result,
        "cold": cold,
        "warm": warm,
        "bytecode_cache": "on (Python's default, __pycache__ beside the sources)",
    }
    page = _page(gen, tmp_path / "b", _record("warm-start", record))
    assert "| cold: CPU s of the whole sweep, all its processes | 15.25 |" in page
    assert "| warm: CPU s of the whole sweep, all its processes | 12.50 |" in page
    assert (
        "| Python bytecode cache of the sweeps' processes | on (Python's default, __pycache__ beside the sources) |"
        in page
    )
