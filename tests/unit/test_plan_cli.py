"""``ftrun plan`` through the CLI (typer's CliRunner, in-process): bad input, --from, --check on
hand-made compare and sweep dirs. No training; the run dirs are written here.

The hand-made run: 2 replicas, plain DiLoCo F=1 H=4 tau=0, 8 steps, one 1 MB fragment, an
emulated link of 8 Mbit/s and 10 ms, compute 100 ms a step. Both groups waited 90 ms at each
quorum, so neither waited for the other: the lighthouse's reply took 90 - 20 ms (the held round
trip); should_commit took 10 ms. The model predicts per sync 1.0 s + 20 ms of allreduce, a 90 ms
quorum and the 10 ms commit: 1120 ms; 8 steps in 0.8 + 2 x 1.12 s = 2.63 steps/s.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from ftrun.plan.result import PlanResult
from train_fixtures import cli, event_record, one_line, train_manifest

PRED_MS, PRED_SPS = 1120.0, 8 / 3.04


def make_run(path: Path, compute_s: float = 0.1, link: dict | None = None) -> Path:
    (path / "events").mkdir(parents=True)
    manifest = train_manifest(
        replicas=2,
        nproc_per_replica=1,
        schedule={"fragments": 1, "sync_every": 4, "fragment_sync_delay": 0, "steps": 8},
        fragments=[
            {
                "id": 0,
                "params": [{"name": "w", "numel": 250_000, "shape": [250_000]}],
                "numel": 250_000,
                "bytes": 1_000_000,
            }
        ],
        link=link
        if link is not None
        else {"bandwidth_bps": 8e6, "latency_s": 0.01, "emulated": True, "describe": "8 Mbit/s, 10 ms"},
    )
    (path / "manifest.json").write_text(json.dumps(manifest))
    for r in range(2):
        lines = []
        for step in range(1, 9):
            rec = event_record(step, step_time_s=compute_s)
            if step % 4 == 0:  # this run measured 1.3 s of data and 0.1 s of control per sync
                rec.update(sent=0, synced=0, commit=True, exposed_s=1.3, quorum_s=0.09, commit_s=0.01)
                rec["step_time_s"] = compute_s + 1.4
            lines.append(json.dumps(rec))
        (path / "events" / f"replica{r}_rank0.jsonl").write_text("\n".join(lines) + "\n")
    return path


def make_compare(root: Path, data_ms: float, control_ms: float, sps: float) -> Path:
    cmp_dir = root / "cmp"
    run = make_run(cmp_dir / "baseline")
    report = {
        "runs": [
            {
                "name": "baseline",
                "run_dir": str(run),
                "run_dirs": [str(run)],
                "per_sync_exposed_ms": data_ms,
                "per_sync_exposed_control_ms": control_ms,
                "steps_per_s": sps,
                "link": {"bandwidth_bps": 8e6, "latency_s": 0.01, "describe": "8 Mbit/s, 10 ms"},
            }
        ]
    }
    (cmp_dir / "report.json").write_text(json.dumps(report))
    return cmp_dir


def invoke(*args: str):
    """``ftrun plan ARGS`` in this process."""
    return cli("plan", *args)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--params", "1000", "--step-ms", "10", "--link", "10xbit,5ms"], "--link '10xbit,5ms'"),
        (["--params", "1000", "--step-ms", "10", "--link", "0mbit,5ms"], "bandwidth must be"),
        (
            ["--params", "1000", "--step-ms", "10", "--link", "1gbit,5ms", "--fragment-sync-delay", "10"],
            "--fragment-sync-delay 10",
        ),
        (["--params", "1000", "--step-ms", "10", "--link", "1gbit", "--fragments", "3"], "--sync-every 20"),
        (["--params", "1000", "--step-ms", "10", "--link", "1gbit", "--dtype", "int3"], "--dtype 'int3'"),
        (["--params", "1000", "--step-ms", "0", "--link", "1gbit"], "--step-ms 0"),
        (["--params", "1000", "--step-ms", "10"], "--link"),
        (["--params", "1000", "--link", "1gbit"], "--step-ms"),
        (["--params", "1000", "--step-ms", "10", "--sweep-link", "10gbit..10mbit"], "--sweep-link"),
        (["--params", "1000", "--step-ms", "10", "--sweep-link", "10mbit-10gbit"], "LO..HI"),
        (["--params", "1000", "--step-ms", "10", "--link", "1gbit", "--target-util", "1.5"], "--target-util 1.5"),
        (["--params", "1000", "--step-ms", "10", "--link", "1gbit", "--replicas", "0"], "--replicas 0"),
        (["--from", "/nonexistent/run", "--link", "1gbit"], "/nonexistent/run"),
        (["--check", "/nonexistent/cmp"], "--check /nonexistent/cmp"),
        (["--check", "/tmp", "--link", "1gbit"], "--link"),
        (["--check", "/tmp", "--fragments", "2"], "--fragments"),
        (["--params", "1000", "--step-ms", "10", "--link", "1gbit", "--tolerance", "0.1"], "--tolerance 0.1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], needle: str) -> None:
    one_line(invoke(*args), needle)


def test_from_and_params_together_is_refused(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r")
    one_line(invoke("--from", str(run), "--params", "5", "--link", "1gbit"), "--from")


def test_from_run_dir_takes_its_bytes_replicas_schedule_and_compute(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r")
    res = invoke("--from", str(run), "--json")  # no --link: the run's own link
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["inputs"]["fragment_bytes"] == [1_000_000] and out["inputs"]["replicas"] == 2
    assert (out["inputs"]["fragments"], out["inputs"]["sync_every"], out["inputs"]["fragment_sync_delay"]) == (1, 4, 0)
    # compute = loop minus exposed data and control: (8 x 0.1 + 2 x 1.4 - 2 x 1.3 - 2 x 0.1) / 8 = 0.1 s
    assert out["inputs"]["step_ms"] == pytest.approx(100.0)
    (cfg,) = out["configs"]
    assert cfg["link"]["bandwidth_bps"] == 8e6
    assert cfg["streaming"]["exposed_ms_per_sync"] == pytest.approx(PRED_MS)


def test_several_links_and_a_png(tmp_path: Path) -> None:
    png = tmp_path / "u.png"
    res = invoke(
        "--params",
        "25000000",
        "--dtype",
        "bf16",
        "--step-ms",
        "100",
        "--link",
        "100mbit,10ms",
        "--link",
        "10gbit,1ms",
        "--png",
        str(png),
        "--json",
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    slow, fast = out["configs"]
    assert slow["link"]["bandwidth_bps"] == 1e8 and fast["link"]["bandwidth_bps"] == 1e10
    # 50 MB on 100 Mbit/s: plain DiLoCo blocks for 4 s a sync; streaming F=2 tau=5 for 25 MB - 0.5 s
    assert slow["plain"]["exposed_data_ms_per_sync"] == pytest.approx(4020.0)
    assert slow["streaming"]["exposed_data_ms_per_sync"] == pytest.approx(2000.0 + 20.0 - 500.0)
    assert fast["streaming"]["exposed_data_ms_per_sync"] == 0.0
    assert png.read_bytes()[:4] == b"\x89PNG"
    other = tmp_path / "notes.png"
    other.write_text("mine")
    one_line(invoke("--params", "1000", "--step-ms", "10", "--link", "1gbit", "--png", str(other)), "not overwriting")
    assert other.read_text() == "mine"


def test_sweep_link_is_log_spaced_and_marks_where_each_hides() -> None:
    res = invoke(
        "--params", "25000000", "--dtype", "bf16", "--step-ms", "100", "--sweep-link", "10mbit..10gbit,10ms", "--json"
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    bws = [c["link"]["bandwidth_bps"] for c in out["configs"]]
    assert len(bws) == 13 and bws[0] == pytest.approx(1e7) and bws[-1] == pytest.approx(1e10)
    hides = out["hides_from_bps"]
    assert hides["streaming"] < hides["plain"]
    # 25 MB a fragment in 500 ms - 20 ms of latency: 417 Mbit/s; plain (tau=0) never hides its data
    assert out["data_hidden_from_bps"]["streaming"] == pytest.approx(2e8 / 0.48, rel=0.011)
    assert out["data_hidden_from_bps"]["plain"] is None
    table = invoke("--params", "25000000", "--dtype", "bf16", "--step-ms", "100", "--sweep-link", "10mbit..10gbit,10ms")
    assert table.exit_code == 0 and "keeps compute utilisation >= 95%" in " ".join(table.output.split())


def test_check_a_compare_dir_within_tolerance(tmp_path: Path) -> None:
    cmp_dir = make_compare(tmp_path, data_ms=1000.0, control_ms=60.0, sps=2.7)
    res = invoke("--check", str(cmp_dir), "--json")
    assert res.exit_code == 0, res.output
    (run,) = json.loads(res.output)["runs"]
    assert run["name"] == "baseline"
    assert run["measured"] == {
        "exposed_ms_per_sync": 1060.0,
        "exposed_data_ms_per_sync": 1000.0,
        "exposed_control_ms_per_sync": 60.0,
        "steps_per_s": 2.7,
    }
    assert run["predicted"]["exposed_ms_per_sync"] == pytest.approx(PRED_MS)
    assert run["predicted"]["exposed_data_ms_per_sync"] == pytest.approx(1020.0)
    assert run["predicted"]["steps_per_s"] == pytest.approx(PRED_SPS)
    assert run["error"]["exposed_ms_per_sync"] == pytest.approx((PRED_MS - 1060.0) / 1060.0)


def test_check_fails_outside_tolerance_and_tolerance_is_a_flag(tmp_path: Path) -> None:
    cmp_dir = make_compare(tmp_path, data_ms=1900.0, control_ms=100.0, sps=2.7)  # predicted 1120 vs 2000: -44%
    res = invoke("--check", str(cmp_dir))
    assert res.exit_code == 1, res.output
    assert "baseline: exposed_ms_per_sync" in res.output.replace("\n", " ")
    assert invoke("--check", str(cmp_dir), "--tolerance", "0.5").exit_code == 0


def test_check_small_exposed_times_pass_within_5_ms(tmp_path: Path) -> None:
    from ftrun.plan.tolerance import within

    assert within("exposed_ms_per_sync", 0.0, 4.0, 0.25) is True  # -100% but only 4 ms
    assert within("exposed_ms_per_sync", 0.0, 6.0, 0.25) is False
    assert within("steps_per_s", 1.0, 1.3, 0.25) is True and within("steps_per_s", 1.0, 1.4, 0.25) is False


def test_check_a_moved_compare_dir_and_missing_run_files(tmp_path: Path) -> None:
    cmp_dir = make_compare(tmp_path, data_ms=1000.0, control_ms=60.0, sps=2.7)
    moved = tmp_path / "moved"
    cmp_dir.rename(moved)
    assert invoke("--check", str(moved)).exit_code == 0  # run dirs found next to report.json
    (moved / "baseline" / "manifest.json").unlink()
    one_line(invoke("--check", str(moved)), "run dir", "missing")


def test_check_a_sweep_dir(tmp_path: Path) -> None:
    sweep = tmp_path / "sw"
    run = make_run(sweep / "cell-0")
    cells = [
        {
            "params": {"link": "8mbit,10ms"},
            "verdict": "pass",
            "steps_per_s": 2.7,
            "exposed_comm_per_sync_ms": 1010.0,
            "run_dir": str(run),
        }
    ]
    (sweep / "sweep.json").write_text(json.dumps({"cells": cells}))
    res = invoke("--check", str(sweep), "--json")
    assert res.exit_code == 0, res.output
    (got,) = json.loads(res.output)["runs"]
    # a sweep cell reports the data plane only: it is compared with the predicted data plane
    assert got["planes"] == "data" and got["measured"]["exposed_ms_per_sync"] == 1010.0
    assert got["predicted"]["exposed_ms_per_sync"] == pytest.approx(1020.0)


def test_plan_json_is_standard_json_at_the_link_limits():
    """A latency of 1e308 ms used to plan to ``Infinity`` in --json (not JSON); now the link is
    refused, and the extremes that are accepted plan to finite numbers."""
    r = cli("plan", "--params", "1000", "--step-ms", "1", "--link", "1kbit,1e308ms", "--json")
    assert r.exit_code == 2 and "latency" in r.output and "Infinity" not in r.output, r.output
    for link in ("1kbit,10s", "1000gbit,0ms"):
        r = cli("plan", "--params", "1000000000", "--step-ms", "0.001", "--link", link, "--json")
        assert r.exit_code == 0, r.output
        json.loads(r.output, parse_constant=lambda c, link=link: pytest.fail(f"{link}: non-standard JSON constant {c}"))


# --- every table fits 80 columns, no number cut (issue 24 item 18) ---------------------------


def _numbers(text: str) -> set[str]:
    import re

    return set(re.findall(r"\d[\d,]*(?:\.\d+)?(?:\+\d[\d,]*(?:\.\d+)?)?%?(?: [kMG]bit/s)?", text))


def _fits_whole(narrow: str, wide: str) -> None:
    long = [ln for ln in narrow.splitlines() if len(ln.rstrip()) > 80]
    assert not long, "\n".join(long)
    assert "…" not in narrow, narrow
    flat = " ".join(narrow.split())
    missing = [n for n in _numbers(wide) if n not in flat]
    assert not missing, f"numbers of the wide table not shown whole at 80 columns: {missing}\n{narrow}"


def test_plan_at_80_columns_or_piped_cuts_no_number() -> None:
    args = [
        "plan",
        "--params",
        "1000000000",
        "--dtype",
        "bf16",
        "--step-ms",
        "400",
        "--link",
        "1gbit,20ms",
        "--link",
        "10gbit,20ms",
        "--link",
        "100gbit,20ms",
    ]
    narrow = cli(*args, env={"COLUMNS": "80"})  # CliRunner is piped: not a terminal
    wide = cli(*args, env={"COLUMNS": "250"})
    assert narrow.exit_code == 0 and wide.exit_code == 0, narrow.output
    for n in ("16,080", "6,040+40.0", "995 Mbit/s", "39.7%", "1 (4)"):
        assert n in wide.output, (n, wide.output)
    _fits_whole(narrow.output, wide.output)


def test_plan_check_at_80_columns_cuts_no_number(tmp_path: Path) -> None:
    cmp_dir = make_compare(tmp_path, data_ms=1000.0, control_ms=60.0, sps=2.7)
    narrow = cli("plan", "--check", str(cmp_dir), env={"COLUMNS": "80"})
    wide = cli("plan", "--check", str(cmp_dir), env={"COLUMNS": "250"})
    assert narrow.exit_code == 0 and wide.exit_code == 0, narrow.output
    assert "1,060" in wide.output and "1,020 / 1,000" in wide.output, wide.output
    _fits_whole(narrow.output, wide.output)


@pytest.mark.parametrize("sweep", ["10mbit..10gbit,10ms", "1gbit..1000gbit,20ms"])
def test_png_no_label_sits_under_the_legend(sweep: str) -> None:
    """Issue 24 item 19: a "hides all data from" label was drawn under the legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ftrun.report.plan_view import utilisation_figure

    res = invoke("--params", "25000000", "--dtype", "bf16", "--step-ms", "100", "--sweep-link", sweep, "--json")
    assert res.exit_code == 0, res.output
    fig = utilisation_figure(msgspec.convert(json.loads(res.output), PlanResult))
    try:
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        (ax,) = fig.axes
        legend = ax.get_legend().get_window_extent(r)
        labels = [t for t in ax.texts if t.get_text()]
        assert labels, "the sweep should mark where each schedule reaches the target or hides its data"
        under = [t.get_text() for t in labels if t.get_window_extent(r).overlaps(legend)]
        assert not under, f"under the legend: {under}"
    finally:
        plt.close(fig)


