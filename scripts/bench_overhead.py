#!/usr/bin/env python3
"""ftrun's cost per training step, next to a bare torchft DiLoCo loop of the same model.

Runs, in the same invocation and on the same machine, ``--repeat`` times, interleaved (who goes
first alternates, so drift in the machine's load hits both sides):
  1. bare: a torchft lighthouse + R replica processes, each ``tests/bare_diloco.py``'s loop
     (Manager + DiLoCo + AdamW/Nesterov) over ftrun's model, data, schedule and thread count — no
     ftrun worker, no recorder, no profiler, no TensorBoard;
  2. ftrun: ``ftrun train --profile none`` with the same settings (its defaults: sketches and
     recovery profiling on, stated in the record from the run's spec).

What is timed: whole loops. Each side stamps the wall clock once per step, after everything the
loop does for that step (ftrun: the event log's ``t``, after the step body, the quorum probe and
the record, so its per-step bookkeeping is inside the interval between two stamps). ms/step =
(stamp of the last step - stamp of step W) / (N - W) per replica, W = 10 warm-up steps (the
first quorum waits for the other replicas to start), the mean over replicas; per side the
median over repeats. Goal: ratio 1.00-1.02 (ftrun does strictly more per step than the bare
loop). The ratio paired per repeat (``paired_ratio``: geometric mean, 95% t-interval, verdict)
says whether this many repeats on this machine resolve the goal. A ratio below ``VALID_FROM``
means the two sides did not do the same work, or the load moved between them: the record says
``"valid": false`` and the script exits 1.

CPU time, steadier than wall time on a loaded machine: per rank (bare: ``time.process_time`` at
every step; ftrun: its process tree read from ``/proc`` every ``SAMPLE_S`` between the warm-up and
the last step), each side's lighthouse over its loop's window, and ftrun's other processes
(torchrun agents, the parent); the all-process CPU ratio paired per repeat (``paired_cpu_ratio``).
Also ftrun's time per step outside the step body (loop minus the event log's ``step_time_s``).

Same conditions on both sides: each bare replica in its own session (as ftrun starts each group:
with the kernel's autogroup scheduling a session is one scheduling group), a lighthouse with
ftrun's settings, the loops starting once every Manager is up (ftrun's ``start_line``), ftrun's
threads per rank and malloc thresholds, the benchmark's reads of ``/proc`` alike.
``scripts/bench_bare_knobs.py`` measures variations of the bare loop against it.

The last line of output is one JSON object, ``summarise``'s record (``gen_benchmarks_page.py
--run overhead`` records it).

Usage: python scripts/bench_overhead.py [--steps 120] [--replicas 2] [--repeat 3]
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WARMUP = 10
VALID_FROM = 0.98  # ftrun cannot be faster than the loop it adds work to: below this the comparison is invalid
GOAL = (1.00, 1.02)
# Student's t, two-sided 95%, by degrees of freedom (1..10; beyond, the normal's 1.96: up to 11% narrower)
T95 = {1: 12.71, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
# How often each side's processes are read from /proc while it trains: the benchmark's own load,
# put on both sides alike (a read of ftrun's tree: ~0.1 ms CPU, the event logs' new bytes only).
SAMPLE_S = 0.1
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class BareRun:
    """One bare run: wall ms per step (mean over replicas), CPU ms per step (``rank``: per rank;
    ``lighthouse``), each replica's step stamps (unix s)."""

    ms_per_step: float
    cpu: dict[str, float]
    stamps: list[list[float]]


@dataclass(frozen=True)
class FtrunRun:
    """One ``ftrun train`` run: wall ms per step, CPU ms per step by process role (``rank``: per
    rank), ms per step outside the step body, its spec's profiling settings."""

    ms_per_step: float
    cpu: dict[str, float]
    outside_ms: float
    profiling: dict[str, Any]


