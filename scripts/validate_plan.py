#!/usr/bin/env python3
"""Validate ``ftrun plan`` against real runs: the 4-link x streaming/baseline table (docs/plan.md, validation).

For each link it trains ``ftrun compare streaming baseline --link LINK`` (60 steps, the default
model, 2 replica groups; on a shared machine wrap it in the e2e lock:
``flock /work/wt/e2e.lock python scripts/validate_plan.py``), then runs ``ftrun plan --check``
on the compare dir and prints one markdown row per run: predicted / measured data and control
per sync, exposed per sync and steps/s with the relative error, and the check's verdict at
``--tolerance`` (0.10; exposed time also passes within 5 ms).

``--reuse DIR`` skips the trainings and checks the compare dirs already under DIR (one per
link, named as this script names them). The machine's 1-minute load before and after each
link's training goes to DIR/load.json (a link trained again replaces its entry), so a table
re-checked later still says the load it was measured under. To keep each locked run short,
train one link per run into the same DIR (``--out DIR --link L``), then ``--reuse DIR``.
The last line is one JSON object: ``{"rows", "passed", "tolerance", "out", "load"}``.

Usage: python scripts/validate_plan.py [--out DIR] [--reuse DIR] [--tolerance 0.10] [--link L ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

LINKS = ("1gbit,2ms", "100mbit,10ms", "20mbit,20ms", "5mbit,50ms")


def ftrun(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ftrun", *args], capture_output=True, text=True, check=check)


def name_of(link: str) -> str:
    return "link-" + re.sub(r"[^0-9a-z]+", "-", link.lower()).strip("-")


def pct(e: float | None) -> str:
    return "-" if e is None else f"{e * 100:+.0f}%"


def ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="where the compare dirs go (default: a new temp dir)")
    ap.add_argument("--reuse", default=None, help="check the compare dirs already under DIR, train nothing")
    ap.add_argument("--tolerance", type=float, default=0.10)
    ap.add_argument("--link", action="append", default=None, help=f"links to validate (default {', '.join(LINKS)})")
    a = ap.parse_args()
    links = a.link or list(LINKS)
    out = Path(a.reuse or a.out or tempfile.mkdtemp(prefix="validate-plan-"))
    load_file = out / "load.json"
    load = json.loads(load_file.read_text()) if load_file.is_file() else {}
    if not a.reuse:
        for link in links:
            print(f"training streaming + baseline on {link} ...", file=sys.stderr, flush=True)
            before = os.getloadavg()[0]
            ftrun("compare", "streaming", "baseline", "--link", link, "--out", str(out), "--name", name_of(link))
            load[link] = [round(before, 2), round(os.getloadavg()[0], 2)]
            load_file.write_text(json.dumps(load, indent=1) + "\n")
    rows, passed = [], 0
    print("| link | run | data ms/sync | control ms/sync | exposed ms/sync (error) | steps/s (error) | check |")
    print("|---|---|---|---|---|---|---|")
    for link in links:
        got = ftrun("plan", "--check", str(out / name_of(link)), "--tolerance", str(a.tolerance), "--json", check=False)
        if got.returncode not in (0, 1):
            raise SystemExit(f"validate_plan: plan --check {out / name_of(link)} failed: {got.stderr.strip()}")
        for r in json.loads(got.stdout)["runs"]:
            p, m, e, ok = r["predicted"], r["measured"], r["error"], r["within_tolerance"]
            good = all(ok[k] is True for k in ("exposed_ms_per_sync", "steps_per_s"))
            passed += good
            rows.append({"link": link, "run": r["name"], "predicted": p, "measured": m, "error": e, "pass": good})
            print(
                f"| {r['link']['describe']} | {r['name']} "
                f"| {ms(p['exposed_data_ms_per_sync'])} / {ms(m['exposed_data_ms_per_sync'])} "
                f"| {ms(p['exposed_control_ms_per_sync'])} / {ms(m['exposed_control_ms_per_sync'])} "
                f"| {ms(p['exposed_ms_per_sync'])} / {ms(m['exposed_ms_per_sync'])} ({pct(e['exposed_ms_per_sync'])}) "
                f"| {p['steps_per_s']:.2f} / {m['steps_per_s']:.2f} ({pct(e['steps_per_s'])}) "
                f"| {'pass' if good else 'FAIL'} |"
            )
    for link in links:
        if link in load:
            print(f"{link}: 1-minute load {load[link][0]:g} before, {load[link][1]:g} after training", file=sys.stderr)
    print(
        json.dumps(
            {
                "rows": len(rows),
                "passed": passed,
                "tolerance": a.tolerance,
                "out": str(out),
                "load": {k: load[k] for k in links if k in load},
            }
        )
    )


if __name__ == "__main__":
    main()
