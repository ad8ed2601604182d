#!/usr/bin/env python3
"""A chaos run's goodput against its fault-free twin, and plan's prediction of it.

    python scripts/bench_chaos.py                          # 8 groups, 330 steps, kill:45,sigterm:90, seed 46
    python scripts/bench_chaos.py --replicas 4 --steps 200 --chaos kill:60

Trains the chaos run (``ftrun train --chaos ... --chaos-seed N``, the default model) and then its
twin (the same flags without ``--chaos``) into a temp dir (removed after), compares them
(``ftrun compare CHAOS TWIN``: both checked, goodput side by side) and holds plan's prediction
against the measured share (``ftrun plan --check COMPARE_DIR --tolerance 0.1``). The last line
is one JSON object: the chaos run's faults, recoveries and goodput (``TrainSummary.chaos``), the
twin's goodput, compare's ``goodput`` and verdict, plan's check (``prediction``,
``measured_retained``, ``relative_error``, ``verdict``), each command's exit code and a failed
training's error line (``train_error``). Exit 1 when a step could not run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ERROR_CHARS = 1000  # of a failed training's error line kept in the record


def _ftrun(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "ftrun", *args]
    sys.stderr.write("$ ftrun " + " ".join(args) + "\n")
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    sys.stderr.write(done.stderr)  # as it would have printed
    return done


def _why(done: subprocess.CompletedProcess[str]) -> str | None:
    """A failed command's last stderr line (ftrun's one-line error), cut at ``ERROR_CHARS``."""
    lines = [x for x in done.stderr.splitlines() if x.strip()]
    return lines[-1][:ERROR_CHARS] if done.returncode and lines else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--steps", type=int, default=330)
    ap.add_argument("--chaos", default="kill:45,sigterm:90")
    ap.add_argument("--seed", type=int, default=46)
    a = ap.parse_args(argv)
    run = ["--replicas", str(a.replicas), "--steps", str(a.steps), "--json"]
    out: dict = {"replicas": a.replicas, "steps": a.steps, "chaos": a.chaos, "seed": a.seed}
    with tempfile.TemporaryDirectory(prefix="ftrun-bench-chaos-") as tmp:
        chaos = _ftrun(
            "train",
            "--out",
            tmp,
            "--run-name",
            "chaos",
            *run,
            "--chaos",
            a.chaos,
            "--chaos-seed",
            str(a.seed),
            timeout=1800,
        )
        twin = _ftrun("train", "--out", tmp, "--run-name", "twin", *run, timeout=1800)
        out["train_exit"] = {"chaos": chaos.returncode, "twin": twin.returncode}
        out["train_error"] = {"chaos": _why(chaos), "twin": _why(twin)}
        if chaos.returncode or twin.returncode:
            print(json.dumps(out))
            return 1
        out["chaos_summary"] = json.loads(chaos.stdout)["chaos"]
        cmp = _ftrun("compare", f"{tmp}/chaos", f"{tmp}/twin", "--out", tmp, "--name", "cmp", "--json", timeout=600)
        out["compare_exit"] = cmp.returncode
        report = json.loads(cmp.stdout) if cmp.stdout.strip() else {}
        out["compare"] = {"verdict": report.get("verdict"), "goodput": report.get("goodput")}
        check = _ftrun("plan", "--check", f"{tmp}/cmp", "--tolerance", "0.1", "--json", timeout=600)
        out["plan_check_exit"] = check.returncode
        out["plan_check"] = json.loads(check.stdout) if check.stdout.strip() else None
    print(json.dumps(out))
    return 0 if out["plan_check"] is not None else 1


if __name__ == "__main__":
    sys.exit(main())
