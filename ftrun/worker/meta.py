"""``meta/replica{r}_rank{g}.json``: what a rank knows about itself, for the parent's manifest.

Written at start (status ``running``), at the end (``done``, with commits) or on an error
(``failed``: ``error`` = the error's first line, which the parent shows; ``error_type``; and
``phase`` = the torchft wait it left, ``quorum`` or ``sync``, or ``step``). The parent tells
failures apart by these fields, never by the text of a log.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ftrun.output import atomic_write


class RankMeta:
    def __init__(self, path: Path, **fields: Any) -> None:
        self.path = path
        self.data: dict[str, Any] = {**fields, "pid": os.getpid()}
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, status: str, **fields: Any) -> None:
        self.data.update(fields, status=status)
        atomic_write(self.path, json.dumps(self.data, indent=1))  # the parent may read it meanwhile

    def failed(self, e: BaseException, phase: str | None = None) -> None:
        self.write("failed", error=f"{type(e).__name__}: {e}".strip().splitlines()[0][:500],
                   error_type=type(e).__name__, phase=phase or "step")
