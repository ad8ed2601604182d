"""Write docs/benchmarks.md, every measured figure the docs cite, from the benchmarks' JSON records.

    .venv/bin/python scripts/gen_benchmarks_page.py                # render the page from docs/benchmarks/*.json
    .venv/bin/python scripts/gen_benchmarks_page.py --run inspect  # run one benchmark, record it, render
    .venv/bin/python scripts/gen_benchmarks_page.py --list         # the benchmarks and their commands

A record (``docs/benchmarks/ID.json``, a ``Record``) holds what one benchmark script printed as
its JSON result, the command, when (UTC), the machine (CPUs, memory, OS, Python, torch and
torchft releases, read without importing them) and the 1-minute load before and after. The page
shows each benchmark's figures with those facts; a benchmark never recorded shows the command
that records it, never a number. Rendering reads only the records: it is deterministic.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling bench_figures, however this runs
import bench_figures  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "benchmarks.md"
RECORDS = ROOT / "docs" / "benchmarks"
COMMAND = "python scripts/gen_benchmarks_page.py"


class Bench(msgspec.Struct, frozen=True):
    """One benchmark: ``argv`` (run with this Python from the checkout's root), what it measures."""

    id: str
    title: str
    what: str
    argv: tuple[str, ...]
    timeout_s: float = 3600.0
    table_note: str = ""  # how to read the table the script prints, if it prints one


class Machine(msgspec.Struct, frozen=True):
    cpus: int
    cpu: str
    memory_gb: float
    os: str
    python: str
    torch: str
    torchft: str


class Record(msgspec.Struct, frozen=True):
    """One run of a benchmark. ``result``: the script's JSON result as it printed it (None: it
    printed none; ``exit_code`` says how it ended); ``table``: the markdown table it printed, if
    any (its lines that start with ``|``), shown on the page as printed."""

    bench: str
    command: str
    date: str
    machine: Machine
    load_before: float
    load_after: float
    seconds: float
    exit_code: int
    result: Any = None
    table: list[str] = []


PAPER = (
    "--params 1e9 --dtype fp4 --dp-dtype bf16 --step-ms 100 --tokens-per-step 524288 --layers 24 "
    "--layers-per-fragment 3 --sync-every 96 --fragment-sync-delay 1 --data-parallel --train-tokens 25e9 --link 1gbit"
)
BENCHES: tuple[Bench, ...] = (
    Bench(
        "inspect",
        "inspect-trace vs HTA",
        "ftrun inspect-trace end to end on a ~20 MB torchft trace, next to json.load and HTA's TraceAnalysis load "
        "(HTA: the traceinsight release, installed beside the venv with `pip install --target DIR traceinsight` "
        "and found through `FTRUN_HTA_PATH=DIR`).",
        ("scripts/bench_inspect.py",),
    ),  # noqa: E501
    Bench(
        "inspect-large",
        "Large traces",
        "inspect-trace on a ~300 MB trace: MB/s, peak memory per file size, gzip vs a bare zlib stream.",
        ("scripts/bench_inspect.py", "--large"),
    ),  # noqa: E501
    Bench(
        "overhead",
        "Overhead per step",
        "ftrun train's time per step next to a bare torchft DiLoCo loop of the same model, both measured in the "
        "same run, interleaved; wall time and CPU time (all processes) per step.",
        ("scripts/bench_overhead.py", "--steps", "60", "--repeat", "3"),
        900,
    ),  # noqa: E501
    Bench(
        "compare",
        "Streaming vs plain DiLoCo",
        "ftrun compare streaming baseline on an emulated 1 Gbit/s, 20 ms link (the default model): exposed "
        "communication and peak bytes per sync, streaming over plain DiLoCo measured in the same compare.",
        ("scripts/bench_compare.py", "--links", "1gbit,20ms", "--json"),
        900,
    ),  # noqa: E501
    Bench(
        "plan-validation",
        "Plan validation",
        "ftrun plan --check against real compare runs (streaming and plain DiLoCo, 60 steps each) on four "
        "emulated links: predicted / measured per sync and steps/s, each with its relative error.",
        ("scripts/validate_plan.py",),
        1800,
        " (each cell: predicted / measured)",
    ),  # noqa: E501
    Bench(
        "numerics",
        "The numeric check on a clean run",
        "ftrun train (default model, 2 groups, no fault): the largest error of every checked sync against its "
        "tolerance, the margin a corrupted round has to exceed.",
        ("scripts/bench_numerics.py",),
        900,
    ),  # noqa: E501
    Bench(
        "sketch-cost",
        "The numeric check's sketches per sync",
        "CPU time of one sync's sketches in the rank, fragment 0 of the default model and of a ~103 M-parameter "
        "model, in process with the worker's code: the average's three sketches alone (before) vs the whole outer "
        "step (after: pseudo-gradient, outer step, merge), alpha 0 and 0.5, each for a sync whose originals the "
        "check derives and one that sketches them (a chain's start, every 17th sync) and their mean per sync, "
        "measured in the same run.",
        ("scripts/bench_numerics.py", "--sketch-cost"),
        900,
    ),  # noqa: E501
    Bench(
        "worker-memory",
        "A training rank's memory over steps",
        "ftrun train (default model, 2 groups, 3000 steps, profiling off) with each worker sampling its RSS and "
        "glibc's allocator statistics (mallinfo2) every 2 s: heap taken from the kernel, bytes held, free bytes "
        "kept in the heap; whether RSS growth is held bytes (a leak) or the allocator's retention.",
        ("scripts/bench_worker_memory.py",),
        1800,
    ),  # noqa: E501
    Bench(
        "recovery",
        "Recovery of a killed group, predicted vs measured",
        "ftrun train --kill 1@15 (120 steps, 3 groups, F=2, H=10, tau=3), then ftrun plan --check of the run: each "
        "recovery phase predicted and measured over its own interval.",
        ("scripts/bench_recovery.py",),
        900,
    ),  # noqa: E501
    Bench(
        "recovery-spares",
        "Kill -> first commit with and without warm spares",
        "ftrun train, default model, 3 groups, 5 kills in one run (1@25, 2@85, 0@145, 1@205, 2@265): without "
        "spares, with --spares 1, with --spares 1 and heartbeat_timeout_ms 500 and 250, and with --spares 2 at 250; "
        "each kill's total and "
        "phases from train's summary, their medians, and the PSS of each group's and each waiting spare's process "
        "tree.",
        ("scripts/bench_recovery.py", "--spares-compare"),
        1800,
    ),  # noqa: E501
    Bench(
        "warm-start",
        "A short sweep cell, cold vs --warm-start; memory per replica group",
        "ftrun sweep of 4 cells of 20 steps (default model, 2 groups) cold and with --warm-start (either way every "
        "cell's agents forked by the sweep's zygote): each cell's wall time against its steps and its check (medians "
        "over cells 2..4, the "
        "first starts cold either way), the warm cells' also against the cold cells' steps and check (a warm cell's "
        "steps run beside its successor's start-up), and each sweep's CPU seconds over all its processes (Python's "
        "bytecode cache on, as an installed ftrun has it); then one training parked at its start gate, alone and with "
        "its agents forked by a zygote: PSS, RSS and private memory per process and per group (agent + rank), the CPU "
        "seconds its agents and ranks took to park, the zygote's own memory and import CPU seconds; and what a child "
        "forked from a parent that imported a rank's modules keeps private vs a fresh process.",
        ("scripts/bench_warm_start.py",),
        1500,
        " (each cell: its wall time, its steps, its check, and the ratio)",
    ),  # noqa: E501
    Bench(
        "chaos",
        "Goodput under a fault storm, predicted vs measured",
        "ftrun train --chaos kill:45,sigterm:90 --chaos-seed 46 (default model, 8 groups, 2000 steps: the "
        "acceptance case, at least 5 minutes of chaos) and its fault-free twin, ftrun compare of the two (goodput "
        "retained) and ftrun plan --check of the compare (tolerance 10%): faults, recoveries (median, p90, phases), "
        "goodput, predicted vs measured; the chaos run's whole-run timeline is kept as docs/img/chaos_timeline.png.",
        ("scripts/bench_chaos.py",),
        3600,
    ),  # noqa: E501
    Bench(
        "paper",
        "The Streaming DiLoCo paper's 1B run",
        "ftrun plan's prediction for the paper's 1B setup on a 1 Gbit/s link (a model, not a measurement).",
        ("-m", "ftrun", "plan", *PAPER.split(), "--json"),
        120,
    ),  # noqa: E501
    Bench(
        "gpu",
        "GPU / NCCL",
        "scripts/gpu_check.py on a machine with CUDA: NCCL streaming, bucketized, an emulated link, --quantize and "
        "baby-nccl runs, each inspected and numerically checked (docs/gpu.md). On a machine without CUDA it records "
        "nothing to measure.",
        ("scripts/gpu_check.py",),
        420,
    ),  # noqa: E501
    Bench(
        "gpu-pgs",
        "GPU process-group matrix",
        "scripts/gpu_pgs.py on a machine with CUDA: NCCL, Baby-NCCL, nccl2 and torchcomms where the installed "
        "torchft, torch and torchcomms offer them; a streaming run, a kill with one relaunch, a plain run and a "
        "bucketized run each, inspected and numerically checked (docs/gpu.md).",
        ("scripts/gpu_pgs.py",),
        420,
    ),  # noqa: E501
    Bench(
        "suite",
        "Test suite",
        "The whole test suite, unit and e2e (its wall time is the figure).",
        ("-m", "pytest", "-q", "-p", "no:cacheprovider"),
    ),  # noqa: E501
)


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine() -> Machine:
    """This machine's facts, read without importing torch."""
    cpu = next((ln.split(":", 1)[1].strip() for ln in _lines("/proc/cpuinfo") if ln.startswith("model name")), "")
    mem = next((int(ln.split()[1]) for ln in _lines("/proc/meminfo") if ln.startswith("MemTotal:")), 0)
    torchft = _version("torchft") if _version("torchft") != "not installed" else _version("torchft-nightly")
    return Machine(
        cpus=os.cpu_count() or 0,
        cpu=cpu or platform.processor() or platform.machine(),
        memory_gb=round(mem / 1024**2, 1),
        os=f"{platform.system()} {platform.release()}",
        python=platform.python_version(),
        torch=_version("torch"),
        torchft=torchft,
    )


def _lines(path: str) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


def last_json(stdout: str) -> Any:
    """The JSON result a script printed last: its last line, or from the last line that opens one."""
    lines = stdout.rstrip().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i][:1] in "{[":
            try:
                return json.loads("\n".join(lines[i:]))
            except json.JSONDecodeError:
                continue
    return None


