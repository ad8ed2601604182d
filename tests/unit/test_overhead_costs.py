"""ftrun's per-step costs made cheaper without doing less (issue 27 part 5): the committed
fragment's fingerprint (SHA-256, hashed in place) and ``scripts/bench_overhead.py``'s sampler
reading only the event logs' new bytes. (torchrun's agent keeps torch's 0.1 s look at its ranks:
a slower one would see every unplanned crash and every run's end later, for ~0.05 ms of CPU per
step on a machine without a spare core.) Unit tests: no process is started."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from ftrun import layout
from ftrun.worker.recorder import fingerprint

ROOT = Path(__file__).resolve().parents[2]


def _params() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "w": torch.randn(4, 6, generator=g),
        "b": torch.randn(6, generator=g),
        "scale": torch.tensor(1.5),
        "empty": torch.zeros(0),
    }


def test_the_fingerprint_is_sha256_of_sorted_names_and_bytes_in_32_hex_digits() -> None:
    ps = _params()
    h = hashlib.sha256()
    for name in sorted(ps):
        h.update(name.encode())
        h.update(ps[name].numpy().tobytes())
    fp = fingerprint(ps)
    assert fp == h.hexdigest()[:32] and len(fp) == 32 and int(fp, 16) >= 0


def test_the_fingerprint_sees_values_not_layout_and_any_changed_bit() -> None:
    ps = _params()
    fp = fingerprint(ps)
    # the same values in other tensors (a transposed view made contiguous, a copy): the same print
    same = {k: v.clone() for k, v in ps.items()}
    same["w"] = ps["w"].t().contiguous().t()  # non-contiguous, same values
    assert not same["w"].is_contiguous() and fingerprint(same) == fp
    flipped = {k: v.clone() for k, v in ps.items()}
    flipped["b"].view(torch.int32)[3] ^= 1  # one bit of one element
    renamed = {("bias" if k == "b" else k): v for k, v in ps.items()}
    assert fingerprint(flipped) != fp and fingerprint(renamed) != fp


@pytest.fixture
def bench():
    spec = importlib.util.spec_from_file_location("bench_overhead", ROOT / "scripts" / "bench_overhead.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_overhead"] = mod
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop("bench_overhead", None)


def test_the_benchmarks_sampler_counts_complete_lines_from_the_new_bytes_only(bench, tmp_path: Path) -> None:
    logs = [tmp_path / "replica0_rank0.jsonl", tmp_path / "replica1_rank0.jsonl"]
    logs[0].write_bytes(b"{}\n{}\n{")
    logs[1].write_bytes(b"{}\n")
    tree = bench.TreeCpu(1, logs, 2)
    assert tree.steps() == 1.5  # (2 + 1) / 2: the torn line is not a step
    with logs[0].open("ab") as f:
        f.write(b"}\n{}\n")
    with logs[1].open("ab") as f:
        f.write(b"{}\n{}\n{}\n")
    assert tree.steps() == 4.0 and tree._read == [len(logs[0].read_bytes()), len(logs[1].read_bytes())]
    assert tree.steps() == 4.0  # nothing new: nothing counted twice
    logs[1].unlink()
    assert tree.steps() is None


def test_the_paired_ratio_says_met_missed_or_not_resolved_from_its_interval(bench) -> None:
    tight = bench.paired_ratio([1.010, 1.012, 1.008, 1.011, 1.009])
    assert tight["verdict"] == "goal met" and 1.00 <= tight["ci95"][0] < tight["ratio"] < tight["ci95"][1] <= 1.02
    assert bench.paired_ratio([1.05, 1.06, 1.055])["verdict"] == "goal missed"
    # this machine's spread (a run of 4 repeats here): the same mean says nothing about a 2% goal
    noisy = bench.paired_ratio([0.9685, 1.1291, 0.9609, 1.0519])
    assert noisy["verdict"] == "not resolved" and noisy["ci95"][0] < 1.0 < 1.02 < noisy["ci95"][1]
    assert noisy["repeats_to_resolve"] > 100
    one = bench.paired_ratio([1.01])
    assert one["verdict"] == "not resolved" and one["ci95"] == [None, None]


def test_the_bare_lighthouse_cpu_is_read_over_the_loop_window(bench) -> None:
    w = bench.WARMUP
    stamps = [10.0 + 0.1 * i for i in range(w + 100)]  # 100 steps of 0.1 s after the warm-up
    # 1 ms of CPU per 0.1 s throughout; 5 s of start-up CPU before the window is left out
    samples = [(9.0, 0.0), (9.5, 5.0)] + [(10.0 + 0.05 * k, 5.0 + 0.0005 * k) for k in range(400)]
    assert bench.window_ms_per_step(samples, stamps) == pytest.approx(1.0)
    assert bench.window_ms_per_step(samples[:2], stamps) != bench.window_ms_per_step(samples[:2], stamps)  # nan
    cpu = {"rank": 30.0, "lighthouse": 0.2, "torchrun agent": 0.3, "ftrun parent": float("nan")}
    assert bench.all_processes_ms(cpu, 2) == pytest.approx(60.5)


def test_tensorboard_gets_one_event_per_step_with_every_scalar_of_the_step(tmp_path: Path) -> None:
    """``StepLoop`` hands TensorBoard one event per step (loss, step time; manager step and
    participants when they change); TensorBoard reads each tag's points as from ``add_scalar``."""
    import concurrent.futures
    import types

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    from ftrun.worker import step_loop as worker

    class Manager:
        _quorum_id = 1
        _participating_replica_world_size = 2

        def __init__(self) -> None:
            self._quorum_future: concurrent.futures.Future = concurrent.futures.Future()
            self._quorum_future.set_result(None)
            self.step = 0

        def current_step(self) -> int:
            return self.step

    class Recorder:
        def end_step(self, **fields) -> None:
            pass

    loop = worker.StepLoop.__new__(worker.StepLoop)
    loop.manager, loop.recorder, loop.env = Manager(), Recorder(), types.SimpleNamespace(restart=0)
    loop.writer = SummaryWriter(str(tmp_path), max_queue=100)
    loop._tb_last, loop._tb_pending = {}, []
    steps = worker.TB_EVERY + 3  # one batch handed over at TB_EVERY, the rest at the end
    for step in range(1, steps + 1):
        loop.manager.step = step // 10  # changes at steps 10, 20
        loop.log_step(step, loop.manager.step, 2.0 - step / 100, step / 1000, layout.StepNews())
    loop.flush_scalars()
    loop.writer.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    got = {tag: [(e.step, round(e.value, 6)) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    assert got["loss"] == [(s, round(2.0 - s / 100, 6)) for s in range(1, steps + 1)]
    assert got["step_time_s"] == [(s, round(s / 1000, 6)) for s in range(1, steps + 1)]
    assert got["manager_step"] == [(1, 0.0), (10, 1.0), (20, 2.0)] and got["participants"] == [(1, 2.0)]
    # one event per step (plus the file's version event), not one per scalar
    assert sum(1 for f in tmp_path.iterdir() for _ in _records(f)) == steps + 1


def _records(path: Path):
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    return EventFileLoader(str(path)).Load()
