"""Where the recovery breakdown is shown, from hand-made breakdowns and manifests: the timeline's
recovery lane, sweep.md's recovery column, summary.json's top-level ``recovery`` (the earlier
shape still read: tests/unit/test_summary_read.py), the bound on detection from the manifest.
Unit tests: no process."""

from __future__ import annotations

import json

import msgspec
import pytest

from ftrun import layout
from ftrun.check.recovery import PHASES, breakdown
from train_fixtures import event_record, train_summary

T0 = 1000.0


def _rec(**kw):
    """One fault's breakdown as ``Recovery.to_json`` writes it; the heal did not happen."""
    d = {
        "fault": "kill 1@25",
        "replica": 1,
        "fault_at": T0,
        "total_s": 6.0,
        "unaccounted_s": 0.3,
        "phases": {"detect": 0.2, "relaunch": 2.8, "join": 2.0, "reconfigure": 0.2, "heal": None, "catch_up": 0.5},
        "spans": {
            "detect": [0.0, 2.0],
            "relaunch": [0.2, 3.0],
            "join": [3.0, 5.0],
            "reconfigure": [5.0, 5.2],
            "heal": None,
            "catch_up": [5.5, 6.0],
        },
        "reasons": {"heal": "no heal: torchft's quorum 3 did not ask this group to heal"},
        "largest_phase": "relaunch",
        "heal_bytes": None,
        "heal_source": None,
    }
    d.update(kw)
    return d


def _record(**kw) -> layout.RecoveryRecord:
    """``_rec`` as the typed record summary.json decodes to (what the views read)."""
    return msgspec.convert(_rec(**kw), layout.RecoveryRecord)


def test_the_timeline_draws_a_recovery_lane_per_fault_with_its_phases_labelled(tmp_path) -> None:
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection

    from ftrun.report.timeline import PHASE_COLOURS, RECOVERY_PHASES, Lane, draw, figure, recovery_lanes

    assert RECOVERY_PHASES == PHASES  # the report's copy of the phase names is the check's
    (lane,) = recovery_lanes("streaming", [_record()])
    assert lane.label == "streaming · recovery · kill 1@25"
    assert [p[0] for p in lane.phases] == ["detect", "relaunch", "join", "reconfigure", "catch_up"]
    assert lane.missing == [("heal", "no heal: torchft's quorum 3 did not ask this group to heal")]
    assert lane.unaccounted == [(5.2, 5.5)]  # no phase covers 5.2..5.5
    fig = figure([Lane("streaming · replica 0", steps=[(0.0, 0.1), (0.1, 0.2)])], "t", recovery=[lane])
    try:
        main, rax = fig.axes
        texts = [t.get_text() for t in rax.texts]
        assert any(t.startswith(" relaunch 2.80 s") for t in texts)
        assert any(t.startswith(" detect 2.00 s (0.20 s alone)") for t in texts)  # own interval, and what it held alone
        assert any(t.startswith("heal: not measured (no heal") for t in texts)  # said, not drawn
        assert "streaming · recovery · kill 1@25 · first commit 6.00 s after the fault, unaccounted 0.30 s" in texts
        assert rax.get_xlabel() == "seconds from the fault"
        lanes = ["detect", "relaunch", "join", "reconfigure", "heal", "catch-up"]  # one a phase, in order
        assert [t.get_text() for t in rax.get_yticklabels()] == lanes
        bars = [c for c in rax.collections if isinstance(c, PolyCollection)]
        colours = {tuple(round(x, 3) for x in c.get_facecolor()[0]) for c in bars if c.get_facecolor().size}
        from matplotlib.colors import to_rgba

        for k in ("detect", "relaunch", "join", "reconfigure", "catch_up"):
            assert tuple(round(x, 3) for x in to_rgba(PHASE_COLOURS[k])) in colours, k
        legend = [t.get_text() for t in rax.get_legend().get_texts()]
        assert legend == [*lanes, "unaccounted (no phase)", "the group's first commit"]
    finally:
        plt.close(fig)
    png = draw([Lane("a · replica 0", steps=[(0.0, 0.1)])], tmp_path / "timeline.png", "t", recovery=[lane])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not recovery_lanes("x", [])


def test_a_never_back_fault_has_no_unaccounted_and_no_commit_mark() -> None:
    from ftrun.report.timeline import recovery_lanes

    (lane,) = recovery_lanes("r", [_record(total_s=None, unaccounted_s=None)])
    assert lane.total_s is None and lane.unaccounted == []


def _cell(name, verdict, **m):
    return {"name": name, "params": {"kill": name}, "verdict": verdict, "problem": None, **m}


def _sweep(cells):
    return msgspec.convert(_sweep_fields(cells), layout.SweepResult)


