"""scripts/bench_worker_memory.py on hand-made samples and event logs: each sample placed at its
step, quarter medians, growth per half, and the verdict (allocator retention or held bytes grow)."""

from __future__ import annotations

import json

import pytest

from train_fixtures import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("bench_worker_memory")


def _write(tmp_path, held_per_step: float, heap_until: int = 200):
    """A worker sampled at every step t = step (s): the heap grows 1000 bytes a step until
    ``heap_until`` then stays; held grows ``held_per_step``; RSS = heap + 200 MB."""
    events = tmp_path / "replica0_rank0.jsonl"
    samples = tmp_path / "replica0_rank0.txt"
    events.write_text("".join(json.dumps({"step": s, "t": float(s)}) + "\n" for s in range(1, 401)) + '{"torn')
    lines = []
    for s in range(1, 401):
        arena = 100e6 + 1000 * min(s, heap_until)
        held = 80e6 + held_per_step * s
        lines.append(f"{s + 0.5} {arena + 200e6} {arena} {held} {arena - held} 2e6")
    samples.write_text("0.5 1 1 1 1 1\n" + "\n".join(lines) + "\n")  # (before the first step: dropped)
    return samples, events


def test_a_heap_that_grows_then_stays_with_held_bytes_flat_is_retention_with_a_plateau(bench, tmp_path):
    w = bench.worker(*_write(tmp_path, held_per_step=0.0))
    assert w["samples"] == 400 and w["steps"] == [1, 400]
    assert w["growth_bytes_per_step"]["first_half"]["arena"] == pytest.approx(1000, rel=0.01)
    assert w["growth_bytes_per_step"]["second_half"]["arena"] == 0
    assert w["quarters"]["held"] == [80.0, 80.0]
    v = bench.verdict([w, w])
    assert v["verdict"] == "allocator retention" and v["plateau"] is True and v["retained_share"] == 1.0
    assert v["growth_bytes_per_step"]["first_half"]["arena"] == pytest.approx(2000, rel=0.01)  # summed


def test_held_bytes_growing_with_rss_is_not_called_retention(bench, tmp_path):
    v = bench.verdict([bench.worker(*_write(tmp_path, held_per_step=1000.0, heap_until=400))])
    assert v["verdict"] == "held bytes grow" and v["plateau"] is False and v["retained_share"] == 0.0


def test_held_bytes_that_grow_early_then_stay_are_not_a_leak(bench, tmp_path):
    samples, events = _write(tmp_path, held_per_step=0.0)
    rows = [line.split() for line in samples.read_text().splitlines()]
    for r in rows[1:]:  # held grows 300 bytes a step through step 200, then stays
        step = float(r[0]) - 0.5
        r[3] = str(80e6 + 300 * min(step, 200))
        r[4] = str(float(r[2]) - float(r[3]))  # free = heap - held
    samples.write_text("\n".join(" ".join(r) for r in rows) + "\n")
    v = bench.verdict([bench.worker(samples, events)])
    assert v["verdict"] == "allocator retention" and v["plateau"] and v["retained_share"] == 0.7


def test_too_few_samples_say_so(bench, tmp_path):
    samples, events = _write(tmp_path, 0.0)
    samples.write_text("500.5 1 1 1 1 1\n")
    assert bench.worker(samples, events) == {"replica": "replica0_rank0", "samples": 1}
