#!/usr/bin/env python3
"""The fastest honest bare loop: variations of ``bench_overhead.py``'s bare torchft DiLoCo loop
against the plain one (ftrun's conditions), paired in each repeat (the order rotates, so the
load's drift cancels in the per-repeat ratio).

What a careful engineer would try to make the bare loop faster (``KNOBS``): every core per rank,
OMP's own thread count, batches generated before the loop, ``gc.freeze()``/gc off, glibc's default
malloc thresholds. Wall ms per step and CPU ms per rank, each as a ratio to the plain bare loop.
What made it faster and ftrun can do too is done on both sides of ``bench_overhead.py`` (the
malloc thresholds, ``ftrun.worker.malloc``); what changes the work (batches made before the loop:
data is part of a step) is reported, not applied. One knob is ftrun's process layout instead,
to tell its cost apart: the bare loop under a torchrun agent per replica.

Last line: ``{"plain_bare": {...}, "knobs": [...]}``.

Usage: python scripts/bench_bare_knobs.py [--knobs all|SUBSTRING,...] [--steps 120] [--replicas 2] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

import bench_overhead as bench

# In-process knobs go to the bare replica (``cfg["knobs"]``), environment knobs to its environment
# (``env``: None = unset the variable).
KNOBS: dict[str, dict] = {
    "threads=2 (all cores per rank)": {"knobs": {"threads": 2}, "env": {"OMP_NUM_THREADS": "2"}},
    "OMP_NUM_THREADS unset": {"env": {"OMP_NUM_THREADS": None}},
    "pre-generated batches": {"knobs": {"pregen": True}},
    "gc.freeze() after set-up": {"knobs": {"gc": "freeze"}},
    "gc off": {"knobs": {"gc": "off"}},
    "malloc: glibc's default thresholds (ftrun's worker fixes them)": {"knobs": {"malloc": False}},
    # not a way to make the bare loop faster: ftrun's process layout (a torchrun agent per replica
    # group, the group's store in the agent), to tell its cost from ftrun's own per-step work
    "under torchrun, as ftrun's groups": {"launcher": "torchrun"},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--knobs", default="all", help="'all' or comma-separated substrings of the knobs' names")
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    names = [n for n in KNOBS if a.knobs == "all" or any(w in n for w in a.knobs.split(","))]
    if not names:
        raise SystemExit(f"bench_bare_knobs: --knobs {a.knobs!r} matches none of: {', '.join(KNOBS)}")
    if a.repeat < 1 or a.steps <= bench.WARMUP:
        raise SystemExit(f"bench_bare_knobs: need --repeat >= 1 and --steps > {bench.WARMUP}")
    cfg = bench.config(a.steps, a.replicas)
    sides = ["plain", *names]
    runs: dict[str, list[bench.BareRun]] = {n: [] for n in sides}
    for i in range(a.repeat):
        for n in sides[i % len(sides) :] + sides[: i % len(sides)]:
            runs[n].append(bench.run_bare(cfg, a.replicas, None if n == "plain" else KNOBS[n]))
        done = ", ".join(f"{n} {runs[n][-1].ms_per_step:.2f}" for n in sides)
        print(f"repeat {i + 1} (load {os.getloadavg()[0]:.1f}): {done}", flush=True)

    def paired(n: str, of) -> float:
        return statistics.median(of(x) / of(y) for x, y in zip(runs[n], runs["plain"], strict=True))

    def wall(r: bench.BareRun) -> float:
        return r.ms_per_step

    def cpu(r: bench.BareRun) -> float:
        return r.cpu["rank"]

    rows = []
    for n in names:
        ms, cpu_ms = statistics.median(map(wall, runs[n])), statistics.median(map(cpu, runs[n]))
        row = {"knob": n, "ms_per_step": round(ms, 3), "vs_plain": round(paired(n, wall), 4)}
        rows.append({**row, "cpu_ms_per_step": round(cpu_ms, 3), "cpu_vs_plain": round(paired(n, cpu), 4)})
        print(
            f"{n:44} median {ms:.2f} ms/step = {row['vs_plain']:.3f}x the plain bare loop; CPU per rank "
            f"{cpu_ms:.2f} ms/step = {rows[-1]['cpu_vs_plain']:.3f}x (paired medians)"
        )
    plain = {
        "ms_per_step": round(statistics.median(map(wall, runs["plain"])), 3),
        "cpu_ms_per_step": round(statistics.median(map(cpu, runs["plain"])), 3),
    }
    print(f"plain bare loop: median {plain['ms_per_step']:.2f} ms/step, CPU per rank {plain['cpu_ms_per_step']:.2f} ms")
    print(json.dumps({"plain_bare": plain, "knobs": rows}))


if __name__ == "__main__":
    main()
