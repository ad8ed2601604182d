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
Threads (``torch.set_num_threads`` and ``OMP_NUM_THREADS``: the cores shared out, as ftrun's
launcher) and glibc's malloc thresholds (``ftrun.worker.malloc``, as ftrun's worker) are ftrun's.
The benchmark's own reads of each side's processes in /proc while it trains (``SAMPLE_S``) are made
on both sides alike.

The fastest honest bare loop: ``--knobs all`` (or comma-separated substrings of ``BARE_KNOBS``)
runs variations of the bare loop against it, paired per repeat: every core per rank, OMP's own
thread count, batches generated before the loop, ``gc.freeze()``/gc off, glibc's default malloc
thresholds; wall ms/step and CPU ms/step per rank, each as a ratio to the plain bare loop. What
made it faster and ftrun can do too is done on both sides (the malloc thresholds); what changes
the work (batches made before the loop: data is part of a step) is reported, not applied. One
knob is not a way to go faster but ftrun's process layout, to tell its cost apart: the bare loop
under a torchrun agent per replica (``--knobs torchrun``).

Where ftrun's extra time is, from the same runs: (1) each side's whole loop per step split
exactly into its median plain step + what its plain steps took beyond that + what its send/sync
steps took beyond that (``breakdown``), ftrun - bare per part; (2) CPU ms per step: per rank
(bare: ``time.process_time`` at every step; ftrun: its process tree read from ``/proc`` every
``SAMPLE_S`` between the warm-up and the last step), each side's lighthouse read the same way
over its loop's window, and ftrun's other processes (torchrun agents, the parent),
load-independent where wall time is not; the all-process CPU ratio also paired per repeat, with
its interval and verdict (``paired_cpu_ratio``): CPU time does not wait for a core, so it
resolves a small difference on a machine whose wall time moves by 10% a run; (3) ftrun's own per-step work
timed alone in this process with the worker's code (``per_step_costs_ms``: sketches,
fingerprint, event-log line, armed recovery profiling; a lower bound, on a warm cache) and each
timed right after a training step of the model, as the rank runs it (``per_step_costs_after_a_step_ms``).