def _sweep_fields(cells):
    return {
        "sweep_dir": "/x/s",
        "name": "s",
        "preset": None,
        "axes": [{"key": "kill", "values": [c["name"] for c in cells]}],
        "shared": {},
        "metric": "recovery_s",
        "parallel": 1,
        "machine": {"cpus": 2, "gpus": 0, "platform": "linux"},
        "versions": {},
        "notes": [],
        "counts": {},
        "cells": cells,
    }


def test_sweep_md_has_a_recovery_column_with_the_largest_phase_only_when_a_cell_recovered() -> None:
    from ftrun.report import sweep_view

    cells = [
        _cell("1@25", "pass", recovery_s=5.95, recovery_largest_phase="relaunch", recovery_largest_phase_s=3.71),
        _cell("1@45", "pass", recovery_s=4.0, recovery_largest_phase="catch_up", recovery_largest_phase_s=None),
        _cell("none", "pass", recovery_s=None, recovery_largest_phase=None),
    ]
    md = sweep_view.markdown(_sweep(cells))
    head = next(x for x in md.splitlines() if x.startswith("| kill"))
    assert head.split(" | ")[-2] == "recovery (largest phase)"
    rows = {x.split(" | ")[0][2:]: x for x in md.splitlines() if x.startswith("| 1@") or x.startswith("| none")}
    assert "| 5.95 s (relaunch 3.71 s) |" in rows["1@25"]
    assert "| 4.00 s (catch-up) |" in rows["1@45"]
    assert rows["none"].split(" | ")[-2] == "-"
    assert "Recovery: the cell's first fault" in md
    # a sweep without faults keeps its table as it was
    plain = sweep_view.markdown(_sweep([_cell("none", "pass")]))
    assert "recovery" not in plain


def test_sweep_cells_take_the_first_faults_recovery_from_the_summary(tmp_path) -> None:
    from ftrun.sweep.evaluate import recovery_metrics

    new = train_summary(recovery=[_rec()], faults={"faults": [{"action": "kill", "replica": 1, "step": 25}]})
    got = []
    for name, s in (("new", new), ("none", train_summary())):
        (tmp_path / name).mkdir()
        (tmp_path / name / layout.SUMMARY).write_text(json.dumps(s))
        got.append(recovery_metrics(layout.read_train_summary(tmp_path / name)))
    assert got[0] == (6.0, "relaunch", 2.8)  # seconds, largest phase, its seconds
    assert got[1] == (None, None, None) and recovery_metrics(None) == (None, None, None)


def test_summary_recovery_is_the_breakdown_list(tmp_path) -> None:
    from ftrun.check.metrics import recovery_of

    story = {
        "faults": [{"action": "kill", "replica": 1, "step": 25, "recovered_s": 6.1}],
        "restarts": 1,
        "heals": [{"replica": 1, "step": 26, "source_replica": 0, "peer_step": 2, "manager_step": 2}],
        "commits_lost": 0,
    }
    d = tmp_path / "run"
    d.mkdir()
    (d / "summary.json").write_text(json.dumps(train_summary(faults=story, recovery=[_rec()])))
    rec = recovery_of([d])
    assert rec is not None
    assert rec.faults == ["kill 1@25"] and rec.recovery_s == [6.0] and rec.largest_phase == [("relaunch", 2.8)]


def _manifest(action="kill", detection=None, hb=2000):
    return msgspec.convert(
        {
            "ftrun_version": "x",
            "job_id": "j",
            "run_name": "r",
            "config": {"timeouts": {"heartbeat_timeout_ms": hb}},
            "versions": {},
            "backend": "gloo",
            "replicas": 2,
            "detection": detection,
            "schedule": {"fragments": 2, "sync_every": 20, "fragment_sync_delay": 5, "steps": 60},
            "traces": [],
            "faults": {
                "planned": [],
                "fired": [
                    {
                        "replica": 1,
                        "step": 15,
                        "action": action,
                        "fired_at": T0,
                        "fired_step": 15,
                        "seconds": 12.0 if action == "hang" else 0.0,
                    }
                ],
                "max_restarts": 0,
            },
        },
        layout.Manifest,
    )


def _q(qid, participants, t):
    return layout.Quorum(
        quorum_id=qid, participants=participants, replica_rank=0, max_step=1, heal=False, heal_source=None, t=t
    )


def _step(step, t, waited, quorums=()):
    fields = dict(
        participants=1, loss=1.0, step_time_s=0.1, t=t, quorum_s=waited, quorums=list(quorums) or msgspec.UNSET
    )
    return layout.EventRecord(**event_record(step, **fields))


