"""Write docs/process-groups.md, the process-group matrix as run, from its record.

    .venv/bin/python scripts/gen_pgs_page.py --record A/sweep.json B/sweep.json   # record, then render
    .venv/bin/python scripts/gen_pgs_page.py                                      # render the page
    .venv/bin/python scripts/gen_pgs_page.py --check                              # the page is up to date?

Each ``sweep.json`` is one ``ftrun sweep --preset pgs`` run in one venv (one torchft release and
one torch): sweeps in several venvs are merged into one table, one block per (torchft, torch),
each cell's versions as the cell recorded them. ``--record`` writes the rows that matter to
``docs/process-groups.json`` (a ``Record``: the command, the date, the machine, the cells); the
page is rendered from that file alone (deterministic). Every ``unavailable`` cell says what it
needs (``needs``: a GPU, a package, a torch or torchft version, or ftrun support).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "process-groups.json"  # not in docs/benchmarks/: its records are another type
PAGE = ROOT / "docs" / "process-groups.md"
COMMAND = "python scripts/gen_pgs_page.py"
SWEEP_LIMIT = 64 << 20  # bytes of a sweep.json read at most

# (a piece of an unavailable cell's reason, what the cell needs), first match wins
NEEDS = (
    ("--quantize: needs CUDA", "a GPU (CUDA and NCCL: torchft's quantized allreduce)"),
    ("no GPU visible", "a GPU (CUDA)"),
    ("no CUDA GPU visible", "a GPU (CUDA: torch's native NCCL group)"),
    ("has no ProcessGroupNCCL2", "torch >= 2.14 built with NCCL"),
    ("torchcomms is not installed", "the torchcomms package (none on this machine's registry for CPU)"),
    ("has no reconfigure API", "torchft-nightly (the reconfigure API)"),
    ("cannot reconfigure a native group", "torch >= 2.14 (enable_reconfigure)"),
    ("does not build it yet", "ftrun support (a torchcomms build to build it against)"),
)


class Cell(msgspec.Struct, frozen=True):
    """One cell as the page shows it."""

    name: str
    torchft: str
    torch: str
    params: dict[str, Any]
    verdict: str
    numerics: str | None = None
    commits: float | None = None
    recovery_s: float | None = None
    recovery_largest_phase: str | None = None
    problem: str | None = None
    needs: str | None = None


class Record(msgspec.Struct, frozen=True):
    command: str
    date_utc: str
    machine: str
    cells: list[Cell]


def needs(reason: str | None) -> str:
    """What an unavailable cell needs, from its reason (the reason itself when none matches)."""
    text = reason or ""
    return next((need for piece, need in NEEDS if piece in text), text or "not said")


def cells_of(sweep: dict[str, Any]) -> list[Cell]:
    """A sweep.json's cells; versions from each cell, else the sweep's."""
    v = sweep.get("versions") or {}
    torchft = f"{v.get('torchft_distribution')} {v.get('torchft')}"
    out = []
    for c in sweep["cells"]:
        num = c.get("numerics") or {}
        out.append(
            Cell(
                name=c["name"],
                torchft=c.get("torchft") or torchft,
                torch=c.get("torch") or str(v.get("torch")),
                params=c["params"],
                verdict=c["verdict"],
                numerics=num.get("status"),
                commits=c.get("commits"),
                recovery_s=c.get("recovery_s"),
                recovery_largest_phase=c.get("recovery_largest_phase"),
                problem=c.get("problem"),
                needs=needs(c.get("problem")) if c["verdict"] == "unavailable" else None,
            )
        )
    return out


def record(paths: list[Path]) -> Record:
    cells: list[Cell] = []
    for p in paths:
        if not p.is_file() or p.stat().st_size > SWEEP_LIMIT:
            raise SystemExit(f"gen_pgs_page: {p}: not a sweep.json of at most {SWEEP_LIMIT >> 20} MB")
        try:
            cells += cells_of(json.loads(p.read_text()))
        except (ValueError, KeyError, TypeError) as e:
            raise SystemExit(f"gen_pgs_page: {p}: not a sweep.json ({type(e).__name__}: {e})") from None
    machine = f"{os.cpu_count()} CPUs, {platform.system()} {platform.release()}"
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M")
    return Record(f"{COMMAND} --record " + " ".join(map(str, paths)), when, machine, cells)


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, list):
        return "+".join(map(str, v)) if v else "none"
    if isinstance(v, float):
        return f"{v:g}"
    return "" if v is None else str(v)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(rec: Record) -> str:
    lines = [
        f"<!-- Generated from docs/process-groups.json: do not edit; run `{COMMAND}`. -->",
        "# Process-group matrix",
        "",
        "`ftrun sweep --preset pgs` in each venv (one torchft release and one torch each), merged: every process "
        "group the release offers x streaming/plain x per parameter/bucketized x quantize, plus one recovery cell "
        "per group (group 1 of 3 killed at step 15 and relaunched). Verdicts as in [sweep](sweep.md); numerics: "
        "the numeric check of the averaged pseudo-gradients ([numerics](numerics.md)); recovery: the kill -> the "
        "group's first commit back, and the phase holding most of it.",
        "",
        f"Recorded {rec.date_utc} UTC on {rec.machine} (`{_md(rec.command)}`); timings are one run's on a "
        "shared machine, not a benchmark.",
        "",
        "The GPU process groups (NCCL, Baby-NCCL, nccl2, torchcomms) run in `scripts/gpu_check.sh pgs` on a "
        "machine with CUDA ([GPU](gpu.md)); its recorded run is on the benchmarks page "
        "([GPU process-group matrix](benchmarks.md#gpu-process-group-matrix)).",
    ]
    blocks: dict[tuple[str, str], list[Cell]] = {}
    for c in rec.cells:
        blocks.setdefault((c.torchft, c.torch), []).append(c)
    for (torchft, torch), cells in blocks.items():
        lines += ["", f"## {torchft}, torch {torch}", ""]
        lines += [
            "| backend | mode | bucketize | quantize | kill | verdict | numerics | commits | recovery s | problem |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        ran = [c for c in cells if c.verdict not in ("unavailable", "invalid")]
        for c in ran:
            p = c.params
            rec_s = f"{c.recovery_s:.1f} ({c.recovery_largest_phase})" if c.recovery_s is not None else ""
            row = [p.get("backend"), p.get("mode"), p.get("bucketize"), p.get("quantize"), p.get("kill", [])]
            row += [f"**{c.verdict}**", c.numerics, c.commits, rec_s, c.problem]
            lines.append("| " + " | ".join(_md(_fmt(x)) for x in row) + " |")
        missing: dict[tuple[str, str], int] = {}
        for c in cells:
            if c.verdict in ("unavailable", "invalid"):
                key = (str(c.params.get("backend")), c.needs or c.problem or "")
                missing[key] = missing.get(key, 0) + 1
        if missing:
            lines += ["", "| backend | cells not run | needs |", "|---|---|---|"]
            lines += [f"| {b} | {n} | {_md(need)} |" for (b, need), n in missing.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", nargs="+", type=Path, metavar="SWEEP_JSON")
    ap.add_argument("--check", action="store_true", help="exit 1 when the page differs from its record")
    args = ap.parse_args(argv)
    if args.record:
        RECORD.write_bytes(msgspec.json.format(msgspec.json.encode(record(args.record))) + b"\n")
    rec = msgspec.json.decode(RECORD.read_bytes(), type=Record)
    page = render(rec)
    if args.check:
        if not PAGE.is_file() or PAGE.read_text() != page:
            print(f"gen_pgs_page: {PAGE.relative_to(ROOT)} is not its record's page: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
