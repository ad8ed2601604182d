#!/usr/bin/env python3
"""ftrun's cost per training step, next to a bare torchft DiLoCo loop of the same model.

Runs, in the same invocation and on the same machine, ``--repeat`` times, interleaved:
  1. bare: a torchft lighthouse + R replica processes, each a plain loop of Manager +
     DiLoCo + AdamW/Nesterov over the same model, data, schedule and thread count — no ftrun
     worker, no recorder, no profiler, no TensorBoard;
  2. ftrun: ``ftrun train --profile none`` with the same settings.

What is timed: whole loops. Each side stamps the wall clock once per step, after everything
the loop does for that step (ftrun: after the step body, the quorum probe, the event-log record
— its ``t`` field — so its own per-step work, event-log line, TensorBoard scalars, progress
file, is inside the interval between two stamps). ms/step = (stamp of the last step − stamp of
step W) / (N − W), per replica, then the mean over replicas; W = 10 warm-up steps (the first
quorum waits for the other replicas to start, which the two sides sequence differently). Per
repeat and side one figure; the report is the median over repeats. Goal: ratio 1.00-1.02 (ftrun
does strictly more per step than the bare loop). A ratio below ``VALID_FROM`` (0.98) means the
two sides did not do the same work, or the machine's load moved between them: the benchmark
says so, marks the JSON ``"valid": false`` and exits 1.
It also prints ftrun's per-step time outside the step body (loop time per step minus the
event log's mean ``step_time_s``): the bookkeeping the bare loop does not have, which on a
loaded machine is a steadier figure than the ratio of two wall times.

Same conditions as ftrun's: each bare replica runs in its own session (``start_new_session``),
as ftrun starts each group; its lighthouse has ftrun's settings (``min_replicas``, heartbeat
timeout, join timeout, quorum tick, from the same config); the replicas start their loops at a
start line once every Manager is up (ftrun's ``start_line``), so the first quorum does not wait
for a replica still importing torch. With the kernel's autogroup scheduling (``sched_autogroup_enabled``)
a session is one scheduling group, so on a loaded machine two replicas sharing one session get
half the CPU that two sessions get: without this the bare loop measured ~2x slower than ftrun.

The last line of output is one JSON object:
``{"bare_ms_per_step", "ftrun_ms_per_step", "ratio", "repeats", "valid"}``. Before it, the
per-step distributions of both sides (10th/50th/90th percentile of the whole-loop step), which
tell a difference in the work (every percentile moves) from one in contention (only the tail).

``--sketches``: instead, the numeric check's cost (``ftrun.worker.sketch``): ``ftrun train`` with
sketches on vs ``--no-sketches``, whole loop as above, interleaved, for the default model
(``--steps``, ``--repeat``) and one of ``LARGE`` (~103 M parameters; ``--large-steps``,
``--large-repeat``, ``--large-steps 0`` skips it; batch 1 x 16 tokens so a step stays ~1 s on 2
cores). Besides the whole-loop ratio, one steadier under load: what the send and sync steps
took beyond the run's own median plain step (the only steps the sketches work in), on vs off,
per step of the off loop. Also, in this process,
the sketch work of one sync on the same fragment tensors (contribution, SUM, average, globals:
what the hooks do), as a share of the w = H/F steps between two syncs — steadier than a ratio
of two wall times on a loaded machine. Goal: ratio <= 1.01. Last line: ``{"sketches": [...]}``.

Usage: python scripts/bench_overhead.py [--steps 120] [--replicas 2] [--repeat 3] [--sketches]
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
    from ftrun.worker.models import build_fragments, build_model

    torch.set_num_threads(threads_for(replicas))
    torch.manual_seed(cfg["seed"])
    model = build_model(cfg)
    frags = build_fragments(model, cfg)
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
    ready = Path(out).parent / "ready"
    ready.mkdir(exist_ok=True)
    (ready / str(replica)).touch()
    while len(list(ready.iterdir())) < replicas:  # ftrun's start_line: every Manager is up
        time.sleep(0.005)
    stamps = []
    with DiLoCo(
        manager, frags, inner, outer, sync_every=cfg["sync_every"], fragment_sync_delay=cfg["fragment_sync_delay"]
    ):
        for _ in range(cfg["steps"]):
            x, y = data.next()  # as ftrun's worker: data + forward/backward + step (+ DiLoCo hook)
            inner.zero_grad()
            F.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
            inner.step()
            stamps.append(time.time())
    Path(out).write_text(json.dumps(stamps))
    manager.shutdown(wait=False)
    os._exit(0)


WARMUP = 10
VALID_FROM = 0.98  # ftrun cannot be faster than the loop it adds work to: below this the comparison is invalid
BOOKKEEPING: list[float] = []  # ftrun's per-step time outside the step body, ms, per repeat
# per run: ms per step that the send and sync steps took beyond the run's own median plain step
# (the sketches work only in those steps; a load that slows every step alike cancels out)
SYNC_EXCESS: list[float] = []
PLAIN: list[float] = []  # per run: its median plain step, ms
STEPS: dict[str, list[float]] = {"bare": [], "ftrun": []}  # every whole-loop step after the warm-up, ms


def threads_for(replicas: int) -> int:
    """What ``ftrun train`` gives each rank: the cores shared out."""
    from ftrun.launch.placement import threads_per_rank

    return threads_per_rank(replicas)


def ms_per_step(stamps: list[float]) -> float:
    """Whole-loop time per step after the warm-up: (last stamp - stamp of step W) / (N - W)."""
    if len(stamps) <= WARMUP:
        raise SystemExit(f"bench_overhead: need more than {WARMUP} steps, got {len(stamps)}")
    return (stamps[-1] - stamps[WARMUP - 1]) / (len(stamps) - WARMUP) * 1e3


def run_bare(cfg: dict, replicas: int) -> float:
    from ftrun.launch.groups import free_port
    from ftrun.launch.lighthouse import lighthouse_argv

    port = free_port()
    # ftrun's lighthouse: start_lighthouse's defaults and the config's min_replicas and heartbeat timeout
    argv = lighthouse_argv(f"127.0.0.1:{port}", cfg["min_replicas"], 10000, 100, cfg["heartbeat_timeout_ms"])
    lh = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    tmp = tempfile.mkdtemp()
    outs = [f"{tmp}/r{r}.json" for r in range(replicas)]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads_for(replicas))}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--worker",
                str(r),
                "--replicas",
                str(replicas),
                "--lighthouse",
                f"http://127.0.0.1:{port}",
                "--cfg",
                json.dumps(cfg),
                "--out",
                outs[r],
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        for r in range(replicas)
    ]
    try:
        for p in procs:
            p.wait(timeout=600)
    finally:
        for p in procs:
            p.kill() if p.poll() is None else None
        lh.kill()
        lh.wait()
    stamps = [json.loads(Path(o).read_text()) for o in outs]
    STEPS["bare"] += [(b - a) * 1e3 for st in stamps for a, b in zip(st[WARMUP - 1 :], st[WARMUP:], strict=False)]
    return statistics.mean(ms_per_step(st) for st in stamps)


def run_ftrun(cfg: dict, replicas: int, extra: tuple[str, ...] = ()) -> float:
    out = tempfile.mkdtemp()
    cmd = [
        sys.executable,
        "-m",
        "ftrun",
        "train",
        "--profile",
        "none",
        "--replicas",
        str(replicas),
        "--steps",
        str(cfg["steps"]),
        "--out",
        out,
        "--run-name",
        "bench",
        "--json",
        "--fragments",
        str(cfg["fragments"]),
        "--sync-every",
        str(cfg["sync_every"]),
        "--fragment-sync-delay",
        str(cfg["fragment_sync_delay"]),
        *extra,
    ]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    per_replica, outside = [], []
    for r in range(replicas):
        recs = [
            json.loads(line)
            for line in (Path(out) / "bench" / "events" / f"replica{r}_rank0.jsonl").read_text().splitlines()
        ]
        recs = [x for x in recs if x.get("step")]
        loop = ms_per_step([x["t"] for x in recs])
        STEPS["ftrun"] += [(b["t"] - a["t"]) * 1e3 for a, b in zip(recs[WARMUP - 1 :], recs[WARMUP:], strict=False)]
        per_replica.append(loop)
        # what the bare loop does not do: the loop's time per step minus the step body's
        outside.append(loop - statistics.mean(x["step_time_s"] for x in recs[WARMUP:]) * 1e3)
    BOOKKEEPING.append(statistics.mean(outside))
    excess, plain_ms = [], []
    for r in range(replicas):
        recs = [
            json.loads(line)
            for line in (Path(out) / "bench" / "events" / f"replica{r}_rank0.jsonl").read_text().splitlines()
        ]
        recs = [x for x in recs if x.get("step")][WARMUP:]
        plain = statistics.median(x["step_time_s"] for x in recs if x["sent"] is None and x["synced"] is None)
        busy = [x["step_time_s"] for x in recs if x["sent"] is not None or x["synced"] is not None]
        excess.append((sum(busy) - len(busy) * plain) / len(recs) * 1e3)
        plain_ms.append(plain * 1e3)
    SYNC_EXCESS.append(statistics.mean(excess))
    PLAIN.append(statistics.mean(plain_ms))
    return statistics.mean(per_replica)


# ~103 M parameters (TokenModel mlp, 6 blocks of width 2048), small batch: a CPU step of ~1 s
LARGE = {"width": 2048, "blocks": 6, "batch_size": 1, "seq_len": 16}


def sketch_cost_ms(cfg: dict) -> tuple[float, int]:
    """In this process: ms of sketch work for one sync of fragment 0 (the hooks' four sketches of
    its tensors) and the fragment's elements."""
    import torch

    from ftrun.worker.models import build_fragments, build_model
    from ftrun.worker.sketch import Builder, Projector

    torch.set_num_threads(threads_for(2))
    model = build_model(cfg)
    tensors = [p.detach() for p in build_fragments(model, cfg)[0].parameters()]
    proj = Projector()
    times = []
    for _ in range(7):  # the least of 7: other load only ever adds time
        t0 = time.perf_counter()
        for norm in (True, False, False, False):  # contribution (with its norm), SUM, average, globals: as the hooks
            b = Builder(proj, norm=norm)
            for t in tensors:
                b.add(t)
            b.sketch()
        times.append((time.perf_counter() - t0) * 1e3)
    return min(times), sum(t.numel() for t in tensors)


