#!/usr/bin/env python3
"""The numeric check on a clean run: how close the largest error of every checked sync comes to its tolerance.

    python scripts/bench_numerics.py                 # ftrun train --steps 40 (default model, 2 groups)
    python scripts/bench_numerics.py --steps 60

Trains one clean run (``ftrun train --profile none --json`` into a temp dir, removed after; no
fault, no corruption) and reads its summary's numeric check (``numerics``: ``ftrun.check.numerics``):
how many syncs were checked, and its ``largest_error``, the check that came closest to its
tolerance, as error / tolerance. A clean run's errors are rounding: a ratio far below 1 is the
margin a real corruption has to exceed (docs/numerics.md, how corrupted rounds compare).

The last line is one JSON object: ``status``, ``checked`` (syncs), ``replica_syncs_checked``,
``largest_error`` (``check``, ``where``, ``error``, ``tolerance``, ``ratio``), ``z`` (the
tolerance's multiple of the rounding budget), ``problems`` (their count: 0 on a clean run),
``ok`` (the run's own verdict). Exit 1 when the run failed or its summary has no numerics.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40, help="inner training steps (default 40)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-numerics-") as tmp:
        cmd = [sys.executable, "-m", "ftrun", "train", "--steps", str(args.steps), "--profile", "none"]
        cmd += ["--out", tmp, "--run-name", "clean", "--json"]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
        try:
            summary = json.loads(proc.stdout)
        except json.JSONDecodeError:
            print(f"ftrun train failed (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
            return 1
    n = summary.get("numerics") or {}
    tol = n.get("tolerance") or {}
    out = {
        "status": n.get("status"),
        "checked": n.get("checked"),
        "replica_syncs_checked": n.get("replica_syncs_checked"),
        "largest_error": tol.get("largest_error"),
        "z": tol.get("z"),
        "problems": len(n.get("problems") or []),
        "ok": summary.get("ok"),
        "steps": args.steps,
    }
    le = out["largest_error"] or {}
    print(
        f"{out['checked']} sync(s) checked; largest error {le.get('error')} against tolerance {le.get('tolerance')} "
        f"(ratio {le.get('ratio')}) in '{le.get('check')}' at {le.get('where')}; problems {out['problems']}"
    )
    print(json.dumps(out))
    return 0 if summary.get("ok") and n else 1


if __name__ == "__main__":
    sys.exit(main())
