#!/usr/bin/env python3
"""A kill run's recovery, predicted by ``ftrun plan --check`` against what the run measured, phase by phase.

    python scripts/bench_recovery.py                  # kill replica 1 at step 15 of 120
    python scripts/bench_recovery.py --kill 1@15:sigterm

Trains one run with a fault (``ftrun train --kill R@S``: 3 groups, F=2, H=10, tau=3, 100 ms of
compute a step, the small model, as the recovery tests run it; into a temp dir, removed after),
then ``ftrun plan --check RUN_DIR --json``: per fault, each recovery phase (detect, relaunch,
join, reconfigure, heal, catch-up, total) predicted and measured, each over its own interval
(``ftrun.check.recovery``). Relaunch, join and reconfigure are the run's own measurements, not
predictions (plan says so); detect, heal and catch-up are predicted.

    python scripts/bench_recovery.py --spares-compare # kill -> first commit with and without warm spares

``--spares-compare``: the default model, 3 groups, 5 kills one after another in one run (each
group restarts as often as it is killed), four runs: without spares at ftrun's defaults, with
``--spares 1`` at the same defaults, and with ``--spares 1`` and the lighthouse's heartbeat timeout
at each of ``SPARE_HEARTBEAT_MS`` (500 and 250 ms). Per run: each kill's ``total_s`` and phases from the train summary,
their medians, and the proportional set size (PSS, /proc's smaps_rollup) of each replica group's
and each waiting spare's process tree, sampled once the groups trained ``MEMORY_AT_STEP`` steps.
Its last line is one JSON object ``{"spares_compare": [...]}``.

Without it, the last line is one JSON object: ``verdict`` (plan's), ``tolerance``, ``floor_s``, ``faults``
(per fault: ``fault``, ``replica``, ``phases``: phase -> ``[predicted_s, measured_s, error,
within_tolerance]``; ``within_tolerance`` null: not judged, e.g. a phase plan takes from the run),
``outside_tolerance``. Exit 1 when the training or the check could not run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN = ["--width", "32", "--batch-size", "4", "--seq-len", "16", "--replicas", "3", "--fragments", "2"]
RUN += ["--sync-every", "10", "--fragment-sync-delay", "3", "--step-sleep-ms", "100"]
PHASES = ("detect", "relaunch", "join", "reconfigure", "heal", "catch_up", "total")


def ftrun(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ftrun", *args], cwd=ROOT, capture_output=True, text=True, timeout=900)


def _last_line(proc: subprocess.CompletedProcess) -> str:
    return (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or [f"exit {proc.returncode}"])[-1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kill", default="1@15", help="the fault, as ftrun train's --kill (default 1@15)")
    ap.add_argument("--steps", type=int, default=120, help="inner steps (default 120: time to come back)")
    ap.add_argument("--spares-compare", action="store_true", help="kill -> first commit with and without spares")
    args = ap.parse_args()
    if args.spares_compare:
        from bench_spares import compare_spares

        return compare_spares()
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as tmp:
        train = ftrun("train", *RUN, "--steps", str(args.steps), "--kill", args.kill, "--out", tmp, "--run-name", "k")
        if train.returncode != 0:
            print(f"ftrun train --kill {args.kill} failed (exit {train.returncode}): {_last_line(train)}")
            return 1
        check = ftrun("plan", "--check", str(Path(tmp) / "k"), "--json")
        try:
            result = json.loads(check.stdout)
        except json.JSONDecodeError:
            print(f"ftrun plan --check failed (exit {check.returncode}): {_last_line(check)}")
            return 1
    faults = []
    for r in result.get("recovery", []):
        wt = r["within_tolerance"]
        phases = {k: [r["predicted"].get(k), r["measured"].get(k), r["error"].get(k), wt.get(k)] for k in PHASES}
        faults.append({"fault": r["fault"], "replica": r["replica"], "phases": phases})
        for k, (p, m, e, ok) in phases.items():
            print(
                f"{r['fault']} replica {r['replica']} {k:12s} predicted {p} s, measured {m} s, error {e}, judged {ok}"
            )
    out = {
        "verdict": result.get("verdict"),
        "tolerance": result.get("tolerance"),
        "floor_s": result.get("floor_s"),
        "faults": faults,
        "outside_tolerance": result.get("outside_tolerance"),
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