def sketch_bench(base: dict, replicas: int, steps: int, repeat: int, label: str, extra: tuple[str, ...]) -> dict:
    cfg = {**base, "steps": steps}
    on, off, ex_on, ex_off, plain_off = [], [], [], [], []
    for i in range(repeat):  # interleaved, alternating who goes first
        for side in ("on", "off") if i % 2 == 0 else ("off", "on"):
            if side == "on":
                on.append(run_ftrun(cfg, replicas, extra))
                ex_on.append(SYNC_EXCESS[-1])
            else:
                off.append(run_ftrun(cfg, replicas, (*extra, "--no-sketches")))
                ex_off.append(SYNC_EXCESS[-1])
                plain_off.append(PLAIN[-1])
        print(f"{label} repeat {i + 1}: sketches on {on[-1]:.2f} ms/step, off {off[-1]:.2f} ms/step", flush=True)
    o, f = statistics.median(on), statistics.median(off)
    extra_ms = statistics.median(ex_on) - statistics.median(ex_off)
    corrected = 1 + extra_ms / statistics.median(off)
    print(
        f"{label}: send/sync steps beyond the plain step, per step: on {statistics.median(ex_on):.2f} ms, off "
        f"{statistics.median(ex_off):.2f} ms -> {extra_ms:+.2f} ms per step = {corrected:.4f}x of the off loop "
        f"(plain steps: median {statistics.median(plain_off):.2f} ms off)"
    )
    cost, numel = sketch_cost_ms(cfg)
    window = cfg["sync_every"] // cfg["fragments"]
    print(
        f"{label}: sketches on {o:.2f} / off {f:.2f} ms per step = {o / f:.4f}x (goal <= 1.01x); "
        f"sketch work per sync (fragment 0, {numel:,} elements, in-process) {cost:.1f} ms = "
        f"{cost / (window * f) * 100:.2f}% of the {window} steps between syncs"
    )
    return {
        "model": label,
        "params_per_fragment": numel,
        "steps": steps,
        "repeats": repeat,
        "on_ms_per_step": round(o, 3),
        "off_ms_per_step": round(f, 3),
        "ratio": round(o / f, 4),
        "sync_step_excess_ratio": round(corrected, 4),
        "ratios_per_repeat": [round(a / b, 4) for a, b in zip(on, off, strict=False)],
        "sketch_ms_per_sync": round(cost, 2),
        "sketch_share_of_window": round(cost / (window * f), 5),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--sketches", action="store_true", help="Measure the numeric check's sketches: on vs --no-sketches."
    )
    ap.add_argument("--large-steps", type=int, default=40)
    ap.add_argument("--large-repeat", type=int, default=1)
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--lighthouse", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--cfg", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker is not None:
        bare_worker(a.worker, a.replicas, a.lighthouse, json.loads(a.cfg), a.out)
        return
    from ftrun.config import build

    cfg = {**build(steps=a.steps, profile="none").resolved(), "replicas": a.replicas}
    if a.repeat < 1 or a.steps <= WARMUP:
        raise SystemExit(f"bench_overhead: need --repeat >= 1 and --steps > {WARMUP}")
    if a.sketches:
        rows = [sketch_bench(cfg, a.replicas, a.steps, a.repeat, "default", ())]
        large = {**cfg, **LARGE}
        if a.large_steps > WARMUP:
            rows.append(
                sketch_bench(
                    large,
                    a.replicas,
                    a.large_steps,
                    a.large_repeat,
                    "large",
                    tuple(x for k, v in LARGE.items() for x in (f"--{k.replace('_', '-')}", str(v))),
                )
            )
        print(json.dumps({"sketches": rows}))
        return
    bare, ours = [], []
    print(
        f"machine: {os.cpu_count()} cores; model {cfg['model']} width {cfg['width']} blocks {cfg['blocks']}; "
        f"F={cfg['fragments']} H={cfg['sync_every']} tau={cfg['fragment_sync_delay']}; "
        f"{a.replicas} replicas x {a.steps} steps x {a.repeat}, "
        f"{threads_for(a.replicas)} threads per rank",
        flush=True,
    )
    for i in range(a.repeat):  # interleaved (and alternating who goes first), so drift in load hits both
        for side in ("bare", "ftrun") if i % 2 == 0 else ("ftrun", "bare"):
            if side == "bare":
                bare.append(run_bare(cfg, a.replicas))
            else:
                ours.append(run_ftrun(cfg, a.replicas))
        print(
            f"repeat {i + 1}: bare {bare[-1]:.2f} ms/step, ftrun {ours[-1]:.2f} ms/step "
            f"(load average {os.getloadavg()[0]:.1f})",
            flush=True,
        )
    b, o = statistics.median(bare), statistics.median(ours)
    print(f"bare torchft DiLoCo loop  : median {b:.2f} ms per step (whole loop, steps {WARMUP + 1}..{a.steps})")
    print(f"ftrun train --profile none: median {o:.2f} ms per step")
    ratio = o / b
    valid = ratio >= VALID_FROM
    print(f"ratio ftrun / bare        : {ratio:.3f}x (goal 1.00-1.02x)")
    print(
        f"ftrun per-step work outside the step body (event log, TensorBoard, progress, probes): median "
        f"{statistics.median(BOOKKEEPING):.3f} ms per step "
        f"({statistics.median(BOOKKEEPING) / o * 100:.2f}% of its step)"
    )
    quantiles = {}
    for side in ("bare", "ftrun"):
        xs = sorted(STEPS[side])
        quantiles[side] = [xs[int(q * (len(xs) - 1))] for q in (0.1, 0.25, 0.5, 0.9)]
        p10, p25, p50, p90 = quantiles[side]
        print(
            f"{side:5} whole-loop step, ms: p10 {p10:.2f}  p25 {p25:.2f}  p50 {p50:.2f}  p90 {p90:.2f}  "
            f"({len(xs)} steps)"
        )
    print(
        "ratio of the fast steps (p25, where other load rarely reaches): "
        f"{quantiles['ftrun'][1] / quantiles['bare'][1]:.3f}x"
    )
    if not valid:
        print(
            f"INVALID comparison: ftrun measured {ratio:.3f}x the bare loop (< {VALID_FROM}): it does strictly "
            "more per step, so the two sides did not run the same work, or the load on the machine changed between them"
        )
    print(
        json.dumps(
            {
                "bare_ms_per_step": round(b, 3),
                "ftrun_ms_per_step": round(o, 3),
                "ratio": round(ratio, 4),
                "repeats": a.repeat,
                "valid": valid,
            }
        )
    )
    if not valid:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
