"""scripts/gpu_check.py's analysis, run on a real CPU run converted to kineto's CUDA shape."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import kineto_cuda as kc

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent.parent / "data" / "cpu_run"


def _script():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_analysis_of_converted_run(tmp_path):
    gc = _script()
    run = kc.convert_run(DATA, tmp_path / "run")
    out = gc.analyze_run([run])
    assert out["inspect"]["verdict"] == "pass" and out["inspect"]["problems"] == []
    assert [d["device"] for d in out["devices"]] == ["cpu", "cpu"]
    counts = out["traces"]["replica0_rank0.21.pt.trace.json.gz"]
    # kineto copies the innermost annotation at a launch: the steps (compute launched in them) and nccl:all_reduce
    assert counts["user_annotation ftrun::step#*"] == counts["gpu_user_annotation ftrun::step#*"] == 20
    assert (
        "gpu_user_annotation ProfilerStep#*" not in counts
        and "gpu_user_annotation torchft::local_sgd::prepare_sync" not in counts
    )
    assert (
        counts["kernel ncclDevKernel_Generic*"]
        == counts["user_annotation nccl:all_reduce"]
        == counts["gpu_user_annotation nccl:all_reduce"]
    )
    assert "user_annotation gloo:all_reduce" not in counts
    assert out["nccl_kernel_kinds"] == {"allreduce from kernel args": 58}
    q = out["queued_start_minus_previous_end_us"]
    assert q["min"] == -13.0 and q["max"] == 264.0  # the fixture's real-clock spread
    assert out["queue_causes"]["previous collective"] == q["n"]  # every queued kernel held by its predecessor
    assert out["kernels_in_a_later_step"]["placed"] == 58
    per = out["kernels_per_send"]
    assert len(per) == 4 and all(p["kernels"] == p["allreduce_calls"] > 0 for p in per)
    assert out["min_kernel_start_minus_launch_us"] >= kc.LAUNCH_LAG_US
    assert out["nccl_allreduce_kernel_us"]["n"] == sum(p["kernels"] for p in per)
    assert out["serialized_collectives"] == 0
    assert 0 < out["should_commit_sync_share"] <= 1


def test_queued_kernel_shows_in_the_summary(tmp_path):
    gc = _script()
    run = kc.convert_run(DATA, tmp_path / "run")
    for p in (run / "traces").glob("*.gz"):
        tr = kc.read(p)
        kc.write(kc.queue_behind(tr, len(kc.kernels(tr)) - 16), p)
    out = gc.analyze_run([run])
    assert out["serialized_collectives"] == 2  # one per replica


def test_link_check_needs_hold_spans(tmp_path):
    gc = _script()
    got = gc.link_check(kc.convert_run(DATA, tmp_path / "run"), 1e9, 0.02)
    assert got["hold_spans"] == 0 and got["ok"] is False


def test_no_cuda_prints_one_json_and_exits_0(capsys, monkeypatch):
    gc = _script()
    monkeypatch.setattr(gc, "cuda_available", lambda: (False, "no GPU here"))
    assert gc.main([]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["cuda"] is False and "not checked" in got["note"]
