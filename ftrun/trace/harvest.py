"""Find the chrome traces a foreign script wrote, anywhere below its directories. Torch-free.

``ftrun launch`` gives every replica group its own directories (its working dir
``groups/replica{r}/`` and its ``FTRUN_TRACE_DIR``), so a trace's replica is the group whose
directory holds it. Files are recognised by content, not by name: any ``.json`` / ``.json.gz``
whose first bytes hold a ``"traceEvents"`` key (what torch's ``export_chrome_trace`` writes).
The rank comes from the trace's ``distributedInfo.rank``, else from a ``rank{g}`` / ``rank-{g}``
/ ``rank_{g}`` in its path below the group's directory, else 0 when the group has one rank;
otherwise it is unknown (``None``) and the caller says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ftrun import gunzip
from ftrun.trace.load import GZIP_MAGIC

HEAD_BYTES = 4 << 20  # torch writes a few small metadata keys, then "traceEvents"
_RANK_META = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*(\d+)')
_RANK_NAME = re.compile(r"rank[_-]?(\d+)", re.I)


@dataclass(frozen=True)
class FoundTrace:
    path: Path
    replica: int
    rank: int | None
    rank_source: str  # "trace metadata" | "path" | "one rank per group" | "unknown"


def _head(path: Path) -> bytes:
    try:
        with path.open("rb") as f:
            data = f.read(HEAD_BYTES)
    except OSError:
        return b""
    if data[:2] == GZIP_MAGIC:
        try:
            return gunzip.Inflater().decompress(data, HEAD_BYTES)
        except gunzip.BrokenGzip:
            return b""
    return data


def sniff(path: Path) -> tuple[int | None, bool] | None:
    """``None`` when ``path`` is not a chrome trace; else (rank from its metadata or None, True)."""
    head = _head(path)
    if not head.lstrip().startswith(b"{") or b'"traceEvents"' not in head:
        return None
    m = _RANK_META.search(head)
    return (int(m[1]) if m else None), True


def find_traces(dirs: dict[int, list[Path]], nproc: int) -> list[FoundTrace]:
    """Every chrome trace below each replica's directories (``dirs``: replica -> directories),
    sorted by replica and path. A file reached from two directories is listed once."""
    out: list[FoundTrace] = []
    seen: set[Path] = set()
    for replica, roots in sorted(dirs.items()):
        for root in roots:
            if not root.is_dir():
                continue
            for p in sorted(root.rglob("*")):
                if not p.name.endswith((".json", ".json.gz")) or not p.is_file() or p.is_symlink():
                    continue
                real = p.resolve()
                if real in seen:
                    continue
                got = sniff(p)
                if got is None:
                    continue
                seen.add(real)
                rank, _ = got
                source = "trace metadata"
                if rank is None:
                    m = _RANK_NAME.search(str(p.relative_to(root)))
                    rank, source = (int(m[1]), "path") if m else (None, "unknown")
                if rank is None and nproc == 1:
                    rank, source = 0, "one rank per group"
                out.append(FoundTrace(p, replica, rank, source))
    return out
