#!/usr/bin/env python3
"""ftrun's cost per training step, next to a bare torchft DiLoCo loop of the same model.

Runs, in the same invocation and on the same machine:
  1. bare: a torchft lighthouse + R replica processes, each a plain loop of Manager +
     DiLoCo + AdamW/Nesterov over the same model, data and schedule — no ftrun worker, no
     recorder, no profiler, no TensorBoard;
  2. ftrun: ``ftrun train --profile none`` with the same settings;
and prints the median step time of each (steady-state steps only) and the ratio. Goal: <= 1.05x.

Usage: python scripts/bench_overhead.py [--steps 120] [--replicas 2] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def bare_worker(replica: int, replicas: int, lighthouse: str, cfg: dict, out: str) -> None:
    """One replica group of the bare loop (rank 0 of a group of 1)."""
    from datetime import timedelta

    import torch
    import torch.nn.functional as F
    import torchft
    from torchft.local_sgd import DiLoCo

    from ftrun.worker.data import Batches
    from ftrun.worker.models import TokenModel, split_fragments

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // replicas))
    torch.manual_seed(cfg["seed"])
    model = TokenModel(cfg["model"], cfg["vocab"], cfg["width"], cfg["blocks"], cfg["seq_len"])
    frags = split_fragments(model, cfg["fragments"])
    inner = torch.optim.AdamW(model.parameters(), lr=cfg["inner_lr"])
    outer = [torch.optim.SGD(f.parameters(), lr=0.7, momentum=0.9, nesterov=True) for f in frags]
    data = Batches("synthetic", cfg["vocab"], cfg["seq_len"], cfg["batch_size"], cfg["seed"], replica)
    store = torch.distributed.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    manager = torchft.Manager(
        pg=torchft.ProcessGroupGloo(timeout=timedelta(seconds=60)),
        min_replica_size=1,
        load_state_dict=lambda sd: model.load_state_dict(sd),
        state_dict=model.state_dict,
        replica_id=f"bare_{replica}",
        use_async_quorum=False,
        init_sync=False,
        rank=0,
        world_size=1,
        store_addr="127.0.0.1",
        store_port=store.port,
        lighthouse_addr=lighthouse,
        hostname="localhost",
    )
    times = []
    with DiLoCo(manager, frags, inner, outer, sync_every=cfg["sync_every"], fragment_sync_delay=cfg["fragment_sync_delay"]):
        for _ in range(cfg["steps"]):
            t0 = time.perf_counter()  # as ftrun's worker: data + forward/backward + step (+ DiLoCo hook)
            x, y = data.next()
            inner.zero_grad()
            F.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
            inner.step()
            times.append(time.perf_counter() - t0)
    Path(out).write_text(json.dumps(times))
    manager.shutdown(wait=False)
    os._exit(0)


def run_bare(cfg: dict, replicas: int) -> list[float]:
    from ftrun.launch.groups import free_port, LIGHTHOUSE_ENTRY

    port = free_port()
    lh = subprocess.Popen([sys.executable, LIGHTHOUSE_ENTRY, "--min_replicas", str(replicas), "--bind", f"127.0.0.1:{port}",
                           "--join_timeout_ms", "10000", "--quorum_tick_ms", "100"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tmp = tempfile.mkdtemp()
    outs = [f"{tmp}/r{r}.json" for r in range(replicas)]
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(r), "--replicas", str(replicas), "--lighthouse", f"http://127.0.0.1:{port}",
                               "--cfg", json.dumps(cfg), "--out", outs[r]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for r in range(replicas)]
    try:
        for p in procs:
            p.wait(timeout=600)
    finally:
        for p in procs:
            p.kill() if p.poll() is None else None
        lh.kill()
        lh.wait()
    return [t for o in outs for t in json.loads(Path(o).read_text())[10:]]


def run_ftrun(cfg: dict, replicas: int) -> list[float]:
    out = tempfile.mkdtemp()
    cmd = [str(ROOT / ".venv/bin/ftrun") if (ROOT / ".venv/bin/ftrun").exists() else "ftrun", "train", "--profile", "none",
           "--replicas", str(replicas), "--steps", str(cfg["steps"]), "--out", out, "--run-name", "bench", "--json",
           "--fragments", str(cfg["fragments"]), "--sync-every", str(cfg["sync_every"]), "--fragment-sync-delay", str(cfg["fragment_sync_delay"])]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    times = []
    for r in range(replicas):
        recs = [json.loads(line) for line in (Path(out) / "bench" / "events" / f"replica{r}_rank0.jsonl").read_text().splitlines()]
        times += [x["step_time_s"] for x in recs if x.get("step") and x["step"] > 10]
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--lighthouse", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--cfg", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker is not None:
        bare_worker(a.worker, a.replicas, a.lighthouse, json.loads(a.cfg), a.out)
        return
    from ftrun.config import build

    cfg = build(steps=a.steps, profile="none").resolved()
    bare, ours = [], []
    for i in range(a.repeat):  # interleaved, so drift in machine load hits both
        bare += run_bare(cfg, a.replicas)
        ours += run_ftrun(cfg, a.replicas)
    b, o = statistics.median(bare), statistics.median(ours)
    print(f"machine: {os.cpu_count()} cores; model {cfg['model']} width {cfg['width']} blocks {cfg['blocks']}; "
          f"F={cfg['fragments']} H={cfg['sync_every']} tau={cfg['fragment_sync_delay']}; {a.replicas} replicas x {a.steps} steps x {a.repeat}")
    print(f"bare torchft DiLoCo loop : median step {b * 1e3:.2f} ms ({len(bare)} steps)")
    print(f"ftrun train --profile none: median step {o * 1e3:.2f} ms ({len(ours)} steps)")
    print(f"ratio ftrun / bare       : {o / b:.3f}x (goal <= 1.05x)")


if __name__ == "__main__":
    main()
