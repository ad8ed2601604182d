#!/usr/bin/env python3
"""A short sweep cell's cost, cold vs ``--warm-start``, and a replica group's memory.

    python scripts/bench_warm_start.py               # 4 cells of 20 steps each side, then memory
    python scripts/bench_warm_start.py --cells 4 --steps 20

Cell cost: ``ftrun sweep --axis seed=1..N --steps S`` (the default model, 2 groups) once cold and
once with ``--warm-start`` (either way every cell's agents forked by the sweep's zygote,
``ftrun.launch.zygote``), into a temp dir (removed after). Per cell: its ``wall_s`` (sweep-cell.json:
from its training's start, or its gate's opening when warm, to its result), its steps (the event
logs: the first step's start to the last step's end over both groups) and its check (the sweep's
evaluation, ``ftrun.sweep.evaluate.evaluate``, run again on the run dir and timed). The first cell
of each sweep is left out of the medians (a warm sweep's first cell starts cold by construction).
Per sweep also its CPU seconds, every process of it (``sweep_cpu_s``: this process's reaped
descendants, read around the sweep), steadier than its wall time. The sweeps run with Python's
bytecode cache on (``PYTHONDONTWRITEBYTECODE`` unset), as an installed ftrun has it.

Memory: one ``ftrun train`` (2 groups, each agent a fresh interpreter: ``fork_agents = false``)
parked at a start gate (``HostsConfig.start_gate``), every rank asleep with its model built:
PSS, RSS and private bytes of each process from ``/proc/PID/smaps_rollup``; a group = its
torchrun agent + its rank(s) (a rank forked from its agent, ``ftrun.worker.agent``, is told from
it by its parent); the CPU seconds every agent and rank used until parked (``park_cpu_s``); the
same again with the training's agents forked by a zygote (``ftrun.launch.zygote``, as a sweep
runs a cell and a training forks them from its own: ``memory_zygote``, with the zygote's own
memory and import CPU seconds, paid once per sweep or training). The warm cells' median wall is
also given over the cold cells' steps + check (``median_wall_over_cold_steps_and_check``): a warm
cell's steps run beside its successor's start-up. Sharing: a parent that
imported what a rank imports (torch, torchft, ftrun's worker) forks two children; their private
bytes vs a fresh process's, which is what each group would save if forked from one pre-imported
parent.

The last line is one JSON object (``cold``, ``warm``: per-cell rows and medians; ``memory``;
``memory_zygote``; ``sharing``). Exit 1 when a sweep or the parked training failed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ftrun.launch.zygote import Server

ROOT = Path(__file__).resolve().parent.parent
IMPORTS = "import torch, torchft, torchft.local_sgd, ftrun.worker.main, ftrun.worker.setup, ftrun.worker.models"


def smaps(pid: int) -> dict[str, int] | None:
    """kB of the process's Pss, Rss and private (clean + dirty) memory; None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    kb = {ln.split(":")[0]: int(ln.split()[1]) for ln in text.splitlines()[1:] if ln.endswith("kB")}
    return {"pss": kb["Pss"], "rss": kb["Rss"], "private": kb["Private_Clean"] + kb["Private_Dirty"]}


def _cell_rows(sweep_dir: Path, result: dict) -> list[dict]:
    from ftrun import grid
    from ftrun.config import build
    from ftrun.sweep.evaluate import evaluate

    rows = []
    for c in result["cells"]:
        run_dir = Path(c["run_dir"])
        starts, ends = [], []
        for log in sorted((run_dir / "events").glob("replica*_rank0.jsonl")):
            recs = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
            starts.append(recs[0]["t"] - recs[0]["step_time_s"])
            ends.append(recs[-1]["t"])
        cell = grid.Cell(name=c["name"], params=c["params"])
        cell.config = build(**c["config"])
        t0 = time.perf_counter()
        evaluate(cell, run_dir, 0, "")
        check_s = time.perf_counter() - t0
        steps_s = max(ends) - min(starts)
        rows.append(
            {
                "cell": c["name"],
                "verdict": c["verdict"],
                "wall_s": c["wall_s"],
                "steps_s": round(steps_s, 2),
                "check_s": round(check_s, 2),
                "wall_over_steps_and_check": round(c["wall_s"] / (steps_s + check_s), 2),
            }
        )
    return rows


