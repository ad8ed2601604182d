"""``ftrun.grid`` (axes, presets, product, names, classification, verdicts) and
``ftrun.report.sweep_view`` (sweep.md, the picture): no processes."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import msgspec
import pytest

from ftrun import grid, layout
from ftrun.config import build
from ftrun.errors import BadInput
from ftrun.launch.preflight import why_unavailable
from ftrun.report import sweep_view
from train_fixtures import train_summary

CPU_RUN = Path(__file__).parent.parent / "data" / "cpu_run"


def test_parse_axis_types_and_separators():
    assert grid.parse_axis("fragments=1,2,4") == grid.Axis("fragments", (1, 2, 4))
    assert grid.parse_axis("sync-every=10").key == "sync_every"
    assert grid.parse_axis("bucketize=off,on").values == (False, True)
    assert grid.parse_axis("fragment_update_alpha=0,0.5").values == (0.0, 0.5)
    assert grid.parse_axis("link=1gbit,20ms;100mbit,5ms").values == ("1gbit,20ms", "100mbit,5ms")
    assert grid.parse_axis("kill=none,1@10+0@20").values == ([], ["1@10", "0@20"])
    assert grid.parse_axis("backend=gloo,baby-gloo").values == ("gloo", "baby-gloo")


@pytest.mark.parametrize(
    "text, needle",
    [
        ("foo=1", "unknown option 'foo'"),
        ("fragments", "expected KEY=V1,V2"),
        ("fragments=", "empty value"),
        ("fragments=1,,2", "empty value"),
        ("fragments=1,x", "'x' is not an integer"),
        ("fragment_update_alpha=half", "not a number"),
        ("bucketize=maybe", "not on/off"),
        ("backend=mpi", "not one of"),
        ("mode=fast", "not one of"),
        ("fragments=2,2", "given twice"),
        ("out=a,b", "cannot vary per cell"),
        ("run_name=a,b", "cannot vary per cell"),
    ],
)
def test_bad_axes_name_the_axis(text, needle):
    with pytest.raises(BadInput) as e:
        grid.parse_axis(text)
    assert needle in str(e.value) and f"--axis {text}" in str(e.value)


def test_merge_and_shared_conflicts():
    p = [grid.Axis("backend", ("gloo", "nccl")), grid.Axis("bucketize", (False, True))]
    mine = grid.merge_axes(p, [grid.Axis("backend", ("gloo",)), grid.Axis("steps", (10, 20))])
    assert [(a.key, a.values) for a in mine] == [
        ("backend", ("gloo",)),
        ("bucketize", (False, True)),
        ("steps", (10, 20)),
    ]
    with pytest.raises(BadInput, match="given twice"):
        grid.merge_axes([], [grid.Axis("steps", (1,)), grid.Axis("steps", (2,))])
    with pytest.raises(BadInput, match="--bucketize: also an axis"):
        grid.check_shared(p, {"bucketize": True})
    grid.check_shared(p, {"bucketize": None, "steps": 5})


def test_presets():
    axes, shared = grid.preset_axes("pgs", {}, cuda=False)
    assert {a.key: a.values for a in axes} == {
        "backend": ("gloo", "baby-gloo", "nccl", "baby-nccl"),
        "bucketize": (False, True),
        "mode": ("streaming", "baseline"),
        "quantize": (False, True),
        "kill": ([], [grid.KILL]),
    }
    axes, _ = grid.preset_axes("pgs", {"kill": ["0@5"]}, cuda=False)  # the user's kill: no kill axis
    assert "kill" not in [a.key for a in axes]
    axes, shared = grid.preset_axes("tau", {"sync_every": 12, "fragments": 3}, cuda=False)
    assert axes == [grid.Axis("fragment_sync_delay", (0, 1, 2, 3))] and shared == {"mode": "streaming"}
    axes, shared = grid.preset_axes("fragments", {"sync_every": 12}, cuda=False)
    assert axes[0].values == (1, 2, 3, 4, 6, 12) and shared["fragment_sync_delay"] == 0
    with pytest.raises(BadInput, match="--preset nope"):
        grid.preset_axes("nope", {}, cuda=False)
    with pytest.raises(BadInput, match="multiple of F"):
        grid.preset_axes("tau", {"sync_every": 10, "fragments": 3}, cuda=False)


def test_product_order_and_names():
    cells = grid.product(
        [
            grid.Axis("backend", ("gloo", "baby-gloo")),
            grid.Axis("fragment_sync_delay", (0, 5)),
            grid.Axis("bucketize", (True,)),
        ]
    )
    assert [c.name for c in cells] == [
        "backend-gloo_tau0_bucketize-on",
        "backend-gloo_tau5_bucketize-on",
        "backend-baby-gloo_tau0_bucketize-on",
        "backend-baby-gloo_tau5_bucketize-on",
    ]
    assert cells[1].params == {"backend": "gloo", "fragment_sync_delay": 5, "bucketize": True}
    link = grid.product([grid.Axis("link", ("1gbit,20ms", "1gbit 20ms"))])
    assert [c.name for c in link] == ["link-1gbit-20ms", "link-1gbit-20ms-2"]  # unique after sanitising
    with pytest.raises(BadInput, match="empty grid"):
        grid.product([])


def test_classify_uses_config_rules_and_host_checks(tmp_path):
    cells = grid.product([grid.Axis("fragment_sync_delay", (1, 3)), grid.Axis("backend", ("gloo", "nccl"))])
    env_no_gpu = {"sync_every": 4, "fragments": 2, "out": str(tmp_path)}
    grid.classify(
        cells, lambda p: build(**env_no_gpu, **p), lambda cfg: "no GPU here" if cfg.hosts.backend == "nccl" else None
    )
    by = {c.name: c for c in cells}
    assert by["tau1_backend-gloo"].status == "run" and by["tau1_backend-gloo"].config.schedule.fragment_sync_delay == 1
    assert by["tau1_backend-nccl"].status == "unavailable" and by["tau1_backend-nccl"].reason == "no GPU here"
    for n in ("tau3_backend-gloo", "tau3_backend-nccl"):  # invalid wins: never asked whether the host could
        assert by[n].status == "invalid" and "tau < H/F" in by[n].reason and by[n].config is None


def test_why_unavailable_reuses_train_checks(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr("ftrun.launch.preflight.has_cuda_device", lambda: False)
    assert why_unavailable(build(backend="gloo", out=str(tmp_path))) is None
    assert "no GPU visible" in why_unavailable(build(backend="nccl", out=str(tmp_path)))
    assert "needs CUDA and NCCL" in why_unavailable(build(backend="gloo", quantize=True, out=str(tmp_path)))


def test_verdicts():
    assert grid.verdict("pass", [], []) == ("pass", None)
    assert grid.verdict("fail", ["replica 0 rank 0: sync missing"], [(0, 0, 10)]) == (
        "fail",
        "replica 0 rank 0: sync missing",
    )
    v, why = grid.verdict("pass", [], [(0, 0, 10), (1, 0, 10), (0, 0, 5)])
    assert v == "failed-commits" and why.startswith("3 commit(s) failed on 2 rank(s)")
    assert "replica 0 rank 0 at sync steps 5, 10" in why


def test_exit_code():
    assert grid.exit_code(["pass", "invalid", "unavailable"]) == 0
    for bad in ("fail", "failed-commits", "crashed", "not run"):
        assert grid.exit_code(["pass", bad]) == 1
    assert grid.exit_code(["invalid", "unavailable"]) == 1  # nothing ran


def _result(axes, cells, **kw) -> layout.SweepResult:
    d = {
        "sweep_dir": "/x/s",
        "name": "s",
        "preset": None,
        "axes": axes,
        "shared": {"steps": 8},
        "metric": "steps_per_s",
        "parallel": 1,
        "machine": {"cpus": 2, "gpus": 0, "platform": "linux"},
        "versions": {"torchft": "0.2.0"},
        "notes": [],
        "counts": {},
        "cells": cells,
        **kw,
    }
    return msgspec.convert(d, layout.SweepResult)


def _cell(params, verdict, **m):
    return {
        "name": grid.cell_name(params),
        "params": params,
        "verdict": verdict,
        "problem": m.pop("problem", None),
        **m,
    }


def test_markdown_lists_every_cell_with_its_reason():
    cells = [
        _cell({"backend": "gloo", "bucketize": False}, "pass", commits=3, failed_commits=0, steps_per_s=2.5),
        _cell({"backend": "gloo", "bucketize": True}, "failed-commits", problem="4 commit(s) failed | x"),
        _cell({"backend": "nccl", "bucketize": False}, "unavailable", problem="no GPU"),
        _cell({"backend": "nccl", "bucketize": True}, "invalid", problem="rule"),
    ]
    md = sweep_view.markdown(
        _result([{"key": "backend", "values": ["gloo", "nccl"]}, {"key": "bucketize", "values": [False, True]}], cells)
    )
    rows = [x for x in md.splitlines() if x.startswith("| gloo") or x.startswith("| nccl")]
    assert len(rows) == 4
    assert rows[0].startswith("| gloo | off | **pass** | 3 | 0 | 2.50 |")
    assert "**failed-commits**" in rows[1] and "4 commit(s) failed \\| x" in rows[1]  # a '|' cannot break the table
    assert rows[2].endswith("| no GPU |") and "**invalid**" in rows[3]


def _png_size(p: Path) -> tuple[int, int]:
    b = p.read_bytes()
    assert b[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(b[16:20], "big"), int.from_bytes(b[20:24], "big")


def test_pictures(tmp_path):
    grid_res = _result(
        [{"key": "backend", "values": ["gloo", "baby-gloo"]}, {"key": "mode", "values": ["streaming", "baseline"]}],
        [_cell({"backend": b, "mode": m}, "pass") for b in ("gloo", "baby-gloo") for m in ("streaming", "baseline")],
    )
    w1, h1 = _png_size(sweep_view.draw(grid_res, tmp_path / "g.png", "steps_per_s"))
    line_res = _result(
        [{"key": "fragment_sync_delay", "values": [0, 1, 2]}, {"key": "bucketize", "values": [False, True]}],
        [
            _cell({"fragment_sync_delay": t, "bucketize": b}, "pass", steps_per_s=1.0 + t)
            for t in (0, 1, 2)
            for b in (False, True)
        ],
    )
    w2, h2 = _png_size(sweep_view.draw(line_res, tmp_path / "l.png", "steps_per_s"))
    assert (w1, h1) != (w2, h2)  # a grid sized by its cells vs the fixed-size line plot
    assert sweep_view._numeric_axis(line_res) == "fragment_sync_delay" and sweep_view._numeric_axis(grid_res) is None


def test_the_line_plot_starts_at_zero(tmp_path, monkeypatch):
    """Issue 42: sweep.png's y-axis started at the smallest value, so 10.0 vs 10.5 steps/s looked large."""
    import matplotlib.pyplot as plt

    drawn = []
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig: (drawn.append(fig.axes[0].get_ylim()), close(fig)))
    res = _result(
        [{"key": "fragment_sync_delay", "values": [0, 1, 2]}],
        [_cell({"fragment_sync_delay": t}, "pass", steps_per_s=10.0 + t / 4) for t in (0, 1, 2)],
    )
    sweep_view.draw(res, tmp_path / "l.png", "steps_per_s")
    (bottom, top) = drawn[0]
    assert bottom == 0 and top >= 10.5, drawn


