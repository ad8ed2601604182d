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
from collections.abc import Callable
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import msgspec

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
        "step (after: pseudo-gradient, outer step, merge), alpha 0 and 0.5, measured in the same run.",
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
        "spares, with --spares 1, and with --spares 1 and heartbeat_timeout_ms 500; each kill's total and phases "
        "from train's summary, their medians, and the PSS of each group's and each waiting spare's process tree.",
        ("scripts/bench_recovery.py", "--spares-compare"),
        1800,
    ),  # noqa: E501
    Bench(
        "warm-start",
        "A short sweep cell, cold vs --warm-start; memory per replica group",
        "ftrun sweep of 3 cells of 20 steps (default model, 2 groups) cold and with --warm-start: each cell's wall "
        "time against its steps and its check (medians over cells 2..3, the first starts cold either way); then one "
        "training parked at its start gate: PSS, RSS and private memory per process and per group (agent + rank); "
        "and what a child forked from a parent that imported a rank's modules keeps private vs a fresh process.",
        ("scripts/bench_warm_start.py",),
        1500,
        " (each cell: its wall time, its steps, its check, and the ratio)",
    ),  # noqa: E501
    Bench(
        "chaos",
        "Goodput under a fault storm, predicted vs measured",
        "ftrun train --chaos kill:45,sigterm:90 --chaos-seed 46 (default model, 8 groups, 330 steps) and its "
        "fault-free twin, ftrun compare of the two (goodput retained) and ftrun plan --check of the compare "
        "(tolerance 10%): faults, recoveries (median, p90, phases), goodput, predicted vs measured.",
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


# --- figures: what each record's result says, as (figure, value) rows ---------------------------


def _scalars(result: Any) -> list[tuple[str, str]]:
    """Any result: its top-level numbers, strings and booleans (a list: each item's, numbered)."""
    items = result if isinstance(result, list) else [result]
    rows = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        prefix = f"[{i}] " if len(items) > 1 else ""
        shown = [(k, v) for k, v in item.items() if k != "bench" and isinstance(v, (int, float, str, bool))]
        rows += [(prefix + k, json.dumps(v)) for k, v in shown]
    return rows


def _inspect(r: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [
        (f"inspect-trace, {r['trace_mb']} MB trace, end to end", f"{r['inspect_s']} s"),
        ("json.load of the same trace", f"{r['json_load_s']} s"),
    ]
    if r.get("ratio") is None:
        return [*rows, ("HTA TraceAnalysis load / inspect-trace", "not compared: HTA was not installed")]
    hta = r.get("hta") or "HTA"
    return [
        *rows,
        (f"HTA TraceAnalysis load ({hta})", f"{r['hta_s']} s"),
        ("HTA load / inspect-trace (goal >= 20x)", f"{r['ratio']}x"),
    ]


def _interval(p: dict[str, Any] | None) -> str:
    """A paired ratio (bench_overhead's ``paired``): geometric mean, 95% interval, its verdict."""
    if not p:
        return "not measured"
    lo, hi = p.get("ci95") or [None, None]
    ci = "no interval (one repeat)" if lo is None else f"95% interval {lo}-{hi}"
    return f"{p['ratio']}x over {p['repeats']} repeats, {ci}: {p['verdict']}"


def _overhead(r: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        ("bare torchft DiLoCo loop, wall ms per step (median of repeats)", f"{r['bare_ms_per_step']} ms"),
        ("ftrun train, wall ms per step (median of repeats)", f"{r['ftrun_ms_per_step']} ms"),
        ("ftrun / bare, wall time, paired per repeat (goal 1.00-1.02)", _interval(r.get("paired_ratio"))),
        ("ftrun / bare, CPU time of all processes, paired per repeat", _interval(r.get("paired_cpu_ratio"))),
        ("ftrun's time per step outside the step body", f"{r['outside_step_body_ms_per_step']} ms"),
        ("comparison valid (ftrun measured >= 0.98x the bare loop)", json.dumps(r["valid"])),
    ]


def _compare(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    out = []
    for r in rows:
        s, b = r["per_sync_exposed_ms"], r["per_sync_exposed_control_ms"]
        out += [
            (f"{r['link']}: exposed data, streaming / plain DiLoCo (goal <= 0.10)", f"{r['exposed_ratio']:.3f}"),
            (f"{r['link']}: exposed data ms per sync, streaming / plain", f"{s[0]:.1f} / {s[1]:.1f}"),
            (f"{r['link']}: exposed control ms per sync, streaming / plain", f"{b[0]:.1f} / {b[1]:.1f}"),
            (
                f"{r['link']}: peak bytes per sync, streaming / plain x F (goal 1 +- 0.10)",
                f"{r['peak_vs_1_over_f']:.3f} (F = {r['fragments']})",
            ),
            (
                f"{r['link']}: hidden share of data communication, streaming / plain",
                f"{r['hidden_share'][0]:.0%} / {r['hidden_share'][1]:.0%}",
            ),
            (f"{r['link']}: steps/s, streaming / plain", f"{r['steps_per_s'][0]:.1f} / {r['steps_per_s'][1]:.1f}"),
            (f"{r['link']}: both schedules checked", r["verdict"]),
        ]
    return out


def _numerics(r: dict[str, Any]) -> list[tuple[str, str]]:
    le = r.get("largest_error") or {}
    return [
        ("syncs checked (replica syncs)", f"{r['checked']} ({r['replica_syncs_checked']})"),
        (
            f"largest error / tolerance ({le.get('check')}, {le.get('where')})",
            f"{le.get('ratio'):.3g} (error {le.get('error'):.3g}, tolerance {le.get('tolerance'):.3g})",
        ),
        ("tolerance: Z x the rounding budget, Z", f"{r['z']:g}"),
        ("numeric problems on the clean run", str(r["problems"])),
    ]


def _sketch_cost(r: dict[str, Any]) -> list[tuple[str, str]]:
    rows = []
    for m in r["sketch_cost"]:
        ms, x, sh = m["cpu_ms_per_sync"], m["ratio_after_before"], m["share_of_window"]
        name = f"{m['model']} ({m['params_fragment0']:,} elements in fragment 0, {m['threads']} thread)"
        rows += [
            (f"{name}: CPU ms per sync, before", f"{ms['before']:.3g}"),
            *[(f"{name}: CPU ms per sync, {k} (x before)", f"{ms[k]:.3g} ({x[k]:.2f}x)") for k in x],
            (
                f"{name}: share of the {m['window_steps']} steps between syncs ({m['step_cpu_ms']:.4g} CPU ms each), "
                "before / " + " / ".join(x),
                " / ".join(f"{v * 100:.2f}%" for v in sh.values()),
            ),
        ]
    return rows


def _worker_memory(r: dict[str, Any]) -> list[tuple[str, str]]:
    g = r["growth_bytes_per_step"]
    rows = [
        (f"verdict ({r['steps']} steps, {r['replicas']} groups)", f"{r['verdict']}, plateau: {r['plateau']}"),
        ("share of the first half's heap growth that is free chunks kept", f"{r['retained_share']}"),
        *[
            (
                f"growth per step, bytes, all workers, first / second half: {f}",
                f"{g['first_half'][f]:+.0f} / {g['second_half'][f]:+.0f}",
            )
            for f in ("rss", "arena", "held", "free")
        ],
    ]
    for w in r["workers"]:
        if "quarters" not in w:
            rows.append((w["replica"], f"{w['samples']} sample(s): too few"))
            continue
        q, (a, b) = w["quarters"], w["steps"]
        rows += [
            (f"{w['replica']}, steps {a}-{b}: {f}, MB, first / last quarter's median", f"{q[f][0]} / {q[f][1]}")
            for f in ("rss", "arena", "held", "free")
        ]
        g = w["growth_bytes_per_step"]
        rows.append(
            (
                f"{w['replica']}: heap growth per step, bytes, first / second half",
                f"{g['first_half']['arena']:+.0f} / {g['second_half']['arena']:+.0f}",
            )
        )
    return rows


def _recovery(r: dict[str, Any]) -> list[tuple[str, str]]:
    def s(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    rows = []
    for f in r["faults"]:
        for phase, (pred, meas, err, *judged) in f["phases"].items():
            if judged and judged[0] is None and pred is not None and pred == meas:  # an input, not a prediction
                rows.append((f"{f['fault']}, replica {f['replica']}: {phase}, measured s", f"{s(meas)} (plan's input)"))
                continue
            e = "" if err is None else f" ({err * 100:+.0f}%)"
            name = f"{f['fault']}, replica {f['replica']}: {phase}, predicted / measured s"
            rows.append((name, f"{'not predicted' if pred is None else s(pred)} / {s(meas)}{e}"))
    out = ", ".join(r.get("outside_tolerance") or []) or "none"
    tol = f"{r['tolerance'] * 100:g}% or {r['floor_s']:g} s per phase"
    return [*rows, (f"plan --check verdict (tolerance {tol})", f"{r['verdict']}; outside tolerance: {out}")]


def _spares(r: dict[str, Any]) -> list[tuple[str, str]]:
    rows = []
    for v in r["spares_compare"]:
        if v.get("median_total_s") is None:
            rows.append((v["variant"], f"no recovery measured (exit {v.get('exit_code')}: {v.get('error', '')})"))
            continue
        each = ", ".join("-" if k["total_s"] is None else f"{k['total_s']:.2f}" for k in v["kills"])
        phases = ", ".join(f"{p} {x:.2f}" for p, x in v["median_phases_s"].items() if x is not None)
        rows.append(
            (f"{v['variant']}: kill -> first commit, median s ({v['back']} back)", f"{v['median_total_s']:.2f}")
        )
        rows.append((f"{v['variant']}: each kill, s", each))
        rows.append((f"{v['variant']}: median phases, s", phases))
        mem = f"group {v['group_pss_mb']}" + (f", waiting spare {v['spare_pss_mb']}" if v.get("spare_pss_mb") else "")
        rows.append((f"{v['variant']}: PSS per process tree, MB", mem))
        if v.get("exit_code"):  # the training itself failed after its recoveries (its summary says why)
            rows.append((f"{v['variant']}: ftrun train's exit code", str(v["exit_code"])))
    return rows


def _chaos(r: dict[str, Any]) -> list[tuple[str, str]]:
    c, g, pc = r["chaos_summary"], r["compare"]["goodput"] or {}, r.get("plan_check") or {}
    rec = c["recoveries"]
    phases = ", ".join(f"{k} {v:.2f}" for k, v in rec["phases_median_s"].items() if v is not None)
    rows = [
        ("faults injected (requested)", f"{c['fired']} ({c['requested']}): {json.dumps(c['by_kind'])}"),
        ("drawn / realized MTBF, s", f"{c['mtbf_s']} / {c['realized_mtbf_s']}"),
        ("recoveries back, median / p90 s", f"{rec['count']}, {rec['median_s']} / {rec['p90_s']}"),
        ("recovery phases, median s", phases),
        ("run steps missed per fault", f"{c['missed_steps_per_fault']}"),
        ("goodput chaos / twin, steps/s", f"{g.get('chaos_steps_per_s')} / {g.get('twin_steps_per_s')}"),
        ("goodput retained, measured", f"{g.get('retained')}"),
    ]
    if pc:
        rows.append(("goodput retained, predicted (plan)", f"{pc['prediction']['retained']}"))
        rows.append(("plan --check (tolerance 10%)", f"{pc['verdict']}, error {pc['relative_error']}"))
    return rows


def _validation(r: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f"rows within tolerance {r['tolerance']:g}", f"{r['passed']} of {r['rows']}")]


def _large(r: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [
        (f"inspect-trace, {r['trace_mb']} MB trace", f"{r['inspect_s']} s = {r['mb_per_s']} MB/s"),
        ("peak RSS / trace size", f"{r['rss_per_file']} ({r['rss_mb']} MB)"),
    ]
    if "gz_mb" not in r:
        return rows
    return [
        *rows,
        (f"gzipped ({r['gz_mb']} MB): inspect-trace", f"{r['gz_inspect_s']} s = {r['gz_vs_plain']}x the plain file's"),
        ("gzipped: inspect-trace / a bare zlib stream of it", f"{r['gz_vs_zlib']}x ({r['zlib_s']} s)"),
    ]


def _paper(r: dict[str, Any]) -> list[tuple[str, str]]:
    c = r["configs"][0]
    s, p = c["streaming"], c["plain"]
    return [
        (f"compute utilisation on {c['link']['describe']}, streaming", f"{s['compute_utilisation']:.3f}"),
        ("compute utilisation, plain DiLoCo", f"{p['compute_utilisation']:.3f}"),
        ("exposed ms per sync, streaming / plain", f"{s['exposed_ms_per_sync']:.1f} / {p['exposed_ms_per_sync']:.1f}"),
    ]


def _warm_start(r: dict[str, Any]) -> list[tuple[str, str]]:
    rows = []
    for side in ("cold", "warm"):
        x = r[side]
        rows.append(
            (
                f"{side}: median cell wall s / steps s / check s (ratio)",
                f"{x['median_wall_s']:.3g} / {x['median_steps_s']:.3g} / {x['median_check_s']:.3g} "
                f"({x['median_wall_over_steps_and_check']:.3g}x)",
            )
        )
        rows.append((f"{side}: the whole sweep of {r['cells']} cells", f"{x['sweep_wall_s']} s"))
    g, share = r["memory"]["per_group_mb"], r["sharing"]
    rows.append(
        ("one replica group parked (agent + rank): PSS / RSS / private MB", f"{g['pss']} / {g['rss']} / {g['private']}")
    )
    rows.append(
        (
            "private MB of a process that imported a rank's modules: fresh / forked from a pre-imported parent",
            f"{share['fresh_import_private_mb']} / {share['forked_child_private_mb']}",
        )
    )
    return rows


FIGURES: dict[str, Callable[[dict[str, Any]], list[tuple[str, str]]]] = {
    "warm-start": _warm_start,
    "inspect": _inspect,
    "inspect-large": _large,
    "paper": _paper,
    "overhead": _overhead,
    "compare": _compare,  # type: ignore[dict-item]  # its result is a list of rows
    "plan-validation": _validation,
    "numerics": _numerics,
    "recovery": _recovery,
    "recovery-spares": _spares,
    "sketch-cost": _sketch_cost,
    "worker-memory": _worker_memory,
    "chaos": _chaos,
}


def figures(rec: Record) -> list[tuple[str, str]]:
    """The record's figures: its benchmark's own reading, else every top-level value; always its wall time."""
    rows: list[tuple[str, str]] = []
    if rec.result is not None:
        try:
            rows = FIGURES[rec.bench](rec.result) if rec.bench in FIGURES else _scalars(rec.result)
        except (KeyError, TypeError, IndexError):
            rows = _scalars(rec.result)  # an older script's result: show what it holds
    return [*rows, ("wall time of the command", f"{rec.seconds} s (exit {rec.exit_code})")]


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