def test_measured_arrivals_come_from_step_times_and_end_stamps_not_from_waits(tmp_path: Path) -> None:
    from ftrun.plan.measure import measure_arrivals

    # group 1 computes 120 ms a step, group 0 100 ms; group 1 starts 20 ms later and spends
    # 0.5 s outside its steps before step 6 (a profiler export); at the quorums (steps 4, 8) the
    # late group waited 30 ms: 20 ms held round trip + a 10 ms lighthouse reply
    run = tmp_path / "r"
    (run / "events").mkdir(parents=True)
    for r, (compute, start) in enumerate(((0.1, 1000.0), (0.12, 1000.02))):
        t, lines = start, []
        for step in range(1, 9):
            q = (0.03 if r == 1 else 0.5) if step % 4 == 0 else None
            rec = event_record(step, step_time_s=compute + (q or 0.0))
            if q is not None:
                rec["quorum_s"] = q
            t += (0.5 if (r == 1 and step == 6) else 0.0) + rec["step_time_s"]
            rec["t"] = t
            lines.append(json.dumps(rec))
        (run / "events" / f"replica{r}_rank0.jsonl").write_text("\n".join(lines) + "\n")
    arr = measure_arrivals([run], 2, hold_s=0.02)
    assert arr.bias_s == pytest.approx((-0.01, 0.01))
    assert arr.jitter_s == pytest.approx(0.0, abs=1e-9)
    stalls = dict(arr.stalls)
    assert stalls[1] == pytest.approx((-0.02, 0.02))  # starts 20 ms later, first step 20 ms longer: 40 ms apart
    assert stalls[6] == pytest.approx((-0.25, 0.25))
    assert arr.rpc_s == pytest.approx(0.01)


