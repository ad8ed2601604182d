#!/usr/bin/env python3
"""Where a training rank's memory goes as steps go by: glibc's allocator statistics beside RSS.

    python scripts/bench_worker_memory.py                  # ftrun train --steps 3000, 2 groups
    python scripts/bench_worker_memory.py --steps 6000 --every 1

Trains one run (``ftrun train --profile none``, the default model, into a temp dir, removed after)
whose workers each sample, every ``--every`` seconds from a thread, their RSS (``/proc/self/statm``)
and glibc's ``mallinfo2()``: ``arena`` (the heap's bytes taken from the kernel), ``uordblks``
(allocated: what the program holds), ``fordblks`` (free, kept inside the heap), ``hblkhd`` (mmapped
blocks). The sampler is a ``sitecustomize`` on the workers' ``PYTHONPATH`` (nothing in ftrun changes
for it), started in every process of the training and every child forked from one, sampling once
its environment says it is a rank; each sample's step is read from the rank's event log (its
``t``). RSS that grows with the heap while the bytes held stay flat is memory the allocator keeps
(``ftrun.worker.malloc``: fixed thresholds, no trim); bytes held that grow with it are a leak.

Output: per worker, the samples at ~12 points, then the least-squares growth per step of RSS,
arena, held and free over the first and the second half of the sampled steps. Last line: one JSON
object, ``workers`` (per worker: ``replica``, ``samples``, ``steps`` sampled, ``first``/``last`` in
MB, ``quarters``: each field's median MB over the first and the last quarter of samples,
``growth_bytes_per_step`` per half), the workers' growth per step summed, per half, and
``verdict``: ``held bytes grow`` when held bytes still grow in the second half by more than a
quarter of the heap's growth in the first (a leak), ``allocator retention`` otherwise;
``plateau``: whether the heap grew by at most a quarter as fast in the second half as in the
first; ``retained_share``: the part of the first half's heap growth that is free chunks kept.
Exit 1 when the run failed or no worker was sampled.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIELDS = ("rss", "arena", "held", "free", "mmapped")
SAMPLER = r"""
import ctypes, os, threading, time

class _Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                 "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

def _sample(path, every):
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _Info
    page = os.sysconf("SC_PAGE_SIZE")
    with open(path, "w", buffering=1) as out:
        while True:
            m = libc.mallinfo2()
            with open("/proc/self/statm") as f:
                rss = int(f.read().split()[1]) * page
            out.write(f"{time.time():.3f} {rss} {m.arena} {m.uordblks} {m.fordblks} {m.hblkhd}\n")
            time.sleep(every)

def _when_a_rank():
    # a rank's environment names it once torch elastic set it: at once in a rank started as a
    # fresh interpreter, a moment after the fork in one forked from its agent; an agent (fresh or
    # forked from the training's zygote), the zygote and the training itself never are one
    while "LOCAL_RANK" not in os.environ:
        time.sleep(0.05)
    name = f"replica{os.environ.get('REPLICA_GROUP_ID', 'x')}_rank{os.environ.get('RANK', '0')}.txt"
    _sample(os.path.join(os.environ["FTRUN_BENCH_MEMORY_DIR"], name), float(os.environ["FTRUN_BENCH_MEMORY_EVERY"]))

def _start():
    threading.Thread(target=_when_a_rank, daemon=True).start()

with open("/proc/self/cmdline", "rb") as _f:
    _cmd = _f.read()
if b"ftrun" in _cmd:  # the training's processes; ranks are mostly forked, so every forked child looks too
    os.register_at_fork(after_in_child=_start)
    _start()
"""


def step_times(events: Path) -> tuple[list[float], list[int]]:
    """(t, step) of each step record of one rank's event log, in order."""
    ts, steps = [], []
    for line in events.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and rec.get("step") and rec.get("t"):
            ts.append(float(rec["t"]))
            steps.append(int(rec["step"]))
    return ts, steps


