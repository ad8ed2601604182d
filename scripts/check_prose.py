#!/usr/bin/env python3
"""Refuse measurement-diary prose in the README and the docs site.

A measured figure lives in ``docs/benchmarks.md`` (generated, with its command, date, machine
and load); pages link to it. Prose that narrates when and under what load something was
measured ("this session", "before that", "load 2.1-2.9", "2026-12-02") goes stale with the next
run, so ``README.md`` and ``docs/**/*.md`` may not hold it. ``docs/benchmarks.md`` is exempt:
its rows carry their dates and loads by design.

Usage: ``python scripts/check_prose.py [PATH ...]`` (default: README.md and docs/ of this
checkout). Prints one line per hit, ``FILE:LINE: "PHRASE" (why)``, and exits 1 when there is
any, 0 otherwise, 2 when a given path does not exist.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
EXEMPT = frozenset({"benchmarks.md", "process-groups.md"})  # generated: their rows state date and machine on purpose

# (pattern, why): case-insensitive; each names a kind of diary phrase
RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.IGNORECASE), why)
    for p, why in (
        (r"\b(this|last|earlier|previous|later|same|one) session('s)?\b", "a session's narrative"),
        (r"\bbefore that\b", "a measurement history"),
        (r"\bmeasured (today|yesterday|earlier|this (morning|afternoon|evening|week))\b", "a dated measurement"),
        (r"\bat load\b", "a load diary"),
        (r"\(load \d", "a load diary"),
        (r"\bload \d+(\.\d+)?\s*(–|-|to)\s*\d", "a load diary"),
        (r"\bload (was|of|around) \d", "a load diary"),
        (r"\b(19|20)\d\d-(0[1-9]|1[0-2])(-\d\d)?\b", "a date"),
        (r"\bno GPU was lent\b", "a session's circumstances"),
    )
)


class Hit(NamedTuple):
    """One diary phrase: where it is, what matched and which rule."""

    path: Path
    line: int
    phrase: str
    why: str

    def __str__(self) -> str:
        try:
            shown = self.path.relative_to(ROOT)
        except ValueError:
            shown = self.path
        return f'{shown}:{self.line}: "{self.phrase}" ({self.why}; measured figures belong in docs/benchmarks.md)'


def check_text(text: str, path: Path) -> list[Hit]:
    """Every diary phrase in ``text`` (the contents of ``path``), in line order."""
    hits = []
    for n, line in enumerate(text.splitlines(), 1):
        for pattern, why in RULES:
            hits.extend(Hit(path, n, m.group(0), why) for m in pattern.finditer(line))
    return hits


def files_of(paths: list[Path]) -> list[Path]:
    """The Markdown files a check covers: files as given, folders' ``*.md`` recursively, exempt pages left out."""
    out = []
    for p in paths:
        found = sorted(p.rglob("*.md")) if p.is_dir() else [p]
        out.extend(f for f in found if f.name not in EXEMPT or f.parent.name != "docs")
    return out


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or [ROOT / "README.md", ROOT / "docs"]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        print(f"check_prose: no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    hits = [h for f in files_of(paths) for h in check_text(f.read_text(encoding="utf-8"), f)]
    for h in hits:
        print(h)
    return 1 if hits else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