def bare_replica(replica: int, replicas: int, lighthouse: str, cfg: dict, out: str) -> None:
    """One replica group of the bare loop (rank 0 of a group of 1), in its own process: writes its
    step stamps and CPU times to ``out``. ``cfg["knobs"]``: the variations ``bench_bare_knobs.py``
    measures (none: ftrun's conditions)."""
    import gc

    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(ROOT / "tests"))
    import bare_diloco as bare
    from ftrun.config import RunConfig
    from ftrun.worker.data import Batches
    from ftrun.worker.models import build_fragments, build_model

    knobs = cfg.get("knobs", {})
    if knobs.get("malloc", True):  # as ftrun's worker
        from ftrun.worker.malloc import fix_malloc_thresholds

        fix_malloc_thresholds()
    torch.set_num_threads(knobs.get("threads", threads_for(replicas)))
    # the model as ftrun's worker builds it: from the config tree's ModelSpec (knobs are the bench's own)
    spec = RunConfig.from_keys(**{k: v for k, v in cfg.items() if k != "knobs"}).model_spec()
    torch.manual_seed(spec.seed)
    model = build_model(spec)
    frags = build_fragments(model, spec)
    optims = bare.optimizers(model, frags, cfg["inner_lr"], cfg["outer_lr"], cfg["outer_momentum"])
    data = Batches("synthetic", cfg["vocab"], cfg["seq_len"], cfg["batch_size"], cfg["seed"], replica)
    batches = [data.next() for _ in range(cfg["steps"])] if knobs.get("pregen") else None
    manager = bare.manager(model, f"bare_{replica}", lighthouse, init_sync=False)  # init_sync: as ftrun's
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

    def loss(k: int) -> torch.Tensor:  # as ftrun's worker: data + forward (backward, step: the loop)
        x, y = batches[k - 1] if batches is not None else data.next()
        return F.cross_entropy(model(x).flatten(0, 1), y.flatten())

    def stamp(k: int, _loss: torch.Tensor) -> None:
        stamps.append(time.time())
        cpu.append(time.process_time())  # every thread of the rank: torchft's, Gloo's too

    schedule = (cfg["sync_every"], cfg["fragment_sync_delay"])
    bare.train(manager, frags, optims, schedule, loss, lambda k: k < cfg["steps"], bare.Hooks(after=stamp))
    Path(out).write_text(json.dumps({"t": stamps, "cpu": cpu}))
    bare.exit_now(manager)


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


