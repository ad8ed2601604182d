"""Write the docs' pictures (docs/img/*.png) with ftrun's own renderers, from small checked-in inputs.

    .venv/bin/python scripts/gen_docs_figures.py           # write docs/img/timeline.png, sweep.png, plan.png
    .venv/bin/python scripts/gen_docs_figures.py --check   # regenerate into a temp dir and compare structure

Each picture is what a command writes, made the way that command makes it:

- ``timeline.png``: ``ftrun compare tests/data/cpu_run tests/data/kill_run`` (two real runs the tests
  keep: a streaming run and one whose replica 1 was killed), the ``timeline.png`` it writes;
- ``sweep.png``: ``ftrun.report.sweep_view.draw`` (what ``ftrun sweep`` calls) on
  ``docs/img/src/sweep.json``, the ``sweep.json`` of a real sweep (its command is in the file's
  ``command`` field, the run dirs' paths cut to their names);
- ``plan.png``: ``ftrun plan ... --png`` with the plan page's own example (a model: no run).

A benchmark keeps one more (``RECORDED``), made by its run, not here: ``chaos_timeline.png``, the
chaos benchmark's whole-run timeline (``python scripts/gen_benchmarks_page.py --run chaos``,
scripts/bench_chaos.py), shown on the faults-and-recovery page.

``--check`` (scripts/lint.sh runs it) makes them again in a temp dir and fails, one line each,
when a picture's size in pixels differs from the checked-in one (the structure: lanes, grid
cells and panels set it; pixels differ with fonts and matplotlib releases, so they are not
compared), a checked-in or recorded picture is missing or over ``MAX_BYTES``, a page does not show the
picture it is listed under, or a page shows a picture under docs/img/ that is not there.
Commands that draw never import torch; the script runs ftrun from this checkout.
"""

from __future__ import annotations

import argparse
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
IMG = DOCS / "img"
SWEEP_SRC = IMG / "src" / "sweep.json"
MAX_BYTES = 200_000
PLAN_ARGS = ("--params", "1e9", "--dtype", "bf16", "--step-ms", "400", "--sweep-link", "10mbit..10gbit,20ms")


class Figure(msgspec.Struct, frozen=True):
    """One picture: its file under docs/img/, the page that shows it, how it is made."""

    name: str
    page: str
    make: str  # a key of MAKERS


def _ftrun(*args: str) -> None:
    """Run ``python -m ftrun ARGS`` from the checkout's root; its output is dropped unless it fails."""
    proc = subprocess.run([sys.executable, "-m", "ftrun", *args], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:  # both inputs pass: any other exit is a broken picture, not a verdict
        tail = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise SystemExit(f"gen_docs_figures: ftrun {' '.join(args[:3])} failed: {tail}")


def make_timeline(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _ftrun("compare", "tests/data/cpu_run", "tests/data/kill_run", "--out", tmp, "--name", "c")
        shutil.copyfile(Path(tmp) / "c" / "timeline.png", out)


def make_sweep(out: Path) -> None:
    from ftrun.layout import read_sweep_result
    from ftrun.report.sweep_view import draw

    result = read_sweep_result(SWEEP_SRC)
    with tempfile.TemporaryDirectory() as tmp:  # draw never overwrites: a fresh path, then copied
        shutil.copyfile(draw(result, Path(tmp) / "sweep.png", "exposed_comm_per_sync_ms"), out)


def make_plan(out: Path) -> None:
    _ftrun("plan", *PLAN_ARGS, "--png", str(out))


class Recorded(msgspec.Struct, frozen=True):
    """A picture a benchmark keeps under docs/img/ (its run makes it): its file, the page showing it, the benchmark."""

    name: str
    page: str
    bench: str


RECORDED: tuple[Recorded, ...] = (Recorded("chaos_timeline.png", "faults-and-recovery.md", "chaos"),)
MAKERS: dict[str, Callable[[Path], None]] = {"timeline": make_timeline, "sweep": make_sweep, "plan": make_plan}
FIGURES: tuple[Figure, ...] = (
    Figure("timeline.png", "compare.md", "timeline"),
    Figure("sweep.png", "sweep.md", "sweep"),
    Figure("plan.png", "plan.md", "plan"),
)


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk; (0, 0) for a file that is not a PNG."""
    head = path.read_bytes()[:24]
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return (0, 0)
    w, h = struct.unpack(">II", head[16:24])
    return (w, h)


def write_all(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for fig in FIGURES:
        MAKERS[fig.make](folder / fig.name)
        out.append(folder / fig.name)
    return out


IMG_REF = re.compile(r"\]\((img/[^)\s]+)\)")


def reference_problems() -> list[str]:
    """Pages that miss their picture, and pictures a page shows that are not in docs/img/."""
    problems = []
    for page in sorted(DOCS.glob("*.md")):
        for ref in IMG_REF.findall(page.read_text()):
            if not (DOCS / ref).is_file():
                problems.append(f"docs/{page.name}: shows {ref}, which is not in docs/img/")
    for fig in (*FIGURES, *RECORDED):
        if f"](img/{fig.name})" not in (DOCS / fig.page).read_text():
            problems.append(f"docs/{fig.page}: does not show img/{fig.name} (![...](img/{fig.name}))")
    return problems


def recorded_problems() -> list[str]:
    """Recorded pictures that are missing or over ``MAX_BYTES`` (they are not made again here)."""
    problems = []
    for fig in RECORDED:
        kept = IMG / fig.name
        if not kept.is_file():
            problems.append(
                f"docs/img/{fig.name}: missing (run python scripts/gen_benchmarks_page.py --run {fig.bench})"
            )
        elif kept.stat().st_size > MAX_BYTES:
            problems.append(f"docs/img/{fig.name}: {kept.stat().st_size} bytes, over {MAX_BYTES}")
    return problems


def check() -> list[str]:
    """Every problem ``--check`` finds (module docstring), one line each."""
    problems = reference_problems() + recorded_problems()
    with tempfile.TemporaryDirectory() as tmp:
        for made in write_all(Path(tmp)):
            kept = IMG / made.name
            if not kept.is_file():
                problems.append(f"docs/img/{made.name}: missing (run python scripts/gen_docs_figures.py)")
                continue
            if kept.stat().st_size > MAX_BYTES:
                problems.append(f"docs/img/{made.name}: {kept.stat().st_size} bytes, over {MAX_BYTES}")
            if png_size(made) != png_size(kept):
                problems.append(
                    f"docs/img/{made.name}: {png_size(kept)} px, regenerated {png_size(made)} px "
                    "(run python scripts/gen_docs_figures.py)"
                )
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write the docs' pictures (docs/img/) with ftrun's own renderers.")
    ap.add_argument("--check", action="store_true", help="Regenerate into a temp dir and compare; write nothing.")
    args = ap.parse_args(argv)
    if args.check:
        problems = check()
        for line in problems:
            print(f"gen_docs_figures: {line}", file=sys.stderr)
        return 1 if problems else 0
    for path in write_all(IMG):
        w, h = png_size(path)
        print(f"wrote {path.relative_to(ROOT)} ({w}x{h} px, {path.stat().st_size // 1000} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