@pytest.mark.parametrize(
    "action, waited, says",
    [
        (
            "kill",
            2.05,
            "heartbeats stop after 2000 ms (heartbeat timeout), or issues the quorum without it 10000 ms after "
            "the first group asked (join timeout): bounded by the heartbeat timeout",
        ),
        (
            "hang",
            10.1,
            "still heartbeats (torchft's server thread), so the lighthouse issues the quorum without it after its "
            "join timeout, 10000 ms: bounded by the join timeout",
        ),
        ("kill", 0.3, "(join timeout)"),
    ],
)
def test_detection_names_the_manifests_bound_and_whether_the_wait_shows_it(action, waited, says) -> None:
    m = _manifest(
        action, {"heartbeat_timeout_ms": 2000, "join_timeout_ms": 10000, "quorum_tick_ms": 100, "lighthouse": "ftrun"}
    )
    logs = {(0, 0): [_step(16, T0 + waited + 0.01, waited, [_q(5, [0], T0 + waited)])], (1, 0): []}
    (x,) = breakdown(m, logs, {0: [], 1: []})
    assert says in x.detect_bound and says in x.text
    assert x.detect_limits == layout.DetectionBound(2000, 10000, 100, "ftrun")
    assert msgspec.to_builtins(x.record())["detect_limits"] == {
        "heartbeat_timeout_ms": 2000,
        "join_timeout_ms": 10000,
        "quorum_tick_ms": 100,
        "lighthouse": "ftrun",
    }
    if waited < 1:
        assert "bounded by" not in x.detect_bound


def test_detection_bound_of_an_external_lighthouse_and_of_a_manifest_without_one() -> None:
    logs = {(0, 0): [_step(16, T0 + 2.1, 2.0, [_q(5, [0], T0 + 2.0)])], (1, 0): []}
    (x,) = breakdown(_manifest(detection={"lighthouse": "external"}), logs, {0: [], 1: []})
    assert "not ftrun's (--lighthouse)" in x.detect_bound and "bounded by" not in x.detect_bound
    (y,) = breakdown(_manifest(detection=None), logs, {0: [], 1: []})  # not known: the configured heartbeat only
    assert y.detect_limits == layout.DetectionBound(heartbeat_timeout_ms=2000)  # join timeout, tick: None
    assert "(heartbeat timeout): bounded by the heartbeat timeout" in y.detect_bound


def test_the_breakdown_text_shows_the_bound() -> None:
    from ftrun.report.recovery_view import recovery_lines

    logs = {(0, 0): [_step(16, T0 + 2.1, 2.0, [_q(5, [0], T0 + 2.0)])], (1, 0): []}
    (x,) = breakdown(
        _manifest(
            detection={
                "heartbeat_timeout_ms": 2000,
                "join_timeout_ms": 10000,
                "quorum_tick_ms": 100,
                "lighthouse": "ftrun",
            }
        ),
        logs,
        {0: [], 1: []},
    )
    lines = recovery_lines(x.record())
    assert any(
        ln.startswith("detect: replica 0 waited 2.00 s in quorum 5") and "heartbeat timeout" in ln for ln in lines
    )


def test_train_prints_the_breakdown_of_a_hang_too(capsys) -> None:
    """A hang relaunches nothing and lists no fault in ``faults``: its breakdown is printed all the same."""
    from ftrun.report.train_view import print_summary

    group = train_summary()["replicas"][0]
    reps = [{**group, "replica": r, "steps": 80, "last_step": 80} for r in (0, 1, 2)]
    hang = _rec(
        fault="hang 1@15",
        phases={**_rec()["phases"], "relaunch": None},
        reasons={"relaunch": "not relaunched: a hang is not a crash"},
    )
    s = train_summary(
        schedule=dict(fragments=2, sync_every=10, fragment_sync_delay=3, steps=80),
        replicas=reps,
        wall_s=37.0,
        recovery=[hang],
    )
    print_summary(msgspec.convert(s, layout.TrainSummary))
    out = capsys.readouterr().out
    assert "recovery · hang 1@15" in out and "not relaunched: a hang is" in out  # (the note column wraps)


@pytest.mark.parametrize("terminal", [True, False])
def test_the_notes_wrap_to_the_consoles_width(terminal) -> None:
    """Issue 42: the breakdown's notes and legend printed 224-415-character lines at 80
    columns; they wrap to the console's width, on a terminal or piped, losing no word."""
    import io

    from rich.console import Console

    from ftrun.report.recovery_view import LEGEND, print_recovery

    buf = io.StringIO()
    con = Console(file=buf, width=80, force_terminal=terminal, color_system=None, highlight=False, soft_wrap=True)
    print_recovery(con, [_record()])
    lines = buf.getvalue().splitlines()
    assert max(map(len, lines)) <= 80, max(lines, key=len)
    assert " ".join(" ".join(lines).split()).find(" ".join(LEGEND.split())) >= 0