The last line of output is one JSON object: ``bare_ms_per_step``, ``ftrun_ms_per_step``,
``ratio`` (whole loop, ftrun with its defaults: sketches and recovery profiling on, stated in
``ftrun_sketches``/``ftrun_profile_recovery`` from the run's spec), ``ratios_per_repeat``,
``paired_ratio`` (those ratios' geometric mean, its 95% t-interval, and whether that interval
says the goal is met, missed or not resolved by this many repeats on this machine: a run's
noise, not ftrun, decides a ratio whose interval straddles 1.00 or 1.02),
``p25_ratio``/``p50_ratio``, ``breakdown_ms_per_step``, ``outside_step_body_ms_per_step``,
``plain_step_body_ms`` (ftrun's median plain ``step_time_s``, the body alone, vs the bare median plain step),
``cpu_ms_per_step``, ``cpu_ratio_all_processes``, ``cpu_ratios_per_repeat``,
``paired_cpu_ratio`` (as ``paired_ratio``, of the all-process CPU), ``per_step_costs_ms``,
``per_step_costs_after_a_step_ms``, ``repeats``, ``load_average`` (per repeat), ``valid`` and
``invalid`` (ratio below ``VALID_FROM``). Before it,
the per-step distributions of both sides (10th/25th/50th/90th percentile of the whole-loop
step), which tell a difference in the work (every percentile moves) from contention (the tail).

``--sketches``: instead, the numeric check's cost (``ftrun.worker.sketch``): ``ftrun train`` with
sketches on vs ``--no-sketches``, whole loop as above, interleaved, for the default model
(``--steps``, ``--repeat``) and one of ``LARGE`` (~103 M parameters; ``--large-steps``,
``--large-repeat``, ``--large-steps 0`` skips it; batch 1 x 16 tokens so a step stays ~1 s on 2
cores). Besides the whole-loop ratio, one steadier under load: what the send and sync steps
took beyond the run's own median plain step (the only steps the sketches work in), on vs off,
per step of the off loop. Also, in this process,
the sketch work of one sync on the same fragment tensors (contribution, SUM, average: what the
hooks do), as a share of the w = H/F steps between two syncs — steadier than a ratio
of two wall times on a loaded machine. Goal: ratio <= 1.01. Last line: ``{"sketches": [...]}``.

``--concurrent``: instead, both sides at the same time on the same cores, each repeat's ratio from
the steps both took in the same seconds (``concurrent_bench``: on a machine whose cores' speed
moves between runs a minute apart, the only pairing that sees one speed). Last line:
``{"mode": "concurrent", "paired_ratio": ..., "ratios_per_repeat": ...}``.

Usage: python scripts/bench_overhead.py [--steps 120] [--replicas 2] [--repeat 3]
       [--sketches | --knobs all | --concurrent]
"""

from __future__ import annotations

import argparse
import json
import math
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
    """One replica group of the bare loop (rank 0 of a group of 1). ``cfg["knobs"]``: the
    variations ``--knobs`` measures (``BARE_KNOBS``); none = ftrun's conditions."""
    import gc
    from datetime import timedelta

    import torch
    import torch.nn.functional as F
    import torchft
    from torchft.local_sgd import DiLoCo

    from ftrun.worker.data import Batches
    from ftrun.worker.models import build_fragments, build_model

    knobs = cfg.get("knobs", {})
    if knobs.get("malloc", True):  # as ftrun's worker (ftrun.worker.malloc)
        from ftrun.worker.malloc import fix_malloc_thresholds

        fix_malloc_thresholds()
    torch.set_num_threads(knobs.get("threads", threads_for(replicas)))
    torch.manual_seed(cfg["seed"])
    model = build_model(cfg)
    frags = build_fragments(model, cfg)
    inner = torch.optim.AdamW(model.parameters(), lr=cfg["inner_lr"])
    outer = [  # as ftrun.worker.setup.build_training
        torch.optim.SGD(f.parameters(), lr=cfg["outer_lr"], momentum=cfg["outer_momentum"], nesterov=True)
        for f in frags
    ]
    data = Batches("synthetic", cfg["vocab"], cfg["seq_len"], cfg["batch_size"], cfg["seed"], replica)
    batches = [data.next() for _ in range(cfg["steps"])] if knobs.get("pregen") else None
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
    if knobs.get("gc") == "freeze":  # what set-up allocated is never traversed again
        gc.collect()
        gc.freeze()
    elif knobs.get("gc") == "off":
        gc.disable()
    ready = Path(out).parent / "ready"
    ready.mkdir(exist_ok=True)
    (ready / str(replica)).touch()
    while len(list(ready.iterdir())) < replicas:  # ftrun's start_line: every Manager is up
        time.sleep(0.005)
    stamps: list[float] = []
    cpu: list[float] = []
    with DiLoCo(
        manager, frags, inner, outer, sync_every=cfg["sync_every"], fragment_sync_delay=cfg["fragment_sync_delay"]
    ):
        for i in range(cfg["steps"]):
            # as ftrun's worker: data + forward/backward + step (+ DiLoCo hook)
            x, y = batches[i] if batches is not None else data.next()
            inner.zero_grad()
            F.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
            inner.step()
            stamps.append(time.time())
            cpu.append(time.process_time())  # every thread of the rank: torchft's, Gloo's too
    Path(out).write_text(json.dumps({"t": stamps, "cpu": cpu}))
    manager.shutdown(wait=False)
    os._exit(0)


# ``--knobs``: what a careful engineer would try to make the bare loop faster, each against the
# plain bare loop (ftrun's conditions) in the same invocation. In-process knobs go to the worker
# (``cfg["knobs"]``), environment knobs to its environment (``env``: None = unset the variable).
BARE_KNOBS: dict[str, dict] = {
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


WARMUP = 10
VALID_FROM = 0.98  # ftrun cannot be faster than the loop it adds work to: below this the comparison is invalid
BOOKKEEPING: list[float] = []  # ftrun's per-step time outside the step body, ms, per repeat
# per run: ms per step that the send and sync steps took beyond the run's own median plain step
# (the sketches work only in those steps; a load that slows every step alike cancels out)
SYNC_EXCESS: list[float] = []
PLAIN: list[float] = []  # per run: its median plain step, ms
STEPS: dict[str, list[float]] = {"bare": [], "ftrun": []}  # every whole-loop step after the warm-up, ms
# per side, per run: CPU ms per step by process role ("rank": per rank; the others: in all)
CPU: dict[str, list[dict[str, float]]] = {"bare": [], "ftrun": []}
CPU_KNOBS: list[float] = []  # per --knobs run: the bare rank's CPU ms per step
LAST_RUN: dict = {}  # the last default ftrun run: its spec's profiling settings, an event log
# per side, per run: its steps after the warm-up, (whole-loop interval ms, a send/sync step?)
INTERVALS: dict[str, list[list[tuple[float, bool]]]] = {"bare": [], "ftrun": []}
LAST_STAMPS: dict[str, list[list[float]]] = {}  # per side, the last run's step stamps (unix s) per replica


def threads_for(replicas: int) -> int:
    """What ``ftrun train`` gives each rank: the cores shared out."""
    from ftrun.launch.placement import threads_per_rank

    return threads_per_rank(replicas)


def ms_per_step(stamps: list[float]) -> float:
    """Whole-loop time per step after the warm-up: (last stamp - stamp of step W) / (N - W)."""
    if len(stamps) <= WARMUP:
        raise SystemExit(f"bench_overhead: need more than {WARMUP} steps, got {len(stamps)}")
    return (stamps[-1] - stamps[WARMUP - 1]) / (len(stamps) - WARMUP) * 1e3


def window_ms_per_step(samples: list[tuple[float, float]], stamps: list[float]) -> float:
    """CPU ms per step of a process read every ``SAMPLE_S`` (``samples``: (unix time, CPU s)) over
    the loop's window of ``ms_per_step`` (``stamps``: one replica's step stamps): the reads just
    inside the window, per step between them. Like the ftrun side's ``TreeCpu``, in clock ticks."""
    t0, t1 = stamps[WARMUP - 1], stamps[-1]
    inside = [(t, c) for t, c in samples if t0 <= t <= t1]
    if len(inside) < 2:
        return float("nan")
    (ta, ca), (tb, cb) = inside[0], inside[-1]
    steps = (tb - ta) / (t1 - t0) * (len(stamps) - WARMUP)  # the window's steps between the two reads
    return (cb - ca) / steps * 1e3


def all_processes_ms(cpu: dict[str, float], replicas: int) -> float:
    """CPU ms per training step of every process of one run: its ranks and the others (lighthouse,
    ftrun's agents and parent)."""
    return replicas * cpu["rank"] + sum(v for r, v in cpu.items() if r != "rank" and not math.isnan(v))  # nan: unread


def busy_step(step: int, cfg: dict) -> bool:
    """Is training step ``step`` (1-based) one where DiLoCo sends or syncs a fragment? Its
    ``local_step`` reaches w - tau (send) and w (sync) every w = H / F steps (torchft-notes)."""
    w = cfg["sync_every"] // cfg["fragments"]
    return step % w in ((w - cfg["fragment_sync_delay"]) % w, 0)


def breakdown(run: list[tuple[float, bool]]) -> dict[str, float]:
    """One run's whole-loop ms per step, split exactly: ``plain`` (the median plain step) +
    ``plain_tail`` (what plain steps took beyond it, per step: the slow ones) + ``sync_excess``
    (what send/sync steps took beyond it, per step)."""
    plain = statistics.median(d for d, busy in run if not busy)
    n = len(run)
    return {
        "plain": plain,
        "plain_tail": sum(d - plain for d, busy in run if not busy) / n,
        "sync_excess": sum(d - plain for d, busy in run if busy) / n,
    }


# How often each side's process tree is read from /proc while it trains: the benchmark's own load,
# put on both sides alike (the bare side's processes are read as often; its ranks' CPU comes from
# the ranks themselves). A read of ftrun's tree: ~0.1 ms CPU (the event logs' new bytes only: a
# re-read of whole logs made it ~1 ms, 10 ms a second taken from the ftrun side alone).
SAMPLE_S = 0.1
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float | None:
    """utime + stime of ``pid``, seconds (every thread); None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    f = stat[stat.rindex(")") + 2 :].split()
    return (int(f[11]) + int(f[12])) / CLK_TCK


def role(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "gone"
    text = b" ".join(argv)
    for needle, name in (
        (b"torch.distributed.run", "torchrun agent"),  # its argv names the rank's module too
        (b"ftrun.worker.main", "rank"),
        (b"lighthouse", "lighthouse"),
        (b"ftrun.launch.reaper", "reaper"),
        (b"tensorboard", "tensorboard"),
    ):
        if needle in text:
            return name
    return "ftrun parent" if b"-m ftrun train" in text or b"ftrun train" in text else "other"


class TreeCpu:
    """CPU time of every process of one ``ftrun train``, between the first read at which every
    rank has logged the warm-up steps and the last read before the first rank's last step: CPU ms
    per training step by role (ranks: per rank). Steps from the event logs' complete lines."""

    def __init__(self, root: int, logs: list[Path], replicas: int) -> None:
        self.root, self.logs, self.replicas = root, logs, replicas
        self.roles: dict[int, str] = {}
        self.first: tuple[float, dict[int, float]] | None = None
        self.last: tuple[float, dict[int, float]] | None = None
        self._lines = [0] * len(logs)  # complete lines of each log so far, read up to ``_read``
        self._read = [0] * len(logs)

    def steps(self) -> float | None:
        """Mean complete lines of the event logs (each read from where the last call stopped)."""
        try:
            for i, x in enumerate(self.logs):
                with x.open("rb") as f:
                    f.seek(self._read[i])
                    new = f.read()
                self._read[i] += len(new)
                self._lines[i] += new.count(b"\n")
        except OSError:
            return None
        return statistics.mean(self._lines)

    def sample(self, total: int) -> None:
        from ftrun.launch.procs import descendants

        if list(self.roles.values()).count("rank") < self.replicas:
            self.roles = {p: role(p) for p in [self.root, *descendants(self.root)]}
            return
        steps = self.steps()
        if steps is None or steps < WARMUP:
            return
        cpu = {p: c for p in self.roles if (c := cpu_s(p)) is not None}
        if len(cpu) < len(self.roles) or steps >= total - 1:
            return  # a process ended (or the run is ending): the loop is over
        if self.first is None:
            self.first = (steps, cpu)
        else:
            self.last = (steps, cpu)

    def per_step(self) -> dict[str, float]:
        if self.first is None or self.last is None or self.last[0] <= self.first[0]:
            return {}
        n = self.last[0] - self.first[0]
        out: dict[str, float] = {}
        for p, r in self.roles.items():
            out[r] = out.get(r, 0.0) + (self.last[1][p] - self.first[1][p]) / n * 1e3
        out["rank"] = out.get("rank", 0.0) / self.replicas
        return out


def run_bare(cfg: dict, replicas: int, variant: dict | None = None) -> float:
    """One bare run (``variant``: a ``BARE_KNOBS`` entry, None = ftrun's conditions); ms/step."""
    from ftrun.launch.groups import free_port
    from ftrun.launch.lighthouse import lighthouse_argv

    variant = variant or {}
    cfg = {**cfg, "knobs": variant.get("knobs", {})}
    port = free_port()
    # ftrun's lighthouse: start_lighthouse's defaults and the config's min_replicas and heartbeat timeout
    argv = lighthouse_argv(f"127.0.0.1:{port}", cfg["min_replicas"], 10000, 100, cfg["heartbeat_timeout_ms"])
    lh = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    tmp = tempfile.mkdtemp()
    outs = [f"{tmp}/r{r}.json" for r in range(replicas)]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads_for(replicas))}  # as ftrun's launcher sets it
    for k, v in variant.get("env", {}).items():
        env.pop(k, None) if v is None else env.__setitem__(k, v)
    launcher: list[str] = []
    if variant.get("launcher") == "torchrun":
        from ftrun.launch.groups import torchrun_argv

        launcher = torchrun_argv(1)[1:]  # python -m torch.distributed.run ... SCRIPT ARGS
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                *launcher,
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
    lighthouse_cpu: list[tuple[float, float]] = []  # (unix time, its CPU s): read as the ftrun side's is
    try:
        deadline = time.monotonic() + 600
        while any(p.poll() is None for p in procs):  # with the ftrun side's reads of /proc (SAMPLE_S)
            if time.monotonic() > deadline:
                raise SystemExit("bench_overhead: a bare replica ran for more than 600 s")
            if (c := cpu_s(lh.pid)) is not None:
                lighthouse_cpu.append((time.time(), c))
            for p in procs:
                cpu_s(p.pid)
            time.sleep(SAMPLE_S)
    finally:
        for p in procs:
            p.kill() if p.poll() is None else None
        lh.kill()
        lh.wait()
    got = [json.loads(Path(o).read_text()) for o in outs]
    stamps = [g["t"] for g in got]
    LAST_STAMPS["bare"] = stamps
    if not variant:
        CPU["bare"].append(
            {
                "rank": statistics.mean(ms_per_step(g["cpu"]) for g in got),
                "lighthouse": window_ms_per_step(lighthouse_cpu, stamps[0]),
            }
        )
    else:
        CPU_KNOBS.append(statistics.mean(ms_per_step(g["cpu"]) for g in got))
    if not variant:
        STEPS["bare"] += [(b - a) * 1e3 for st in stamps for a, b in zip(st[WARMUP - 1 :], st[WARMUP:], strict=False)]
        INTERVALS["bare"] += [
            [((st[i] - st[i - 1]) * 1e3, busy_step(i + 1, cfg)) for i in range(WARMUP, len(st))] for st in stamps
        ]
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
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    logs = [Path(out) / "bench" / "events" / f"replica{r}_rank0.jsonl" for r in range(replicas)]
    cpu = TreeCpu(proc.pid, logs, replicas)
    while proc.poll() is None:
        cpu.sample(cfg["steps"])
        time.sleep(SAMPLE_S)
    if proc.returncode:
        raise SystemExit(f"bench_overhead: ftrun train exited {proc.returncode}: {' '.join(cmd)}")
    if not extra:
        CPU["ftrun"].append(cpu.per_step())
    if not extra:  # what the timed run had on: its spec's profiling settings (ftrun's defaults)
        LAST_RUN["profiling"] = json.loads((Path(out) / "bench" / "spec.json").read_text())["config"]["profiling"]
        LAST_RUN["events"] = Path(out) / "bench" / "events" / "replica0_rank0.jsonl"
    per_replica, outside = [], []
    LAST_STAMPS["ftrun"] = []
    for r in range(replicas):
        recs = [
            json.loads(line)
            for line in (Path(out) / "bench" / "events" / f"replica{r}_rank0.jsonl").read_text().splitlines()
        ]
        recs = [x for x in recs if x.get("step")]
        LAST_STAMPS["ftrun"].append([x["t"] for x in recs])
        loop = ms_per_step([x["t"] for x in recs])
        STEPS["ftrun"] += [(b["t"] - a["t"]) * 1e3 for a, b in zip(recs[WARMUP - 1 :], recs[WARMUP:], strict=False)]
        if not extra:
            INTERVALS["ftrun"].append(
                [
                    ((b["t"] - a["t"]) * 1e3, b["sent"] is not None or b["synced"] is not None)
                    for a, b in zip(recs[WARMUP - 1 :], recs[WARMUP:], strict=False)
                ]
            )
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
    """In this process: ms of sketch work for one sync of fragment 0 (the hooks' three sketches of
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
        # contribution (with its norm, copied: the collective changes it), the SUM in place at the sync
        # (the CPU path, ``NumericsProbe.sums_first``), average: as the hooks
        for norm, copy in ((True, True), (False, False), (False, False)):
            b = Builder(proj, norm=norm, copy=copy)
            for t in tensors:
                b.add(t)
            b.sketch()
        times.append((time.perf_counter() - t0) * 1e3)
    return min(times), sum(t.numel() for t in tensors)


def per_step_costs_ms(cfg: dict, events: Path) -> dict[str, float]:
    """In this process, with the worker's own code: ms per training step of each piece of work
    ftrun's rank does that the bare loop does not (a send/sync step's work spread over the w steps
    between syncs). ``events``: an event log of the run, whose records are re-encoded as the
    worker writes them. A lower bound of each cost: timed alone, on a warm cache."""
    import msgspec
    import torch

    from ftrun.layout import EventRecord
    from ftrun.worker.models import build_fragments, build_model
    from ftrun.worker.profiling import AroundFault
    from ftrun.worker.recorder import StepRecorder, fingerprint

    torch.set_num_threads(threads_for(2))
    w = cfg["sync_every"] // cfg["fragments"]
    frags = build_fragments(build_model(cfg), cfg)

    def best_ms(fn, n: int = 5) -> float:
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return min(times)

    sketch_ms, _ = sketch_cost_ms(cfg)  # fragment 0's three sketches, one sync
    fp_ms = statistics.mean(best_ms(lambda f=f: fingerprint(dict(f.named_parameters()))) for f in frags)
    lines = events.read_bytes().splitlines()
    recs = [msgspec.json.decode(x, type=EventRecord) for x in lines]
    with tempfile.TemporaryDirectory() as tmp:  # written as the worker's StepRecorder writes them
        sink = StepRecorder(Path(tmp) / "events.jsonl")
        log_ms = best_ms(lambda: [sink.write(r) for r in recs]) / len(recs)
        sink.close()
    around = AroundFault([], 0, 0, events.parent, lambda k: False, give_up=2 * cfg["sync_every"])
    armed_ms = best_ms(lambda: [(around.at_step(k), around.after_step([], False)) for k in range(1000)]) / 1000
    return {
        "sketches (3 per sync, fragment 0), per step": sketch_ms / w,
        "fingerprint of the synced fragment, per step": fp_ms / w,
        "event-log line (encode + write), per step": log_ms,
        "recovery profiling armed, no fault, per step": armed_ms,
    }


def per_step_costs_after_a_step_ms(cfg: dict, events: Path) -> dict[str, float]:
    """The same pieces of work as ``per_step_costs_ms`` (the three sketches, the fingerprint, the
    event-log line), each timed as the rank runs it: right after a training step of the model (data,
    forward, backward, AdamW), which leaves the caches holding the step's data, not the work's; the
    median of ``N`` such. Measured in ftrun's rank (perf_counter around the work), a torch op after
    a step ran 3-15x slower than the same op repeated on a warm cache (a [4, 4093] float64 gemv 0.039
    vs 0.0026 ms, a 169 K-element float32-to-float64 cat 0.34 vs 0.076 ms): the warm figures above
    are a lower bound, these closer to what the rank pays."""
    import msgspec
    import torch

    from ftrun.layout import EventRecord
    from ftrun.worker.data import Batches
    from ftrun.worker.models import build_fragments, build_model
    from ftrun.worker.recorder import StepRecorder, fingerprint
    from ftrun.worker.setup import train_step
    from ftrun.worker.sketch import Builder, Projector

    n = 15
    torch.set_num_threads(threads_for(2))
    torch.manual_seed(cfg["seed"])
    model = build_model(cfg)
    frags = build_fragments(model, cfg)
    inner = torch.optim.AdamW(model.parameters(), lr=cfg["inner_lr"])
    data = Batches("synthetic", cfg["vocab"], cfg["seq_len"], cfg["batch_size"], cfg["seed"], 0)
    cpu = torch.device("cpu")
    w = cfg["sync_every"] // cfg["fragments"]

    def after_a_step(fn) -> float:
        times = []
        for _ in range(n):
            train_step(model, inner, data, cpu)
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    tensors = [p.detach() for p in frags[0].parameters()]
    proj = Projector()

    def one_sketch(norm: bool, copy: bool) -> None:
        b = Builder(proj, norm=norm, copy=copy)
        for t in tensors:
            b.add(t)
        b.sketch()

    # contribution (copied at issue, with its norm), SUM, average: the hooks' three, each after a step
    sketch_ms = sum(after_a_step(lambda a=a, c=c: one_sketch(a, c)) for a, c in ((True, True), *[(False, False)] * 2))
    fp_ms = statistics.mean(after_a_step(lambda f=f: fingerprint(dict(f.named_parameters()))) for f in frags)
    recs = [msgspec.json.decode(x, type=EventRecord) for x in events.read_bytes().splitlines()]
    with tempfile.TemporaryDirectory() as tmp:
        sink = StepRecorder(Path(tmp) / "events.jsonl")
        log_ms = after_a_step(lambda: sink.write(recs[len(recs) // 2]))
        sink.close()
    return {
        "sketches (3 per sync, fragment 0), per step": sketch_ms / w,
        "fingerprint of the synced fragment, per step": fp_ms / w,
        "event-log line (encode + write), per step": log_ms,
    }


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


MIN_OVERLAP = 30  # steps every replica of both sides must have taken inside the common window


def overlap_ms_per_step(sides: dict[str, list[list[float]]]) -> dict[str, float]:
    """``--concurrent``: each side's ms per step inside the window in which every replica of both
    sides was past its warm-up and none had finished (the mean over its replicas of the steps'
    time between their first and last stamp inside the window). SystemExit when a replica took
    fewer than ``MIN_OVERLAP`` steps in it (more ``--steps``)."""
    every = [st for runs in sides.values() for st in runs]
    t0 = max(st[WARMUP - 1] for st in every)
    t1 = min(st[-1] for st in every)
    out = {}
    for side, runs in sides.items():
        per = []
        for st in runs:
            inside = [t for t in st if t0 <= t <= t1]
            if len(inside) < MIN_OVERLAP + 1:
                raise SystemExit(
                    f"bench_overhead: the two sides overlapped for {len(inside)} step(s) of a {side} replica "
                    f"(need {MIN_OVERLAP}): give more --steps"
                )
            per.append((inside[-1] - inside[0]) / (len(inside) - 1) * 1e3)
        out[side] = statistics.mean(per)
    return out


def concurrent_bench(cfg: dict, replicas: int, repeat: int) -> None:
    """``--concurrent``: both sides at the same time on the same cores, ``repeat`` times, each
    repeat one ratio from the steps both took in the same seconds (``overlap_ms_per_step``).

    Why: on a machine whose cores' own speed moves by 10-40% between runs a minute apart (the bare
    loop here 30.8 -> 45.5 ms a step over six sequential repeats, its CPU time per step with it),
    two runs side by side in time cannot resolve 1%; two loops sharing the same seconds see the
    same core speed. What it measures: each rank gets its share of the cores (the kernel shares
    them out per session, and every rank of both sides has its own: torch elastic starts each
    rank in a new session, the bare loop its replicas), so a side's step time follows the CPU
    its ranks need per step. ftrun's other processes (torchrun agents, its parent: ~0.33 ms CPU
    a step in all, ``cpu_ms_per_step``) are sessions of their own too, so what they take slows
    both sides alike: this ratio leaves out up to ~0.5% that the sequential one counts. Not what
    a run on cores of its own measures either: about twice the step time, and a rank that waits
    for its peer gives the other side CPU; both sides' ranks wait alike."""
    import threading

    ratios, rows = [], []
    for i in range(repeat):
        errors: list[BaseException] = []

        def side(fn, errors: list[BaseException] = errors) -> None:
            try:
                fn(cfg, replicas)
            except BaseException as e:  # (a SystemExit in a thread would end only the thread)
                errors.append(e)

        # ftrun first: its parent and each agent start before its ranks import torch, a few s later
        threads = [threading.Thread(target=side, args=(fn,)) for fn in (run_ftrun, run_bare)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        ms = overlap_ms_per_step({k: LAST_STAMPS[k] for k in ("bare", "ftrun")})
        ratios.append(ms["ftrun"] / ms["bare"])
        rows.append({k: round(v, 3) for k, v in ms.items()})
        print(
            f"concurrent repeat {i + 1}: bare {ms['bare']:.2f} ms/step, ftrun {ms['ftrun']:.2f} ms/step, "
            f"ratio {ratios[-1]:.4f} (load average {os.getloadavg()[0]:.1f})",
            flush=True,
        )
    paired = paired_ratio(ratios)
    print(f"concurrent ratio ftrun / bare: {paired_text(paired, 4)} (goal {GOAL[0]:.2f}-{GOAL[1]:.2f}x)")
    on = LAST_RUN["profiling"]
    valid = paired["ratio"] >= VALID_FROM
    print(
        json.dumps(
            {
                "mode": "concurrent",
                "ms_per_step_per_repeat": rows,
                "ratios_per_repeat": [round(r, 4) for r in ratios],
                "paired_ratio": paired,
                "ftrun_sketches": on["sketches"],
                "ftrun_profile_recovery": on["profile_recovery"],
                "repeats": repeat,
                "valid": valid,
                "invalid": not valid,
            }
        )
    )
    if not valid:
        raise SystemExit(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--sketches", action="store_true", help="Measure the numeric check's sketches: on vs --no-sketches."
    )
    ap.add_argument(
        "--knobs",
        default=None,
        help="Instead: variations of the bare loop (BARE_KNOBS; 'all' or comma-separated substrings) vs the plain one.",
    )
    ap.add_argument(
        "--concurrent",
        action="store_true",
        help="Instead: both sides at the same time, each repeat's ratio from the steps of the same seconds.",
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
    print(
        f"machine: {os.cpu_count()} cores; model {cfg['model']} width {cfg['width']} blocks {cfg['blocks']}; "
        f"F={cfg['fragments']} H={cfg['sync_every']} tau={cfg['fragment_sync_delay']}; "
        f"{a.replicas} replicas x {a.steps} steps x {a.repeat}, "
        f"{threads_for(a.replicas)} threads per rank",
        flush=True,
    )
    if a.concurrent:
        concurrent_bench(cfg, a.replicas, a.repeat)
        return
    if a.knobs:
        knobs_bench(cfg, a.replicas, a.repeat, a.knobs)
        return
    bare, ours, loads = [], [], []
    for i in range(a.repeat):  # interleaved (and alternating who goes first), so drift in load hits both
        for side in ("bare", "ftrun") if i % 2 == 0 else ("ftrun", "bare"):
            if side == "bare":
                bare.append(run_bare(cfg, a.replicas))
            else:
                ours.append(run_ftrun(cfg, a.replicas))
        loads.append(round(os.getloadavg()[0], 2))
        print(
            f"repeat {i + 1}: bare {bare[-1]:.2f} ms/step, ftrun {ours[-1]:.2f} ms/step (load average {loads[-1]:.1f})",
            flush=True,
        )
    b, o = statistics.median(bare), statistics.median(ours)
    on = LAST_RUN["profiling"]
    print(f"bare torchft DiLoCo loop  : median {b:.2f} ms per step (whole loop, steps {WARMUP + 1}..{a.steps})")
    print(
        f"ftrun train --profile none: median {o:.2f} ms per step (ftrun's defaults: sketches "
        f"{'on' if on['sketches'] else 'OFF'}, recovery profiling {'on' if on['profile_recovery'] else 'OFF'})"
    )
    ratio = o / b
    valid = ratio >= VALID_FROM
    print(f"ratio ftrun / bare        : {ratio:.3f}x (goal 1.00-1.02x)")
    per_repeat = [x / y for x, y in zip(ours, bare, strict=True)]
    paired = paired_ratio(per_repeat)
    print(f"paired ratio (each repeat's two adjacent runs): {paired_text(paired)}")
    outside_ms = statistics.median(BOOKKEEPING)
    print(
        f"ftrun per-step work outside the step body (event log, TensorBoard, progress, probes): median "
        f"{outside_ms:.3f} ms per step ({outside_ms / o * 100:.2f}% of its step)"
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
    # where ftrun's extra time per step is: the same split of every run's loop on both sides
    split = {
        side: {k: statistics.median(breakdown(run)[k] for run in INTERVALS[side]) for k in PARTS}
        for side in ("bare", "ftrun")
    }
    print("whole loop per step = median plain step + plain steps' tail + send/sync steps' excess (ms, median of runs):")
    for k, what in PARTS.items():
        bk, fk = split["bare"][k], split["ftrun"][k]
        print(
            f"  {what:44} bare {bk:7.3f}  ftrun {fk:7.3f}  ftrun - bare {fk - bk:+7.3f} ({(fk - bk) / b * 100:+.2f}%)"
        )
    # the step body alone, where it runs: ftrun's own timing of it (``step_time_s``) against the bare
    # loop's plain step (its whole loop is the body and a time stamp); equal bodies in one process
    # that differ here differ by where they run (the process, what else runs beside it)
    body = statistics.median(PLAIN)
    print(
        f"  plain step body alone: ftrun's step_time_s median {body:.3f} ms vs the bare plain step "
        f"{split['bare']['plain']:.3f} ms: {body - split['bare']['plain']:+.3f} ms"
    )
    # CPU per step by process, load-independent where wall time is not: the same work on both
    # sides should cost the same CPU per rank; ftrun's other processes add theirs
    cpu = {side: cpu_medians(CPU[side]) for side in ("bare", "ftrun")}
    helpers = {r: v for r, v in cpu["ftrun"].items() if r not in ("rank", "lighthouse")}
    total_b = all_processes_ms(cpu["bare"], a.replicas)
    total_f = all_processes_ms(cpu["ftrun"], a.replicas)
    print("CPU ms per training step (utime + stime of every thread; ranks: per rank):")
    print(
        f"  rank: bare {cpu['bare']['rank']:.3f}  ftrun {cpu['ftrun'].get('rank', float('nan')):.3f}  = "
        f"{cpu['ftrun'].get('rank', float('nan')) / cpu['bare']['rank']:.3f}x"
    )
    print(
        f"  lighthouse: bare {cpu['bare'].get('lighthouse', float('nan')):.3f}  "
        f"ftrun {cpu['ftrun'].get('lighthouse', float('nan')):.3f}"
    )
    for r, v in sorted(helpers.items()):
        print(f"  ftrun's {r:22} {v:.3f} ms per step (the bare loop has none)")
    print(
        f"  all processes per step ({a.replicas} ranks, the lighthouse, ftrun's others): bare {total_b:.3f}  "
        f"ftrun {total_f:.3f}  = {total_f / total_b:.3f}x (what the ratio would be on cores nothing else uses)"
    )
    # the same, paired per repeat: CPU time does not wait for a core, so a loaded or noisy machine
    # moves it far less than the wall ratio (it still moves with the core's own speed)
    cpu_per_repeat = [
        all_processes_ms(f, a.replicas) / all_processes_ms(bb, a.replicas)
        for f, bb in zip(CPU["ftrun"], CPU["bare"], strict=True)
        if "rank" in f
    ]
    paired_cpu = paired_ratio(cpu_per_repeat)
    print(f"  paired CPU ratio, all processes: {paired_text(paired_cpu)}")
    costs = per_step_costs_ms(cfg, LAST_RUN["events"])
    print("ftrun's own per-step work, timed alone in this process with the worker's code (a lower bound):")
    for k, v in costs.items():
        print(f"  {k:52} {v:.4f} ms ({v / b * 100:.2f}% of the bare step)")
    cold = per_step_costs_after_a_step_ms(cfg, LAST_RUN["events"])
    print("the same work, each timed right after a training step of the model, as the rank runs it (median):")
    for k, v in cold.items():
        print(f"  {k:52} {v:.4f} ms ({v / b * 100:.2f}% of the bare step)")
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
                "ratios_per_repeat": [round(r, 4) for r in per_repeat],
                "paired_ratio": paired,
                "ftrun_sketches": on["sketches"],
                "ftrun_profile_recovery": on["profile_recovery"],
                "p25_ratio": round(quantiles["ftrun"][1] / quantiles["bare"][1], 4),
                "p50_ratio": round(quantiles["ftrun"][2] / quantiles["bare"][2], 4),
                "breakdown_ms_per_step": {
                    k: {side: round(split[side][k], 4) for side in ("bare", "ftrun")} for k in PARTS
                },
                "outside_step_body_ms_per_step": round(outside_ms, 4),
                "plain_step_body_ms": {"ftrun": round(body, 4), "bare": round(split["bare"]["plain"], 4)},
                "cpu_ms_per_step": {side: {r: round(v, 4) for r, v in cpu[side].items()} for side in cpu},
                "cpu_ratio_all_processes": round(total_f / total_b, 4),
                "cpu_ratios_per_repeat": [round(r, 4) for r in cpu_per_repeat],
                "paired_cpu_ratio": paired_cpu,
                "per_step_costs_ms": {k: round(v, 5) for k, v in costs.items()},
                "per_step_costs_after_a_step_ms": {k: round(v, 5) for k, v in cold.items()},
                "repeats": a.repeat,
                "load_average": loads,
                "valid": valid,
                "invalid": not valid,
            }
        )
    )
    if not valid:
        raise SystemExit(1)