def children_cpu_s() -> float:
    """User + system CPU seconds of this process's reaped descendants (a sweep's whole tree once
    it returned: each process is reaped by its parent, the zygote's agents by the zygote)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def sweep(tmp: Path, name: str, cells: int, steps: int, warm: bool) -> dict:
    argv = [sys.executable, "-m", "ftrun", "sweep", "--out", str(tmp), "--name", name, "--json"]
    argv += ["--axis", "seed=" + ",".join(str(i) for i in range(1, cells + 1)), "--steps", str(steps)]
    argv += ["--warm-start"] if warm else []
    # Python's bytecode cache on (its default: ``__pycache__`` beside the sources), as an installed
    # ftrun has it: with PYTHONDONTWRITEBYTECODE=1 and an editable install every cell's ``ftrun
    # train`` compiles ftrun's modules anew; the first cell, left out of the medians, may write it
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    t0, cpu0 = time.monotonic(), children_cpu_s()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=1800, env=env)
    total, cpu = time.monotonic() - t0, children_cpu_s() - cpu0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[2:])}: exit {proc.returncode}: {proc.stderr.strip()[-400:]}")
    rows = _cell_rows(tmp / name, json.loads(proc.stdout))
    later = rows[1:] or rows
    return {
        "sweep_wall_s": round(total, 1),
        "sweep_cpu_s": round(cpu, 2),  # every process of the sweep, the zygote's imports and cell 1 included
        "cells": rows,
        "median_wall_s": statistics.median(r["wall_s"] for r in later),
        "median_steps_s": statistics.median(r["steps_s"] for r in later),
        "median_check_s": statistics.median(r["check_s"] for r in later),
        "median_wall_over_steps_and_check": statistics.median(r["wall_over_steps_and_check"] for r in later),
    }


def _tree(root: int) -> dict[int, int]:
    """``root`` and its descendants, each with its parent's pid."""
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    out, todo = {root: 0}, [root]
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            out[c] = p
            todo.append(c)
    return out


def _cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _kind(cmd: str, parent_cmd: str = "") -> str:
    """A training's process by its command line: agent, rank, lighthouse, train or other. A rank
    forked from its agent (``ftrun.worker.agent``) has its agent's command line: a child of an
    agent with the agent's command line is a rank."""
    if cmd and cmd == parent_cmd and "ftrun.worker.agent" in cmd:
        return "rank"
    for kind, needle in (
        ("agent", "torch.distributed.run"),  # its command line names the rank's module too
        ("agent", "ftrun.worker.agent"),  # (ftrun train's groups: torch's agent through it)
        ("rank", "ftrun.worker.main"),
        ("lighthouse", "lighthouse"),
        ("train", "ftrun train"),
    ):
        if needle in cmd:
            return kind
    return "other"


def _kinds(root: int) -> dict[int, str]:
    """Each process of ``root``'s tree by its kind."""
    return {p: _kind(_cmd(p), _cmd(parent)) for p, parent in _tree(root).items()}


def _asleep(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/wchan").read_text() in ("hrtimer_nanosleep", "do_nanosleep")
    except OSError:
        return False


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process used so far; 0 once it is gone."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _forked_kinds(zygote: int) -> dict[int, str]:
    """The processes a zygote forked (``ftrun.worker.zygote``): its children are agents, theirs
    ranks (all with the zygote's command line)."""
    return {p: "agent" if parent == zygote else "rank" for p, parent in _tree(zygote).items() if p != zygote}


def memory(tmp: Path, replicas: int = 2, zygote: Server | None = None) -> dict:
    """One training parked at its gate: each process's memory, per kind and per group, and the
    CPU seconds its groups took to park (every agent and rank, from its start to parked). Its
    agents fresh interpreters (``--no-fork-agents``), or with ``zygote`` forked by that zygote, as
    a sweep runs a cell (and as a training forks them from its own)."""
    name = "mem-zygote" if zygote else "mem"
    gate = tmp / f"{name}.gate"
    cfg = tmp / f"{name}.toml"
    # alone: each agent a fresh interpreter (``fork_agents = false``; a training's own zygote otherwise)
    fork = "" if zygote else "fork_agents = false\n"
    cfg.write_text(
        f'steps = 20\nout = "{tmp}"\nrun_name = "{name}"\nstart_gate = "{gate}"\nreplicas = {replicas}\n{fork}'
    )
    argv = [sys.executable, "-m", "ftrun", "train", "--config", str(cfg), "--json", "--no-check"]
    env = dict(os.environ, **({"FTRUN_ZYGOTE": zygote.address} if zygote else {}))
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)

    def kinds_now() -> dict[int, str]:
        if zygote is None:
            return _kinds(proc.pid)
        return {**_kinds(proc.pid), **_forked_kinds(zygote.proc.pid), zygote.proc.pid: "zygote"}

    try:
        deadline, quiet = time.monotonic() + 600, 0
        while quiet < 10:  # every rank asleep at its gate for a second
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the parked training did not park: exit {proc.poll()}")
            ranks = [p for p, k in kinds_now().items() if k == "rank"]
            quiet = quiet + 1 if len(ranks) == replicas and all(map(_asleep, ranks)) else 0
            time.sleep(0.1)
        kinds: dict[str, list[dict]] = {}
        cpu: dict[str, float] = {}
        for p, kind in kinds_now().items():
            m = smaps(p)
            if m is not None:
                kinds.setdefault(kind, []).append(m)
                cpu[kind] = cpu.get(kind, 0.0) + cpu_s(p)
    finally:
        gate.write_text("")
        proc.communicate(timeout=600)
    mb = {
        k: {f: round(sum(x[f] for x in v) / len(v) / 1024, 1) for f in ("pss", "rss", "private")}
        for k, v in kinds.items()
    }
    group = {f: round(mb["agent"][f] + mb["rank"][f], 1) for f in ("pss", "rss", "private")}
    park = {k: round(cpu.get(k, 0.0), 2) for k in ("agent", "rank")}
    park["groups"] = round(park["agent"] + park["rank"], 2)
    return {
        "per_process_mb": mb,
        "counts": {k: len(v) for k, v in kinds.items()},
        "per_group_mb": group,
        "park_cpu_s": park,
        # every process's PSS summed (the zygote's, shared with the groups, included): the training's memory
        "total_pss_mb": round(sum(x["pss"] for v in kinds.values() for x in v) / 1024, 1),
    }


