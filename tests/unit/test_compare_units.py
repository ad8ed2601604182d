"""compare's pure parts: the default link, --repeat's order and aggregation, the throughput claim, rendering."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from ftrun import layout
from ftrun.check.metrics import FIGURES, aggregate
from ftrun.comparison.modes import repeat_plan
from ftrun.config import overrides
from ftrun.link_spec import link_for
from ftrun.report.compare_view import conclusion, rows, throughput_claim
from train_fixtures import TIMELINE_WIDTH_PX, png_size, recovery_record, train_summary


@pytest.mark.parametrize(
    "step_s, model_bytes, replicas, h", [(0.03, 400_000, 2, 20), (0.2, 50_000_000, 4, 100), (0.005, 80_000, 8, 10)]
)
def test_default_link_makes_plain_sync_a_quarter_of_h(step_s: float, model_bytes: int, replicas: int, h: int) -> None:
    link = link_for(step_s, model_bytes, replicas, h)
    share = link.plain_sync_s(model_bytes, replicas) / (h * step_s)
    assert share == pytest.approx(0.25, rel=0.05)  # bandwidth rounded to 2 significant digits
    assert link.latency_s <= 0.01


def test_repeat_alternates_who_goes_first() -> None:
    assert repeat_plan(["s", "b"], 1) == [(0, "s"), (1, "b")]
    assert repeat_plan(["s", "b"], 3) == [(0, "s-1"), (1, "b-1"), (1, "b-2"), (0, "s-2"), (0, "s-3"), (1, "b-3")]


def report(**fields) -> layout.CompareReport:
    """A compare result (report.json's record) of the fields given, the rest their defaults."""
    return msgspec.convert(fields, layout.CompareReport)


def _run(name: str, sps: float, **over) -> layout.CompareRun:
    r = {
        "name": name,
        "run_dir": f"/c/{name}",
        "verdict": "pass",
        "problems": [],
        "steps_per_s": sps,
        "exposed_comm_s": 1.0,
        "exposed_control_s": 0.2,
        "per_sync_exposed_ms": 50.0,
        "per_sync_exposed_control_ms": 10.0,
        "hidden_comm_share": 0.5,
        "compute_utilisation": 0.8,
        "peak_sync_bytes": 100,
        "final_loss": 3.0,
    }
    r.update(over)
    return msgspec.convert(r, layout.CompareRun)


def test_aggregate_median_spread_and_verdict() -> None:
    reps = [
        _run("a", 10.0, run_dir="/c/a-1", steps_per_s_per_replica=[9.0, 11.0]),
        _run("a", 14.0, run_dir="/c/a-2", verdict="fail", problems=["x"], steps_per_s_per_replica=[15.0, 13.0]),
        _run("a", 11.0, run_dir="/c/a-3", steps_per_s_per_replica=[12.0, None]),
    ]
    got = aggregate(reps)
    assert got.steps_per_s_per_replica == [12.0, None]  # per replica; a missing value stays missing
    assert got.steps_per_s == 11.0 and got.spread["steps_per_s"] == [10.0, 14.0]
    assert got.repeats == 3 and got.verdict == "fail" and got.problems == ["a-2: x"]
    assert not isinstance(got.repeat_runs, msgspec.UnsetType)
    assert [r.run_dir for r in got.repeat_runs] == ["/c/a-1", "/c/a-2", "/c/a-3"]
    assert set(got.spread) <= set(FIGURES)
    one = aggregate([_run("a", 10.0)])
    assert one.repeats == 1 and one.spread == {} and one.steps_per_s == 10.0
    assert "repeat_runs" not in msgspec.to_builtins(one)  # one repeat: not written


def test_throughput_claimed_only_beyond_the_spread() -> None:
    a = aggregate([_run("a", x) for x in (10.0, 10.5, 11.0)])
    b_far = aggregate([_run("b", x) for x in (8.0, 8.2, 8.4)])
    b_near = aggregate([_run("b", x) for x in (9.0, 10.2, 11.5)])
    assert "beyond the spread of 3 runs" in throughput_claim(a, b_far)
    near = throughput_claim(a, b_near)
    assert "within the spread" in near and "no difference measured" in near
    one = throughput_claim(aggregate([_run("a", 10.0)]), aggregate([_run("b", 5.0)]))
    # with one run each the clause only says so: the one-line answer after it says what it cannot tell
    assert one == "throughput 2.00x from one run each"
    assert "no difference measured" in conclusion([a, b_near])


def test_table_shows_median_and_range() -> None:
    a = aggregate([_run("a", x) for x in (10.0, 12.0, 11.0)])
    b = aggregate([_run("b", 9.0)])
    base = {
        "schedule": {"fragments": 1, "sync_every": 2, "fragment_sync_delay": 0, "steps": 40},
        "syncs": 2,
        "commits": 2,
        "loss_at_steps": {},
    }
    table = {r[0]: r[1:] for r in rows(report(runs=[{**msgspec.to_builtins(x), **base} for x in (a, b)]))}
    assert table["steps/s (mean)"] == ["11.00 (10.00 to 12.00)", "9.00"]
    assert table["compute utilisation"] == ["80% (80% to 80%)", "80%"]
    assert table["exposed control per sync"][1] == "10.0 ms"


def _fake_run(name: str, **over) -> layout.CompareRun:
    r = {
        "name": name,
        "run_dir": f"/x/{name}",
        "schedule": {"fragments": 2, "sync_every": 20, "fragment_sync_delay": 5, "steps": 40},
        "verdict": "pass",
        "problems": [],
        "steps_per_s": 10.0,
        "steps_per_s_per_replica": [10.0, None],
        "tokens_per_s": 2560.0,
        "tokens_per_s_per_replica": [2560.0, None],
        "wall_s": None,
        "syncs": 0,
        "commits": 0,
        "exposed_comm_s": 0.0,
        "per_sync_exposed_ms": None,
        "profiled_syncs": 0,
        "profiled_comm_ms": 0.0,
        "profiled_hidden_ms": 0.0,
        "hidden_comm_share": None,
        "peak_sync_bytes": 0,
        "total_bytes": 0.0,
        "final_loss": None,
        "loss_at_steps": {"10": None, "20": 4.2},
        "link": None,
    }
    r.update(over)
    return msgspec.convert(r, layout.CompareRun)


def test_render_tolerates_missing_measurements(tmp_path: Path) -> None:
    from ftrun.report.compare_view import conclusion, rows, write_markdown

    runs = [
        _fake_run("a"),
        _fake_run("b", hidden_comm_share=0.5, per_sync_exposed_ms=12.0, exposed_comm_s=0.1, syncs=2, commits=2),
    ]
    text = conclusion(runs)
    assert text.startswith("a exposed 0.00 s of data; b hid 50% of its data communication")
    assert "%" in text and "of a's" not in text  # no ratio when a run exposed nothing
    result = layout.CompareReport(
        compare_dir=str(tmp_path),
        runs=runs,
        conclusion=text,
        timeline="timeline.png",
        verdict="pass",
        link=layout.CompareLink(describe="loopback (no emulation)", emulated=False, chosen="as recorded in the runs"),
    )
    table = rows(result)
    assert all(len(r) == 3 for r in table)
    by_label = {r[0]: r[1:] for r in table}
    assert by_label["hidden share of comm (profiled)"] == ["-", "50%"]
    assert by_label["wall time"] == ["-", "-"]
    assert by_label["final loss"] == ["-", "-"]
    assert by_label["syncs / commits"] == ["0 / 0", "2 / 2"]
    write_markdown(result, tmp_path / "report.md")
    md = (tmp_path / "report.md").read_text()
    assert "not emulated" in md and "| | a | b |" in md


def test_timeline_draw_without_lanes(tmp_path: Path) -> None:
    from ftrun.report.timeline import Lane, draw

    path = draw([], tmp_path / "empty.png", "nothing profiled")
    assert png_size(path)[0] == TIMELINE_WIDTH_PX
    lane = Lane(
        "x · replica 0",
        steps=[(0.0, 0.1), (0.1, 0.2)],
        sends=[(0.05, 0.15, 9)],
        collectives=[(0.06, 0.06, 9)],
        waits=[(0.15, 0.15)],
    )
    path = draw([lane], tmp_path / "one.png", "one lane, fragment id beyond the palette")
    assert png_size(path) == (TIMELINE_WIDTH_PX, round(100 * (1.2 + 0.75)))


def test_recovery_row_from_run_summaries(tmp_path: Path) -> None:
    """Runs with faults get a 'faults and recovery' row (from summary.json); runs without, none."""
    from ftrun.check.metrics import recovery_of
    from ftrun.report.compare_view import rows

    d = tmp_path / "run"
    d.mkdir()
    story = {
        "faults": [{"action": "kill", "replica": 1, "step": 25, "recovered_s": 7.5}],
        "restarts": 1,
        "heals": [{"replica": 1, "step": 26, "source_replica": 0, "peer_step": 2, "manager_step": 2}],
        "commits_lost": 2,
    }
    breakdown = [recovery_record(phases={"relaunch": 3.25, "join": 2.0})]
    (d / "summary.json").write_text(json.dumps(train_summary(faults=story, recovery=breakdown)))
    rec = recovery_of([d])
    assert msgspec.to_builtins(rec) == {
        "faults": ["kill 1@25"],
        "restarts": 1,
        "heals": 1,
        "commits_lost": 2,
        "recovered_s": [7.5],
        "recovery_s": [7.6],
        "largest_phase": [("relaunch", 3.25)],
    }
    base = {
        "name": "x",
        "verdict": "pass",
        "schedule": {"fragments": 1, "sync_every": 2, "fragment_sync_delay": 0, "steps": 40},
        "syncs": 10 / 3,
        "commits": 3.0,
        "exposed_comm_s": 0.0,
        "loss_at_steps": {},
    }
    with_rec = msgspec.to_builtins(rec)
    table = rows(report(runs=[{**base, "recovery": with_rec}, {**base, "recovery": None}]))
    row = next(r for r in table if r[0] == "faults and recovery")
    assert "kill 1@25" in row[1] and "commits lost 2" in row[1] and "7.5 s" in row[1] and row[2] == "-"
    assert "largest phase relaunch 3.2 s" in row[1]
    assert next(r for r in table if r[0] == "syncs / commits")[1] == "3.3 / 3"
    assert not any(r[0] == "faults and recovery" for r in rows(report(runs=[{**base, "recovery": None}] * 2)))


# --- the default link matches the runs' own steps (issue 24 item 19) -------------------------


def _fake_training(monkeypatch, calibrated_s: float, measured_s: float):
    """compare's train mode with the calibration, the trainings and the measured step faked:
    (calls to train as (run name, link, overwrite), ``train_mode`` training with the fake)."""
    from functools import partial

    from ftrun.comparison import link, modes
    from ftrun.worker.calibrate import Calibrated

    trained = []
    monkeypatch.setattr(
        link,
        "calibrate",
        lambda cfg, threads, ranks: Calibrated(calibrated_s, [calibrated_s], 1, 1, model_bytes=4_000_000),
    )
    monkeypatch.setattr(modes, "measured_step_s", lambda run_dir, replicas: measured_s)

    def train(cfg, overwrite):
        trained.append((cfg.run_name, cfg.emulation.link, overwrite))
        return 0

    return trained, partial(modes.train_mode, train=train)


def test_a_calibration_off_the_runs_step_is_redone_from_the_first_run(monkeypatch, tmp_path) -> None:
    """The reproduction: calibrated 327 ms while the runs stepped in ~160 ms, so "0.25 of H" was
    really ~0.5. Now the first run's measured step sets the link, and that run trains again."""
    trained, train_mode = _fake_training(monkeypatch, calibrated_s=0.327, measured_s=0.160)
    names, per_cfg, _, info = train_mode(["streaming", "baseline"], overrides({}), None, tmp_path, True, False, "c", 1)
    first_link, second_link = trained[0][1], trained[1][1]
    assert [t[0] for t in trained] == ["streaming", "streaming", "baseline"]  # the first run again, on the new link
    assert trained[1][2] is True and trained[2][2] is False  # only the retrained run replaces its own run dir
    assert first_link != second_link and trained[2][1] == second_link  # both runs share the recalibrated link
    assert info.calibrated_step_s == 0.327 and info.link_step_s == 0.16
    again = info.recalibrated_from
    assert isinstance(again, layout.Recalibration) and again.run == "streaming" and again.measured_step_s == 0.16
    assert isinstance(info.plain_sync_share_of_h, float)
    assert abs(info.plain_sync_share_of_h - 0.25) < 0.05  # a quarter of H steps of the step the runs take
    assert per_cfg == [[tmp_path / "c" / "streaming"], [tmp_path / "c" / "baseline"]]


def test_a_calibration_that_matches_the_run_is_kept(monkeypatch, tmp_path) -> None:
    trained, train_mode = _fake_training(monkeypatch, calibrated_s=0.150, measured_s=0.170)  # 13% off: within DRIFT
    *_, info = train_mode(["streaming", "baseline"], overrides({}), None, tmp_path, True, False, "c", 1)
    assert [t[0] for t in trained] == ["streaming", "baseline"] and "recalibrated_from" not in msgspec.to_builtins(info)


def test_the_summary_states_the_share_asked_for_and_the_share_achieved() -> None:
    from ftrun.report.compare_view import link_line

    link = {
        "describe": "110 Mbit/s, 8.9 ms",
        "emulated": True,
        "chosen": "default: plain DiLoCo's sync ~ 0.25 of H steps of compute",
        "calibrated_step_s": 0.327,
        "calibration": "2 concurrent process(es) x 1 thread(s), as the run's ranks",
        "link_step_s": 0.16,
        "plain_sync_s": 0.8,
        "plain_sync_share_of_h": 0.25,
        "recalibrated_from": {"run": "streaming", "measured_step_s": 0.16, "link": "50 Mbit/s, 10 ms"},
        "measured_median_step_s": {"streaming": 0.16, "baseline": 0.2},
        "plain_sync_share_of_measured_h": {"streaming": 0.25, "baseline": 0.2},
    }
    text = link_line(report(link=link))
    assert "calibrated step 327.0 ms" in text and "recalibrated on streaming's measured step 160.0 ms" in text, text
    assert "asked for 0.25 of H steps of 160.0 ms" in text, text
    assert "achieved: 0.25 of H measured steps (streaming 160.0 ms), 0.20 (baseline 200.0 ms)" in text, text


def test_compare_help_says_what_the_default_link_is() -> None:
    from ftrun.cli import COMPARE_HELP

    flat = " ".join(COMPARE_HELP.split())
    assert "about one step of compute" not in flat
    assert "a quarter of H steps of compute" in flat and "measured step" in flat, flat


def test_report_says_what_each_run_ran_on(tmp_path: Path) -> None:
    from ftrun.report.compare_view import versions_line, write_markdown

    nightly = {
        "torch": "2.13.0+cpu",
        "torchft": "2026.10.26",
        "torchft_distribution": "torchft-nightly",
        "torchft_pg_api": "reconfigure",
    }
    old = {"torch": "2.13.0+cpu", "torchft": "0.2.0"}  # an earlier ftrun's manifest: no distribution recorded
    same = {"versions": {"a": nightly, "b": dict(nightly)}}
    assert (
        versions_line(report(**same))
        == "ran on torchft-nightly 2026.10.26 (process groups: reconfigure), torch 2.13.0+cpu"
    )
    assert versions_line(report(versions={"a": nightly, "b": old})) == (
        "ran on a: torchft-nightly 2026.10.26 (process groups: reconfigure), torch 2.13.0+cpu; "
        "b: torchft 0.2.0, torch 2.13.0+cpu"
    )
    assert versions_line(report(versions={"a": None, "b": None})) is None and versions_line(report()) is None
    runs = [_fake_run("a"), _fake_run("b")]
    result = msgspec.structs.replace(
        report(
            compare_dir=str(tmp_path),
            conclusion="c",
            timeline="timeline.png",
            verdict="pass",
            link={"describe": "loopback (no emulation)", "emulated": False, "chosen": "as recorded in the runs"},
            **same,
        ),
        runs=runs,
    )
    write_markdown(result, tmp_path / "report.md")
    assert "\n\nran on torchft-nightly 2026.10.26" in (tmp_path / "report.md").read_text()