# Student's t, two-sided 95%, by degrees of freedom (1..10; beyond, the normal's 1.96: up to 11% narrower)
T95 = {1: 12.71, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
GOAL = (1.00, 1.02)


def paired_ratio(ratios: list[float]) -> dict:
    """The per-repeat ratios (ftrun over the bare run beside it in time, so drift in the machine's
    speed between repeats cancels) as a geometric mean with a 95% t-interval, and what that says
    of the goal: met (the interval inside ``GOAL``), missed (outside it) or not resolved (the
    interval straddles an edge: more repeats, about ``repeats_to_resolve``, or a quieter machine).
    One repeat gives no interval: not resolved."""

    logs = [math.log(r) for r in ratios]
    n = len(logs)
    mean = statistics.fmean(logs)
    if n < 2:
        return {
            "ratio": round(math.exp(mean), 4),
            "repeats": n,
            "ci95": [None, None],
            "sd_pct": None,
            "verdict": "not resolved",
            "repeats_to_resolve": None,
        }
    sd = statistics.stdev(logs)
    half = T95.get(n - 1, 1.96) * sd / math.sqrt(n)
    lo, hi = math.exp(mean - half), math.exp(mean + half)
    if GOAL[0] <= lo and hi <= GOAL[1]:
        verdict = "goal met"
    elif hi < GOAL[0] or lo > GOAL[1]:
        verdict = "goal missed"
    else:
        verdict = "not resolved"
    # repeats for a half-width of 1% (the goal's width / 2) at this spread, by the normal approximation
    need = math.ceil((1.96 * sd / math.log(1.01)) ** 2)
    return {
        "ratio": round(math.exp(mean), 4),
        "repeats": n,
        "ci95": [round(lo, 4), round(hi, 4)],
        "sd_pct": round(100 * sd, 2),
        "verdict": verdict,
        "repeats_to_resolve": need,
    }


def paired_text(p: dict, digits: int = 3) -> str:
    """``paired_ratio``'s figures in one phrase: the mean, its interval and the spread per repeat
    (none from one repeat), the verdict."""
    lo, hi = p["ci95"]
    interval = (
        f"95% interval {lo:.{digits}f}-{hi:.{digits}f}x over {p['repeats']} repeats "
        f"(spread per repeat {p['sd_pct']:.1f}%)"
        if lo is not None
        else "no interval from one repeat"
    )
    return f"geometric mean {p['ratio']:.{digits}f}x, {interval}: {p['verdict']}"


def cpu_medians(runs: list[dict[str, float]]) -> dict[str, float]:
    """Per role, the median over the runs that measured it."""
    roles = {r for run in runs for r in run}
    return {r: statistics.median(run[r] for run in runs if r in run) for r in sorted(roles)}


PARTS = {
    "plain": "median plain step",
    "plain_tail": "plain steps beyond their median, per step",
    "sync_excess": "send/sync steps beyond the median, per step",
}


def knobs_bench(cfg: dict, replicas: int, repeat: int, which: str) -> None:
    """``--knobs``: each ``BARE_KNOBS`` variation of the bare loop against the plain bare loop,
    paired in each repeat (the order rotates), so the load's drift cancels in the per-repeat ratio."""
    names = list(BARE_KNOBS) if which == "all" else [n for n in BARE_KNOBS if any(w in n for w in which.split(","))]
    if not names:
        raise SystemExit(f"bench_overhead: --knobs {which!r} matches none of: {', '.join(BARE_KNOBS)}")
    sides = ["plain", *names]
    ms: dict[str, list[float]] = {n: [] for n in sides}
    cpu: dict[str, list[float]] = {n: [] for n in sides}
    for i in range(repeat):
        order = sides[i % len(sides) :] + sides[: i % len(sides)]
        for n in order:
            ms[n].append(run_bare(cfg, replicas, None if n == "plain" else BARE_KNOBS[n]))
            cpu[n].append(CPU["bare"][-1]["rank"] if n == "plain" else CPU_KNOBS[-1])
        print(
            f"repeat {i + 1} (load {os.getloadavg()[0]:.1f}): " + ", ".join(f"{n} {ms[n][-1]:.2f}" for n in sides),
            flush=True,
        )
    rows = []
    for n in names:
        paired = statistics.median(x / y for x, y in zip(ms[n], ms["plain"], strict=True))
        cpu_paired = statistics.median(x / y for x, y in zip(cpu[n], cpu["plain"], strict=True))
        rows.append(
            {
                "knob": n,
                "ms_per_step": round(statistics.median(ms[n]), 3),
                "vs_plain": round(paired, 4),
                "cpu_ms_per_step": round(statistics.median(cpu[n]), 3),
                "cpu_vs_plain": round(cpu_paired, 4),
            }
        )
        print(
            f"{n:44} median {rows[-1]['ms_per_step']:.2f} ms/step = {paired:.3f}x the plain bare loop; CPU per "
            f"rank {rows[-1]['cpu_ms_per_step']:.2f} ms/step = {cpu_paired:.3f}x (paired medians)"
        )
    plain = {
        "ms_per_step": round(statistics.median(ms["plain"]), 3),
        "cpu_ms_per_step": statistics.median(cpu["plain"]),
    }
    print(f"plain bare loop: median {plain['ms_per_step']:.2f} ms/step, CPU per rank {plain['cpu_ms_per_step']:.2f} ms")
    print(json.dumps({"plain_bare": plain, "knobs": rows}))


if __name__ == "__main__":
    main()
