#!/usr/bin/env python
"""Benchmark ``ftrun compare streaming baseline`` at a few emulated link speeds.

For each link it runs the real CLI (a subprocess, ``--json``) with the default model and prints,
per link: streaming's exposed data communication over baseline's (ratio), each run's exposed
data and control (quorum + should_commit) time per sync, streaming's peak bytes per sync over
baseline's (target: within 10% of 1/F), each run's hidden share, compute utilisation and steps/s.

Goal (issue): under an emulated 1 Gbit/s link with the default model, streaming's exposed
communication is at most 10% of baseline's, and its peak bytes per sync are within 10% of
baseline/F. The script says whether the first link's row meets it; exit 0 either way unless a
compare itself failed (then 1).

    .venv/bin/python scripts/bench_compare.py                       # 1gbit, 200mbit, 50mbit @ 20 ms
    .venv/bin/python scripts/bench_compare.py --links 1gbit,20ms --steps 120 --json

The machine may be shared: the 1-minute load average before and after each compare is printed
with the row, since exposed time depends on how fast the CPU runs the collectives.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_BIN = Path(sys.executable).with_name("ftrun")
FTRUN = [str(_BIN)] if _BIN.exists() else [sys.executable, "-m", "ftrun"]
DEFAULT_LINKS = ["1gbit,20ms", "200mbit,20ms", "50mbit,20ms"]


def run_compare(link: str, out: Path, extra: list[str], timeout: float) -> tuple[dict | None, str, float]:
    cmd = [
        *FTRUN,
        "compare",
        "streaming",
        "baseline",
        "--link",
        link,
        "--out",
        str(out),
        "--name",
        "c",
        "--json",
        *extra,
    ]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    took = time.monotonic() - t0
    try:
        return json.loads(proc.stdout), f"exit {proc.returncode}", took
    except json.JSONDecodeError:
        tail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return None, f"exit {proc.returncode}: {tail}", took


def ratio(a, b):
    return a / b if a is not None and b else None


def row(link: str, result: dict, load: tuple[float, float], took: float) -> dict:
    s, b = result["runs"]
    f = s["schedule"]["fragments"]
    peak_ratio = ratio(s["peak_sync_bytes"], b["peak_sync_bytes"])
    return {
        "link": link,
        "fragments": f,
        "verdict": result["verdict"],
        "exposed_ratio": ratio(s["exposed_comm_s"], b["exposed_comm_s"]),
        "exposed_s": [s["exposed_comm_s"], b["exposed_comm_s"]],
        "per_sync_exposed_ms": [s["per_sync_exposed_ms"], b["per_sync_exposed_ms"]],
        "per_sync_exposed_control_ms": [s.get("per_sync_exposed_control_ms"), b.get("per_sync_exposed_control_ms")],
        "exposed_total_ratio": ratio(
            s["exposed_comm_s"] + (s.get("exposed_control_s") or 0.0),
            b["exposed_comm_s"] + (b.get("exposed_control_s") or 0.0),
        ),
        "compute_utilisation": [s.get("compute_utilisation"), b.get("compute_utilisation")],
        "peak_ratio": peak_ratio,
        "peak_vs_1_over_f": peak_ratio * f if peak_ratio is not None else None,
        "peak_sync_bytes": [s["peak_sync_bytes"], b["peak_sync_bytes"]],
        "hidden_share": [s["hidden_comm_share"], b["hidden_comm_share"]],
        "steps_per_s": [s["steps_per_s"], b["steps_per_s"]],
        "syncs": [s["syncs"], b["syncs"]],
        "load_1m": list(load),
        "compare_s": took,
        "compare_dir": result["compare_dir"],
    }


def fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def print_table(rows: list[dict]) -> None:
    head = [
        "link",
        "exposed S/B",
        "data ms/sync S | B",
        "control ms/sync S | B",
        "peak S/B (x F)",
        "hidden S | B",
        "util S | B",
        "steps/s S | B",
        "load 1m",
        "verdict",
    ]
    lines = [head]
    for r in rows:
        lines.append(
            [
                r["link"],
                fmt(r["exposed_ratio"], ".3f"),
                f"{fmt(r['per_sync_exposed_ms'][0], '.1f')} | {fmt(r['per_sync_exposed_ms'][1], '.1f')}",
                f"{fmt(r['per_sync_exposed_control_ms'][0], '.1f')} | "
                f"{fmt(r['per_sync_exposed_control_ms'][1], '.1f')}",
                f"{fmt(r['peak_ratio'], '.3f')} ({fmt(r['peak_vs_1_over_f'], '.3f')})",
                f"{fmt(r['hidden_share'][0], '.0%')} | {fmt(r['hidden_share'][1], '.0%')}",
                f"{fmt(r['compute_utilisation'][0], '.0%')} | {fmt(r['compute_utilisation'][1], '.0%')}",
                f"{fmt(r['steps_per_s'][0], '.1f')} | {fmt(r['steps_per_s'][1], '.1f')}",
                f"{r['load_1m'][0]:.1f}->{r['load_1m'][1]:.1f}",
                r["verdict"],
            ]
        )
    widths = [max(len(x[i]) for x in lines) for i in range(len(head))]
    for i, ln in enumerate(lines):
        print("  ".join(c.ljust(w) for c, w in zip(ln, widths, strict=False)))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def goal(r: dict) -> tuple[bool, str]:
    exposed_ok = r["exposed_ratio"] is not None and r["exposed_ratio"] <= 0.10
    peak_ok = r["peak_vs_1_over_f"] is not None and abs(r["peak_vs_1_over_f"] - 1.0) <= 0.10
    return exposed_ok and peak_ok, (
        f"goal at {r['link']}: exposed S/B {fmt(r['exposed_ratio'], '.3f')} <= 0.10: {'yes' if exposed_ok else 'NO'}; "
        f"peak bytes/sync S/B x F = {fmt(r['peak_vs_1_over_f'], '.3f')} within 1 +- 0.10: {'yes' if peak_ok else 'NO'}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--links", nargs="+", default=DEFAULT_LINKS, help="emulated links (BANDWIDTH[,LATENCY])")
    ap.add_argument("--steps", type=int, default=None, help="inner steps per run (default: ftrun's default)")
    ap.add_argument("--out", default=None, help="keep compare dirs here (default: a temp dir, removed)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per compare")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON too")
    ap.add_argument("extra", nargs=argparse.REMAINDER, help="after --: more flags for ftrun compare")
    args = ap.parse_args()
    extra = [a for a in args.extra if a != "--"]
    if args.steps is not None:
        extra = ["--steps", str(args.steps), *extra]

    root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench-compare-"))
    print(
        f"# ftrun compare streaming baseline; {os.cpu_count()} CPUs; extra flags: {' '.join(extra) or '(defaults)'}",
        flush=True,
    )
    rows, failed = [], False
    try:
        for i, link in enumerate(args.links):
            out = root / f"link{i}-{link.replace(',', '_').replace('/', '_')}"
            if out.exists():
                shutil.rmtree(out)
            before = os.getloadavg()[0]
            result, status, took = run_compare(link, out, extra, args.timeout)
            after = os.getloadavg()[0]
            if result is None:
                print(f"{link}: compare failed ({status})", flush=True)
                failed = True
                continue
            rows.append(row(link, result, (before, after), took))
            print(f"{link}: done in {took:.0f} s ({status})", flush=True)
    finally:
        if not args.out:
            shutil.rmtree(root, ignore_errors=True)
    print()
    print_table(rows)
    if rows:
        print()
        print(goal(rows[0])[1])
    if args.json:
        print(json.dumps(rows, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