def run(bench: Bench) -> Record:
    """Run ``bench`` once from the checkout's root and record it (its output goes to stderr too)."""
    argv = [sys.executable, *bench.argv]
    before, start = os.getloadavg()[0], time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True, timeout=bench.timeout_s)
    seconds, after = time.monotonic() - start, os.getloadavg()[0]
    sys.stderr.write(proc.stdout)
    return Record(
        bench=bench.id,
        command=shlex.join(["python", *bench.argv]),
        date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        machine=machine(),
        load_before=round(before, 2),
        load_after=round(after, 2),
        seconds=round(seconds, 1),
        exit_code=proc.returncode,
        result=last_json(proc.stdout),
        table=[ln.rstrip() for ln in proc.stdout.splitlines() if ln.startswith("|")],
    )


def figures(rec: Record) -> list[tuple[str, str]]:
    """The record's figures: its benchmark's own reading, else every top-level value; always its wall time."""
    shown = bench_figures.rows(rec.bench, rec.result) if rec.result is not None else []
    return [*shown, ("wall time of the command", f"{rec.seconds} s (exit {rec.exit_code})")]


# --- the page ----------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;")


def _machine(m: Machine) -> str:
    return f"{m.cpus} CPUs ({m.cpu}), {m.memory_gb} GB, {m.os}, Python {m.python}, torch {m.torch}, torchft {m.torchft}"