def test_step_jitter_is_a_what_if_and_fp4_and_flops_set_bytes_and_step(tmp_path: Path) -> None:
    res = invoke(
        "--params",
        "1e9",
        "--dtype",
        "fp4",
        "--tokens-per-step",
        "1e6",
        "--flops-per-gpu",
        "1e15",
        "--gpus-per-replica",
        "10",
        "--mfu",
        "0.5",
        "--link",
        "10gbit,10ms",
        "--step-jitter",
        "20",
        "--json",
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["inputs"]["model_bytes"] == 500_000_000  # 1e9 x 0.5 byte
    assert out["inputs"]["step_ms"] == pytest.approx(6 * 1e9 * 1e6 / (10 * 1e15 * 0.5) * 1e3)  # 1.2 s
    assert out["inputs"]["step_jitter_ms"] == 20.0
    quiet = json.loads(
        invoke("--params", "1e9", "--dtype", "fp4", "--step-ms", "1200", "--link", "10gbit,10ms", "--json").output
    )
    noisy, calm = out["configs"][0]["streaming"], quiet["configs"][0]["streaming"]
    assert noisy["exposed_control_ms_per_sync"] > calm["exposed_control_ms_per_sync"] == pytest.approx(20.0)


def test_layers_per_fragment_data_parallel_and_training_totals() -> None:
    res = invoke(
        "--params",
        "1e9",
        "--dtype",
        "fp4",
        "--dp-dtype",
        "bf16",
        "--step-ms",
        "100",
        "--tokens-per-step",
        "5e5",  # one group's: 2 groups, 1e6 tokens a step
        "--train-tokens",
        "1e9",
        "--layers",
        "20",
        "--layers-per-fragment",
        "2",
        "--sync-every",
        "100",
        "--fragment-sync-delay",
        "1",
        "--data-parallel",
        "--link",
        "1gbit",
        "--json",
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["inputs"]["fragments"] == 10 and out["inputs"]["train_steps"] == 1000
    dp = out["configs"][0]["data_parallel"]
    # 2 GB of bf16 gradients per step at 1 Gbit/s: 16 s, 66.7 ms hidden by the backward pass
    assert dp["exposed_ms_per_step"] == pytest.approx(16_000 - 200 / 3, rel=1e-6)
    assert dp["sent_bytes_per_replica"] == pytest.approx(1000 * 2e9)
    # exchanged: the values a replica contributes, whatever R (DP: its gradients; DiLoCo: its fp4 model once per H)
    assert dp["exchanged_bits_per_replica"] == pytest.approx(1000 * 2e9 * 8)
    assert out["configs"][0]["streaming"]["exchanged_bits_per_replica"] == pytest.approx(10 * 0.5e9 * 8)
    assert dp["train_hours"] == pytest.approx(1000 * (16.0 + 0.1 - 0.2 / 3) / 3600, rel=1e-6)
    assert out["hides_from_bps"]["data_parallel"] > out["hides_from_bps"]["streaming"]
    text = invoke("--params", "1e9", "--step-ms", "100", "--data-parallel", "--link", "1gbit").output
    assert "data-parallel" in text


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--params", "1e9", "--link", "1gbit", "--tokens-per-step", "1e6"], "--flops-per-gpu"),
        (["--params", "1e9", "--step-ms", "10", "--mfu", "0.5", "--link", "1gbit"], "--step-ms"),
        (
            [
                "--params",
                "1e9",
                "--tokens-per-step",
                "1e6",
                "--flops-per-gpu",
                "1e15",
                "--mfu",
                "1.5",
                "--link",
                "1gbit",
            ],
            "--mfu 1.5",
        ),
        (
            ["--params", "1e9", "--tokens-per-step", "-1", "--flops-per-gpu", "1e15", "--link", "1gbit"],
            "--tokens-per-step -1",
        ),
        (
            ["--params", "1e9", "--step-ms", "10", "--layers", "24", "--layers-per-fragment", "5", "--link", "1gbit"],
            "--layers-per-fragment 5",
        ),
        (["--params", "1e9", "--step-ms", "10", "--layers-per-fragment", "2", "--link", "1gbit"], "--layers"),
        (
            ["--params", "1e9", "--step-ms", "10", "--layers", "0", "--layers-per-fragment", "1", "--link", "1gbit"],
            "--layers 0: must be at least 1",
        ),
        (
            [
                "--params",
                "1e9",
                "--step-ms",
                "10",
                "--fragments",
                "2",
                "--layers",
                "4",
                "--layers-per-fragment",
                "2",
                "--link",
                "1gbit",
            ],
            "--fragments",
        ),
        (["--params", "1e9", "--step-ms", "10", "--step-jitter", "-1", "--link", "1gbit"], "--step-jitter -1"),
        (["--params", "1e9", "--step-ms", "10", "--train-tokens", "1e9", "--link", "1gbit"], "--tokens-per-step"),
        (["--params", "1e9", "--step-ms", "10", "--dp-dtype", "int2", "--link", "1gbit"], "--dp-dtype 'int2'"),
        (["--check", "/tmp", "--step-jitter", "5"], "--step-jitter"),
        (["--check", "/tmp", "--data-parallel"], "--data-parallel"),
    ],
)
def test_paper_scale_bad_input_is_one_line_and_exit_2(args: list[str], needle: str) -> None:
    one_line(invoke(*args), needle)


def test_png_title_stays_inside_the_figure() -> None:
    """Issue 42: a long source in the PNG's title was clipped on both sides; it wraps to the figure's width."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ftrun.report.plan_view import utilisation_figure

    res = invoke(
        "--params", "25000000", "--dtype", "bf16", "--step-ms", "100", "--sweep-link", "1gbit..100gbit,10ms", "--json"
    )
    assert res.exit_code == 0, res.output
    result = json.loads(res.output)
    result["source"] = "profiles/compare-a-long-name/" + "streaming-run-with-a-long-directory-name/" * 4
    fig = utilisation_figure(msgspec.convert(result, PlanResult))
    try:
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        title = fig.axes[0].title.get_window_extent(r)
        whole = fig.bbox
        assert whole.x0 <= title.x0 and title.x1 <= whole.x1 and title.y1 <= whole.y1, (title, whole)
        assert result["source"].replace("/", "") in fig.axes[0].get_title().replace("\n", "").replace("/", "")
    finally:
        plt.close(fig)