def slope(xs: list[int], ys: list[float]) -> float:
    """Least-squares growth of ys per unit of xs (0 with fewer than two distinct xs)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0


def worker(samples: Path, events: Path) -> dict:
    """One worker's samples placed at their steps (those before its first step dropped)."""
    ts, steps = step_times(events)
    rows: list[tuple[int, list[float]]] = []
    for line in samples.read_text().splitlines():
        t, *vals = (float(v) for v in line.split())
        k = bisect.bisect_right(ts, t) - 1
        if k >= 0:
            rows.append((steps[k], vals))
    if len(rows) < 4:
        return {"replica": samples.stem, "samples": len(rows)}
    half = len(rows) // 2
    growth = {}
    for name, part in (("first_half", rows[:half]), ("second_half", rows[half:])):
        xs = [s for s, _ in part]
        growth[name] = {f: round(slope(xs, [v[i] for _, v in part]), 1) for i, f in enumerate(FIELDS)}
    mb = lambda v: {f: round(x / 1e6, 1) for f, x in zip(FIELDS, v, strict=True)}  # noqa: E731
    quarter = max(1, len(rows) // 4)
    quarters = {
        f: [round(statistics.median(v[i] for _, v in part) / 1e6, 1) for part in (rows[:quarter], rows[-quarter:])]
        for i, f in enumerate(FIELDS)
    }
    return {
        "quarters": quarters,
        "replica": samples.stem,
        "samples": len(rows),
        "steps": [rows[0][0], rows[-1][0]],
        "first": mb(rows[0][1]),
        "last": mb(rows[-1][1]),
        "growth_bytes_per_step": growth,
        "table": [(s, mb(v)) for s, v in rows[:: max(1, len(rows) // 12)] + [rows[-1]]],
    }


def verdict(workers: list[dict]) -> dict:
    """From the growth per step of each half of the sampled steps, summed over workers (a slope over
    many samples: one sample catches a step midway, and held bytes move within a step): ``held bytes
    grow`` when held bytes still grow in the second half by more than a quarter of the heap's growth
    in the first (a leak), else ``allocator retention``; ``plateau``: whether the heap grows by at most
    a quarter as fast in the second half as in the first; ``retained_share``: the part of the first
    half's heap growth that is free chunks kept."""
    g = [w["growth_bytes_per_step"] for w in workers if "growth_bytes_per_step" in w]
    first = {f: sum(x["first_half"][f] for x in g) for f in FIELDS}
    second = {f: sum(x["second_half"][f] for x in g) for f in FIELDS}
    return {
        "verdict": "held bytes grow" if second["held"] > max(first["arena"], 0.0) / 4 else "allocator retention",
        "plateau": first["arena"] > 0 and second["arena"] <= first["arena"] / 4,
        "retained_share": round(first["free"] / first["arena"], 2) if first["arena"] > 0 else None,
        "growth_bytes_per_step": {"first_half": first, "second_half": second},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3000, help="training steps (default 3000)")
    ap.add_argument("--replicas", type=int, default=2, help="replica groups (default 2)")
    ap.add_argument("--every", type=float, default=2.0, help="seconds between samples (default 2)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        hook, samples = Path(tmp, "hook"), Path(tmp, "samples")
        hook.mkdir()
        samples.mkdir()
        (hook / "sitecustomize.py").write_text(SAMPLER)
        env = {**os.environ, "FTRUN_BENCH_MEMORY_DIR": str(samples), "FTRUN_BENCH_MEMORY_EVERY": str(args.every)}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(hook), env.get("PYTHONPATH", "")) if p)
        cmd = [sys.executable, "-m", "ftrun", "train", "--steps", str(args.steps), "--replicas", str(args.replicas)]
        cmd += ["--profile", "none", "--out", tmp, "--run-name", "memory"]
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
        if proc.returncode:
            print(f"ftrun train failed (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
            return 1
        workers = [worker(f, Path(tmp, "memory", "events", f.stem + ".jsonl")) for f in sorted(samples.glob("*.txt"))]
    for w in workers:
        print(f"{w['replica']}: {w['samples']} samples")
        print("| step | RSS MB | heap (arena) MB | held MB | free in heap MB | mmapped MB |")
        print("| --- | --- | --- | --- | --- | --- |")
        for step, v in w.get("table", []):
            print(f"| {step} | {v['rss']} | {v['arena']} | {v['held']} | {v['free']} | {v['mmapped']} |")
        for f, (a, b) in (w.get("quarters") or {}).items():
            print(f"{f}: median of the first / last quarter of samples, MB: {a} / {b}")
        for half, g in (w.get("growth_bytes_per_step") or {}).items():
            print(f"{half}: growth per step, bytes: " + ", ".join(f"{k} {v:+.0f}" for k, v in g.items()))
        w.pop("table", None)
    out = {"steps": args.steps, "replicas": args.replicas, "every_s": args.every, "workers": workers}
    out.update(verdict(workers) if any("first" in w for w in workers) else {"verdict": "no worker sampled"})
    print(json.dumps(out))
    return 0 if any("first" in w for w in workers) else 1


if __name__ == "__main__":
    sys.exit(main())