def read_records(folder: Path) -> dict[str, Record]:
    """The records in ``folder`` by benchmark id (a file that is not a record: one line, exit 2)."""
    out = {}
    for path in sorted(folder.glob("*.json")):
        try:
            rec = msgspec.json.decode(path.read_bytes(), type=Record)
        except msgspec.DecodeError as e:
            raise SystemExit(f"{path}: not a benchmark record: {e}") from None
        out[rec.bench] = rec
    return out


def render(records: dict[str, Record]) -> str:
    """The page: per benchmark, its figures with command, date, machine and load (deterministic)."""
    out = [
        "# Benchmarks",
        "",
        f"<!-- Generated from docs/benchmarks/*.json: do not edit; run `{COMMAND}`. -->",
        "",
        "**How fast is inspect-trace, what does ftrun cost per training step, how much does streaming hide, and "
        "how close are the plan's predictions to real runs?** Every measured figure the docs cite, with the command "
        "that produced it, when, on what machine and under what load (the 1-minute load average before and after). "
        "Pages link here instead of quoting figures.",
        "",
        f"Regenerate the page from the records: `{COMMAND}`. Measure one benchmark again (it writes "
        f"`docs/benchmarks/ID.json`, then the page): `{COMMAND} --run ID`.",
        "",
    ]
    for b in BENCHES:
        out += [f"## {b.title}", "", f"{_cell(b.what)} Id: `{b.id}`.", ""]
        rec = records.get(b.id)
        if rec is None:
            out += [f"Not measured yet: run `{COMMAND} --run {b.id}` (it runs `python {shlex.join(b.argv)}`).", ""]
            continue
        out += ["| Figure | Value |", "| --- | --- |"]
        out += [f"| {_cell(name)} | {_cell(value)} |" for name, value in figures(rec)]
        if rec.table:  # the script's own table, as it printed it
            out += ["", f"The script's table, as it printed it{b.table_note}:", "", *rec.table]
        out += [
            "",
            f"- Command: `{rec.command}`",
            f"- Date: {rec.date}",
            f"- Machine: {_cell(_machine(rec.machine))}",
            f"- Load (1-minute average, before → after): {rec.load_before} → {rec.load_after}",
            "",
        ]
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write docs/benchmarks.md from the benchmarks' JSON records.")
    ap.add_argument("--run", action="append", default=[], metavar="ID", help="Run benchmark ID first and record it.")
    ap.add_argument("--list", action="store_true", help="List the benchmarks and their commands.")
    ap.add_argument("--records", type=Path, default=RECORDS, help="The records' folder (default docs/benchmarks).")
    ap.add_argument("--out", type=Path, default=PAGE, help="The page (default docs/benchmarks.md).")
    args = ap.parse_args(argv)
    known = {b.id: b for b in BENCHES}
    if args.list:
        for b in BENCHES:
            print(f"{b.id:16s} python {shlex.join(b.argv)}")
        return 0
    for bench_id in args.run:
        if bench_id not in known:
            print(f"--run {bench_id}: unknown benchmark (known: {', '.join(known)})", file=sys.stderr)
            return 2
        rec = run(known[bench_id])
        args.records.mkdir(parents=True, exist_ok=True)
        (args.records / f"{bench_id}.json").write_bytes(msgspec.json.format(msgspec.json.encode(rec)) + b"\n")
    args.out.write_text(render(read_records(args.records)))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