def test_cell_config_file_round_trips(tmp_path):
    """The TOML a cell's `ftrun train --config` reads gives back the very configuration planned."""
    from ftrun import config as cfgmod
    from ftrun.sweep.runner import cell_toml, differing

    cfg = build(
        mode="baseline",
        backend="baby-gloo",
        bucketize=True,
        fragment_update_alpha=0.5,
        kill=["1@10"],
        link="1gbit,20ms",
        out=str(tmp_path / "s"),
        run_name="backend-baby-gloo",
    )
    p = tmp_path / "c.toml"
    p.write_text(cell_toml(differing(cfg)))
    again = cfgmod.build(file_values=cfgmod.load_toml(p))
    assert again.resolved() == cfg.resolved()


def test_resume_refuses_a_cell_trained_with_other_options(tmp_path):
    from ftrun.sweep.resume import finished
    from ftrun.sweep.runner import CELL_RESULT, differing

    cell = grid.product([grid.Axis("backend", ("gloo",))])[0]
    cell.config = build(backend="gloo", steps=8, profile="none", out=str(tmp_path), run_name=cell.name)
    assert finished(tmp_path, cell) is None  # nothing there yet
    (tmp_path / cell.name).mkdir()
    old = build(backend="gloo", steps=16, profile="none", out=str(tmp_path / "elsewhere"), run_name=cell.name)
    (tmp_path / cell.name / CELL_RESULT).write_text(
        json.dumps({"verdict": "pass", "params": cell.params, "config": differing(old)})
    )
    with pytest.raises(BadInput, match="steps = 16, this sweep asks for 8"):
        finished(tmp_path, cell)
    same = build(backend="gloo", steps=8, profile="none", out=str(tmp_path / "elsewhere"), run_name=cell.name)
    shutil.rmtree(tmp_path / cell.name)
    shutil.copytree(CPU_RUN, tmp_path / cell.name)  # a real run dir: --resume re-checks it
    (tmp_path / cell.name / CELL_RESULT).write_text(
        json.dumps({"verdict": "pass", "params": cell.params, "config": differing(same)})
    )
    done = finished(tmp_path, cell)
    assert done is not None and done.verdict == "pass"  # the same options, spelled with another --out


