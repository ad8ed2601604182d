"""``ftrun inspect-trace``: run ``analyze`` and render it. Exit 0 pass, 1 mismatch (BadInput -> 2 in cli)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import msgspec

from ftrun.check.analyze import analyze


def inspect_trace(
    paths: Sequence[Path],
    *,
    fragments: Optional[int] = None,
    sync_every: Optional[int] = None,
    fragment_sync_delay: Optional[int] = None,
    step_numbering: str = "top",
    json_out: bool = False,
) -> int:
    report = analyze(
        paths,
        fragments=fragments,
        sync_every=sync_every,
        fragment_sync_delay=fragment_sync_delay,
        step_numbering=step_numbering,
    )
    if json_out:
        import sys

        sys.stdout.write(msgspec.json.encode(report.to_json()).decode() + "\n")
    else:
        from ftrun.report.inspect_view import render

        render(report)
    return 0 if report.ok else 1