def cpu_s(pid: int) -> float | None:
    """utime + stime of ``pid``, seconds (every thread); None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    f = stat[stat.rindex(")") + 2 :].split()
    return (int(f[11]) + int(f[12])) / CLK_TCK


def role(pid: int) -> str:
    """What an ``ftrun train`` process is, from its command line."""
    try:
        text = b" ".join(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"))
    except OSError:
        return "gone"
    for needle, name in (
        (b"torch.distributed.run", "torchrun agent"),  # its argv names the rank's module too
        (b"ftrun.worker.agent", "torchrun agent"),  # (ftrun train's groups: torch's agent through it)
        (b"ftrun.worker.main", "rank"),
        (b"lighthouse", "lighthouse"),
        (b"ftrun.launch.reaper", "reaper"),
        (b"tensorboard", "tensorboard"),
    ):
        if needle in text:
            return name
    return "ftrun parent" if b"ftrun train" in text else "other"


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


def start_bare(cfg: dict, replicas: int, variant: dict, tmp: str) -> tuple[subprocess.Popen, list[subprocess.Popen]]:
    """The bare side's lighthouse (ftrun's settings) and replicas (``variant``: ``env``, variables
    to set or, None, unset; ``launcher``: "torchrun" for a torchrun agent per replica)."""
    from ftrun.launch.groups import free_port, torchrun_argv
    from ftrun.launch.lighthouse import lighthouse_argv

    port = free_port()
    argv = lighthouse_argv(f"127.0.0.1:{port}", cfg["min_replicas"], 10000, 100, cfg["heartbeat_timeout_ms"])
    lh = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads_for(replicas))}  # as ftrun's launcher sets it
    for k, v in variant.get("env", {}).items():
        env.pop(k, None) if v is None else env.__setitem__(k, v)
    launcher = torchrun_argv(1)[1:] if variant.get("launcher") == "torchrun" else []  # -m torch.distributed.run ...
    worker = [sys.executable, *launcher, __file__, "--replicas", str(replicas), "--cfg", json.dumps(cfg)]
    procs = [
        subprocess.Popen(
            [*worker, "--worker", str(r), "--lighthouse", f"http://127.0.0.1:{port}", "--out", f"{tmp}/r{r}.json"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        for r in range(replicas)
    ]
    return lh, procs


def run_bare(cfg: dict, replicas: int, variant: dict | None = None) -> BareRun:
    """One bare run (``variant``: a ``bench_bare_knobs.py`` variation, None = ftrun's conditions)."""
    variant = variant or {}
    cfg = {**cfg, "knobs": variant.get("knobs", {})}
    tmp = tempfile.mkdtemp()
    lh, procs = start_bare(cfg, replicas, variant, tmp)
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
            p.wait()
        lh.kill()
        lh.wait()
    got = [json.loads(Path(f"{tmp}/r{r}.json").read_text()) for r in range(replicas)]
    stamps = [g["t"] for g in got]
    cpu = {
        "rank": statistics.mean(ms_per_step(g["cpu"]) for g in got),
        "lighthouse": window_ms_per_step(lighthouse_cpu, stamps[0]),
    }
    return BareRun(statistics.mean(ms_per_step(st) for st in stamps), cpu, stamps)


def run_ftrun(cfg: dict, replicas: int) -> FtrunRun:
    """One ``ftrun train --profile none`` run with ``cfg``'s schedule, its processes read every ``SAMPLE_S``."""
    out = Path(tempfile.mkdtemp())
    sched = ["--fragments", str(cfg["fragments"]), "--sync-every", str(cfg["sync_every"])]
    sched += ["--fragment-sync-delay", str(cfg["fragment_sync_delay"])]
    cmd = [sys.executable, "-m", "ftrun", "train", "--profile", "none", "--replicas", str(replicas)]
    cmd += ["--steps", str(cfg["steps"]), "--out", str(out), "--run-name", "bench", "--json", *sched]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    logs = [out / "bench" / "events" / f"replica{r}_rank0.jsonl" for r in range(replicas)]
    tree = TreeCpu(proc.pid, logs, replicas)
    while proc.poll() is None:
        tree.sample(cfg["steps"])
        time.sleep(SAMPLE_S)
    if proc.returncode:
        raise SystemExit(f"bench_overhead: ftrun train exited {proc.returncode}: {' '.join(cmd)}")
    loops, outside = [], []
    for log in logs:
        recs = [x for x in map(json.loads, log.read_text().splitlines()) if x.get("step")]
        loop = ms_per_step([x["t"] for x in recs])
        loops.append(loop)
        # what the bare loop does not do: the loop's time per step minus the step body's
        outside.append(loop - statistics.mean(x["step_time_s"] for x in recs[WARMUP:]) * 1e3)
    profiling = json.loads((out / "bench" / "spec.json").read_text())["config"]["profiling"]
    return FtrunRun(statistics.mean(loops), tree.per_step(), statistics.mean(outside), profiling)


def paired_ratio(ratios: list[float]) -> dict:
    """The per-repeat ratios (ftrun over the bare run beside it in time, so drift in the machine's
    speed between repeats cancels) as a geometric mean with a 95% t-interval, and what that says
    of the goal: met (the interval inside ``GOAL``), missed (outside it) or not resolved (the
    interval straddles an edge: more repeats, about ``repeats_to_resolve``, or a quieter machine).
    One repeat gives no interval: not resolved."""
    logs = [math.log(r) for r in ratios]
    n, mean = len(logs), statistics.fmean(logs)
    out = {"ratio": round(math.exp(mean), 4), "repeats": n}
    if n < 2:
        return {**out, "ci95": [None, None], "sd_pct": None, "verdict": "not resolved", "repeats_to_resolve": None}
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
    ci = [round(lo, 4), round(hi, 4)]
    return {**out, "ci95": ci, "sd_pct": round(100 * sd, 2), "verdict": verdict, "repeats_to_resolve": need}


def paired_text(p: dict) -> str:
    """``paired_ratio``'s figures in one phrase: the mean, its interval and the spread per repeat
    (none from one repeat), the verdict."""
    lo, hi = p["ci95"]
    interval = (
        f"95% interval {lo:.3f}-{hi:.3f}x over {p['repeats']} repeats (spread per repeat {p['sd_pct']:.1f}%)"
        if lo is not None
        else "no interval from one repeat"
    )
    return f"geometric mean {p['ratio']:.3f}x, {interval}: {p['verdict']}"


def cpu_medians(runs: list[dict[str, float]]) -> dict[str, float]:
    """Per role, the median over the runs that measured it."""
    roles = {r for run in runs for r in run}
    return {r: statistics.median(run[r] for run in runs if r in run) for r in sorted(roles)}


def measure(cfg: dict, replicas: int, repeat: int) -> list[tuple[BareRun, FtrunRun, float]]:
    """``repeat`` pairs of runs, interleaved, alternating who goes first; each with the load after it."""
    pairs = []
    for i in range(repeat):
        if i % 2 == 0:
            b = run_bare(cfg, replicas)
            f = run_ftrun(cfg, replicas)
        else:
            f = run_ftrun(cfg, replicas)
            b = run_bare(cfg, replicas)
        load = round(os.getloadavg()[0], 2)
        pairs.append((b, f, load))
        sides = f"bare {b.ms_per_step:.2f} ms/step, ftrun {f.ms_per_step:.2f} ms/step"
        print(f"repeat {i + 1}: {sides} (load average {load:.1f})", flush=True)
    return pairs


def summarise(pairs: list[tuple[BareRun, FtrunRun, float]], replicas: int) -> dict:
    """The benchmark's record from its pairs of runs."""
    b = statistics.median(p[0].ms_per_step for p in pairs)
    o = statistics.median(p[1].ms_per_step for p in pairs)
    per_repeat = [f.ms_per_step / bb.ms_per_step for bb, f, _ in pairs]
    cpu = {"bare": cpu_medians([p[0].cpu for p in pairs]), "ftrun": cpu_medians([p[1].cpu for p in pairs])}
    total = {side: all_processes_ms(cpu[side], replicas) for side in cpu}
    cpu_per_repeat = [
        all_processes_ms(f.cpu, replicas) / all_processes_ms(bb.cpu, replicas) for bb, f, _ in pairs if "rank" in f.cpu
    ]
    profiling = pairs[-1][1].profiling
    ratio = o / b
    return {
        "bare_ms_per_step": round(b, 3),
        "ftrun_ms_per_step": round(o, 3),
        "ratio": round(ratio, 4),
        "ratios_per_repeat": [round(r, 4) for r in per_repeat],
        "paired_ratio": paired_ratio(per_repeat),
        "ftrun_sketches": profiling["sketches"],
        "ftrun_profile_recovery": profiling["profile_recovery"],
        "outside_step_body_ms_per_step": round(statistics.median(p[1].outside_ms for p in pairs), 4),
        "cpu_ms_per_step": {side: {r: round(v, 4) for r, v in cpu[side].items()} for side in cpu},
        "cpu_ratio_all_processes": round(total["ftrun"] / total["bare"], 4),
        "cpu_ratios_per_repeat": [round(r, 4) for r in cpu_per_repeat],
        "paired_cpu_ratio": paired_ratio(cpu_per_repeat) if cpu_per_repeat else None,
        "repeats": len(pairs),
        "load_average": [p[2] for p in pairs],
        "valid": ratio >= VALID_FROM,
        "invalid": ratio < VALID_FROM,
    }


def report(r: dict, steps: int) -> None:
    """The record in words (its JSON follows)."""
    b, o = r["bare_ms_per_step"], r["ftrun_ms_per_step"]
    sketches, recovery = ("on" if r[k] else "OFF" for k in ("ftrun_sketches", "ftrun_profile_recovery"))
    print(f"bare torchft DiLoCo loop  : median {b:.2f} ms per step (whole loop, steps {WARMUP + 1}..{steps})")
    on = f"sketches {sketches}, recovery profiling {recovery}"
    print(f"ftrun train --profile none: median {o:.2f} ms per step ({on})")
    print(f"ratio ftrun / bare        : {r['ratio']:.3f}x (goal {GOAL[0]:.2f}-{GOAL[1]:.2f}x)")
    print(f"paired ratio (each repeat's two adjacent runs): {paired_text(r['paired_ratio'])}")
    out = r["outside_step_body_ms_per_step"]
    print(f"ftrun per-step work outside the step body: median {out:.3f} ms per step ({out / o * 100:.2f}% of its step)")
    cpu = r["cpu_ms_per_step"]
    print("CPU ms per training step (utime + stime of every thread; ranks: per rank):")
    for side in ("bare", "ftrun"):
        print(f"  {side:5} " + ", ".join(f"{k} {v:.3f}" for k, v in cpu[side].items()))
    print(f"  all processes, ftrun / bare: {r['cpu_ratio_all_processes']:.3f}x")
    if r["paired_cpu_ratio"] is not None:
        print(f"  paired CPU ratio, all processes: {paired_text(r['paired_cpu_ratio'])}")
    if r["invalid"]:
        print(
            f"INVALID comparison: ftrun measured {r['ratio']:.3f}x the bare loop (< {VALID_FROM}): it does strictly "
            "more per step, so the two sides did not run the same work, or the load on the machine changed between them"
        )


def config(steps: int, replicas: int) -> dict:
    """ftrun's resolved default config for ``steps``, profiling off: both sides' settings."""
    from ftrun.config import build

    return {**build(steps=steps, profile="none").resolved(), "replicas": replicas}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=120, help="training steps of each run (the first 10 not timed)")
    ap.add_argument("--replicas", type=int, default=2, help="replica groups of each run")
    ap.add_argument("--repeat", type=int, default=3, help="pairs of runs (bare, ftrun), interleaved")
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)  # a bare replica's process
    ap.add_argument("--lighthouse", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--cfg", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker is not None:
        bare_replica(a.worker, a.replicas, a.lighthouse, json.loads(a.cfg), a.out)
        return
    if a.repeat < 1 or a.steps <= WARMUP:
        raise SystemExit(f"bench_overhead: need --repeat >= 1 and --steps > {WARMUP}")
    cfg = config(a.steps, a.replicas)
    print(
        f"machine: {os.cpu_count()} cores; model {cfg['model']} width {cfg['width']} blocks {cfg['blocks']}; "
        f"F={cfg['fragments']} H={cfg['sync_every']} tau={cfg['fragment_sync_delay']}; "
        f"{a.replicas} replicas x {a.steps} steps x {a.repeat}, {threads_for(a.replicas)} threads per rank",
        flush=True,
    )
    record = summarise(measure(cfg, a.replicas, a.repeat), a.replicas)
    report(record, a.steps)
    print(json.dumps(record))
    if record["invalid"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