def with_zygote(tmp: Path) -> dict:
    """``memory`` of a training whose agents a zygote forks (the zygote's share of the pages
    counted, as ``per_process_mb``'s ``zygote``), and the zygote's own memory before it forks and
    the CPU seconds of its imports (paid once per sweep, not per cell)."""
    from ftrun.launch import zygote

    server = zygote.start(subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 600
        while not server.path.exists():  # listening once its imports are done
            if server.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the zygote did not start: exit {server.proc.poll()}")
            time.sleep(0.05)
        own, own_cpu = smaps(server.proc.pid), cpu_s(server.proc.pid)
        mem = memory(tmp, zygote=server)
    finally:
        server.stop()
    assert own is not None
    mem["zygote"] = {"pss": round(own["pss"] / 1024, 1), "private": round(own["private"] / 1024, 1), "cpu_s": own_cpu}
    return mem


CHILD = f"""
import os, sys, time
{IMPORTS}
pids = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        time.sleep(3600)
        os._exit(0)
    pids.append(pid)
print(" ".join(map(str, [os.getpid(), *pids])), flush=True)
time.sleep(3600)
"""


def sharing() -> dict:
    """Private MB of a fresh process that imported a rank's modules vs of children forked from one."""
    fresh = subprocess.Popen(
        [sys.executable, "-c", f"{IMPORTS}\nimport time\nprint(1, flush=True)\ntime.sleep(3600)"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    forked = subprocess.Popen([sys.executable, "-c", CHILD], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    kids: list[int] = []
    try:
        assert fresh.stdout is not None and forked.stdout is not None
        fresh.stdout.readline()
        parent, *kids = map(int, forked.stdout.readline().split())
        time.sleep(1.0)
        f, k = smaps(fresh.pid), [smaps(p) for p in kids]
    finally:
        for pid in kids:  # the forked parent's children: not ours to wait for, but ours to end
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        for p in (fresh, forked):
            p.kill()
            p.wait()
    if f is None or not all(k):
        raise SystemExit("sharing: a measured process was gone")
    fresh_private = f["private"] / 1024
    forked_private = statistics.mean(x["private"] for x in k if x is not None) / 1024
    return {
        "fresh_import_rss_mb": round(f["rss"] / 1024, 1),
        "fresh_import_private_mb": round(fresh_private, 1),
        "forked_child_private_mb": round(forked_private, 1),
        "saved_per_forked_process_mb": round(fresh_private - forked_private, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=4, help="cells per sweep (default 4)")
    ap.add_argument("--steps", type=int, default=20, help="steps per cell (default 20)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory(prefix="bench-warm-") as tmp:
        cold = sweep(Path(tmp), "cold", args.cells, args.steps, warm=False)
        warm = sweep(Path(tmp), "warm", args.cells, args.steps, warm=True)
        mem = memory(Path(tmp))
        mem_z = with_zygote(Path(tmp))
    share = sharing()
    # the warm cells' steps run beside the next cell's start-up: their cost against the cold cells' steps too
    cold_work = cold["median_steps_s"] + cold["median_check_s"]
    warm["median_wall_over_cold_steps_and_check"] = round(warm["median_wall_s"] / cold_work, 2)
    print("| sweep | cell | wall s | steps s | check s | wall / (steps + check) |")
    print("|---|---|---|---|---|---|")
    for side, res in (("cold", cold), ("warm", warm)):
        for r in res["cells"]:
            print(
                f"| {side} | {r['cell']} | {r['wall_s']} | {r['steps_s']} | {r['check_s']} "
                f"| {r['wall_over_steps_and_check']} |"
            )
    print(
        json.dumps(
            {
                "cells": args.cells,
                "steps": args.steps,
                "cold": cold,
                "warm": warm,
                "memory": mem,
                "memory_zygote": mem_z,
                "sharing": share,
                "bytecode_cache": "on (Python's default, __pycache__ beside the sources)",
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