def _resumable(tmp_path: Path, record: dict):
    """A finished cell (the real CPU run's dir) whose sweep-cell.json is ``record`` + its config."""
    from ftrun.sweep.runner import CELL_RESULT, differing

    cell = grid.product([grid.Axis("backend", ("gloo",))])[0]
    cell.config = build(backend="gloo", steps=8, profile="none", out=str(tmp_path), run_name=cell.name)
    shutil.copytree(CPU_RUN, tmp_path / cell.name)
    (tmp_path / cell.name / CELL_RESULT).write_text(
        json.dumps({"params": cell.params, "config": differing(cell.config), **record})
    )
    return cell


def test_resume_rechecks_a_passed_cell_whose_traces_were_corrupted(tmp_path):
    from ftrun.sweep.resume import finished

    cell = _resumable(tmp_path, {"verdict": "pass", "commits": 4})
    assert finished(tmp_path, cell).verdict == "pass"
    t = tmp_path / cell.name / "traces" / "replica1_rank0.21.pt.trace.json.gz"
    t.write_bytes(t.read_bytes()[: len(t.read_bytes()) // 2])  # corrupted after the cell passed
    got = finished(tmp_path, cell)
    assert got.verdict == "fail" and got.recorded_verdict == "pass", got
    assert "re-checked on --resume (recorded pass)" in got.problem and "broken gzip" in got.problem


@pytest.mark.parametrize(
    "record, phrase",
    [
        ({"verdict": "pass", "commits": "four"}, "commits"),
        ({"verdict": "pass", "params": ["not", "a", "dict"]}, "params"),
        ({"verdict": "bogus"}, "verdict"),
        ({"commits": 4}, "verdict"),
    ],
    ids=["wrong-typed figure", "wrong-typed params", "made-up verdict", "no verdict"],
)
def test_resume_refuses_a_tampered_cell_file_in_one_line(tmp_path, record, phrase):
    from ftrun.sweep.resume import finished

    cell = _resumable(tmp_path, record)
    with pytest.raises(BadInput) as e:
        finished(tmp_path, cell)
    msg = str(e.value)
    assert msg.startswith("--resume: ") and "sweep-cell.json" in msg and phrase in msg and "\n" not in msg, msg


def test_a_training_that_failed_early_is_crashed_with_its_error_line(tmp_path):
    from ftrun.launch.diagnose import ftrun_error as first_error
    from ftrun.sweep.evaluate import evaluate

    err = "some warning\nerror: replica group 1 exited with code 1 at step 3: RuntimeError: boom\n"
    assert first_error(err) == "replica group 1 exited with code 1 at step 3: RuntimeError: boom"
    assert first_error("Traceback ...\nKeyError: 'x'\n") == "KeyError: 'x'"  # no ftrun line: the last one
    cell = grid.product([grid.Axis("steps", (8,))])[0]
    run_dir = tmp_path / cell.name
    run_dir.mkdir()
    got = evaluate(cell, run_dir, 1, err)
    assert (got.verdict, got.problem) == ("crashed", "replica group 1 exited with code 1 at step 3: RuntimeError: boom")
    assert got.steps_per_s is None and got.numerics is None
    failures = ["replica group 0 stopped at step 2 of 8"]
    (run_dir / "summary.json").write_text(json.dumps(train_summary(ok=False, failures=failures)))
    assert evaluate(cell, run_dir, 1, "").problem == "ftrun train exited 1"


@pytest.mark.parametrize("width", [80, 200])
def test_console_table_fits_and_keeps_every_verdict(width):
    from ftrun.console import console

    keys = ["backend", "bucketize", "mode", "quantize"]
    cells = [
        _cell(
            {"backend": b, "bucketize": False, "mode": "streaming", "quantize": False},
            v,
            commits=1.5,
            failed_commits=1,
            steps_per_s=3.41,
            exposed_comm_per_sync_ms=6.4,
            problem=p,
        )
        for b, v, p in (
            ("gloo", "pass", None),
            ("baby-gloo", "failed-commits", "4 commit(s) failed on 2 rank(s) " * 4),
            ("baby-nccl", "unavailable", "--backend baby-nccl: no GPU visible on this host"),
        )
    ]
    res = _result([{"key": k, "values": []} for k in keys], cells, picture="/x/s/sweep.png", counts={"pass": 1})
    con = console(width=width, record=True, file=open("/dev/null", "w"))
    sweep_view.print_sweep(res, con)
    text = con.export_text()
    assert max(len(ln.rstrip()) for ln in text.splitlines()) <= width
    for v in (
        "pass",
        "failed-commits",
        "unavailable",
        "backend=baby-gloo" if width < 120 else "baby-gloo",
        "3.41",
        "6.4",
    ):
        assert v in text, (v, text)
    assert "…" not in text  # nothing cut
    last = " ".join(ln.split("│")[-2].strip() for ln in text.splitlines() if ln.count("│") > 2)  # the problem column
    assert "4 commit(s) failed on 2 rank(s)" in re.sub(r"\s+", " ", last)
    # an unavailable cell: its reason on one line under the table, not a row
    assert "unavailable (1): --backend baby-nccl: no GPU visible on this host" in re.sub(r"\s+", " ", text)


def test_a_cell_whose_run_dir_is_still_in_use_is_not_run_and_not_recorded(tmp_path, monkeypatch):
    """Issue 24 item 11: a --resume right after a crashed sweep used to record "crashed: in use by
    pid N" as the cell's result and keep it for ever. Now it waits for the training that holds
    the run dir to stop; if it still holds it, the cell is "not run" and nothing is recorded."""
    import fcntl
    import os

    from ftrun.output import mark_new_run_dir
    from ftrun.sweep import runner as sw

    monkeypatch.setattr(sw, "STOP_WAIT_S", 0.3)
    cell = grid.product([grid.Axis("steps", (8,))])[0]
    cell.config = build(steps=8, profile="none", out=str(tmp_path), run_name=cell.name)
    (tmp_path / cell.name).mkdir()
    lock = mark_new_run_dir(tmp_path / cell.name)  # held as by a training still running
    runner = sw.Runner(tmp_path)
    monkeypatch.setattr(runner, "train", lambda c: pytest.fail("trained a cell whose run dir is in use"))
    res = sw.run_cell(runner, cell)
    assert res is not None and res.verdict == "not run" and f"in use by pid {os.getpid()}" in res.problem, res
    assert not (tmp_path / cell.name / sw.CELL_RESULT).exists()
    lock.release()
    assert sw.wait_until_unlocked(tmp_path / cell.name, 0.0) is None
    fd = os.open(tmp_path / cell.name, os.O_RDONLY)  # free again: the lock is not taken by the probe
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(fd)


def _pgs_like():
    """The pgs preset's 32 cells as this CPU host classifies them: 8 ran, 24 unavailable."""
    import itertools

    keys = ["backend", "bucketize", "mode", "quantize"]
    cells = []
    for b, bz, m, q in itertools.product(
        ["gloo", "baby-gloo", "nccl", "baby-nccl"], [False, True], ["streaming", "baseline"], [False, True]
    ):
        p = {"backend": b, "bucketize": bz, "mode": m, "quantize": q}
        if b in ("nccl", "baby-nccl"):
            cells.append(_cell(p, "unavailable", problem=f"--backend {b}: no GPU visible on this host"))
        elif q:
            cells.append(
                _cell(
                    p,
                    "unavailable",
                    problem="--quantize: needs CUDA and NCCL (torchft's quantized allreduce); this run is on CPU",
                )
            )
        else:
            cells.append(
                _cell(
                    p,
                    "pass" if b == "gloo" else "failed-commits",
                    commits=2,
                    failed_commits=0,
                    steps_per_s=6.77,
                    exposed_comm_per_sync_ms=8.2,
                    problem=None if b == "gloo" else "4 commit(s) failed on 2 rank(s)",
                )
            )
    return _result(
        [{"key": k, "values": []} for k in keys], cells, counts={"pass": 4, "failed-commits": 4, "unavailable": 24}
    )


def test_piped_sweep_fits_80_columns_and_collapses_unavailable_cells(monkeypatch, capsys):
    """Issue 24 item 18: piped, the table was printed 200 columns wide with a row for each of the
    24 unavailable cells. Now it fits 80 columns and says each reason once."""
    monkeypatch.delenv("COLUMNS", raising=False)
    sweep_view.print_sweep(_pgs_like())  # stdout is captured: not a terminal
    text = capsys.readouterr().out
    long = [ln for ln in text.splitlines() if len(ln.rstrip()) > 80]
    assert not long, "\n".join(long)
    assert "…" not in text
    flat = re.sub(r"\s+", " ", text)
    assert flat.count("no GPU visible on this host") == 2  # one line per reason (nccl, baby-nccl)
    assert flat.count("needs CUDA and NCCL") == 1
    assert "unavailable (8): --backend nccl: no GPU visible on this host" in flat
    assert "unavailable (8): --quantize: needs CUDA and NCCL" in flat
    assert flat.count("backend=baby-gloo") == 4 and flat.count("backend=nccl") == 0  # the cells that ran, one row each


def test_pgs_cells_are_the_product_without_a_fault_and_one_recovery_cell_per_process_group():
    axes, _ = grid.preset_axes("pgs", {}, cuda=False, backends=("gloo", "baby-gloo"))
    cells = grid.cells(axes, {}, "pgs")
    plain = [c for c in cells if not c.params["kill"]]
    killed = [c for c in cells if c.params["kill"]]
    assert len(plain) == 2 * 2 * 2 * 2 and [c.name for c in plain] == [c.name for c in grid.product(axes[:-1])]
    assert [c.params for c in killed] == [
        {
            "backend": b,
            "bucketize": False,
            "mode": "streaming",
            "quantize": False,
            "kill": [grid.KILL],
            **grid.RECOVERY_PARAMS,
        }
        for b in ("gloo", "baby-gloo")
    ]
    assert killed[0].name == "backend-gloo_bucketize-off_mode-streaming_quantize-off_kill-1-15_R3_step-sleep-ms-100"
    # the user's --replicas is kept; --axis kill=none runs no recovery cell; another preset's kill axis is a product
    mine = grid.cells(axes, {"replicas": 4}, "pgs")
    assert all("replicas" not in c.params and c.params["step_sleep_ms"] == 100 for c in mine if c.params["kill"])
    no_kill = grid.merge_axes(axes, [grid.parse_axis("kill=none")])
    assert (
        all(not c.params["kill"] for c in grid.cells(no_kill, {}, "pgs")) and len(grid.cells(no_kill, {}, "pgs")) == 16
    )
    assert len(grid.cells(axes, {}, None)) == len(grid.product(axes)) == 32
