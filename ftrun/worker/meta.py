"""``meta/replica{r}_rank{g}.json`` (``layout.RankMeta``): what a rank knows about itself, for the parent.

Written at start (status ``running``), at the end (``done``, with commits) or on an error
(``failed``: ``error`` = the error's first line, which the parent shows; ``error_type``; and
``phase`` = the torchft wait it left, ``quorum`` or ``sync``, or ``step``). The parent tells
failures apart by these fields, never by the text of a log.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

from ftrun import layout
from ftrun.output import atomic_write


class RankMeta:
    """The rank's meta record and where it goes; ``fields`` are ``layout.RankMeta``'s."""

    def __init__(self, path: Path, **fields: Any) -> None:
        self.path = path
        if fields.get("versions"):  # torch's version is a str subclass the encoder refuses: plain text
            fields["versions"] = {k: None if v is None else str(v) for k, v in fields["versions"].items()}
        self.record = msgspec.convert({**fields, "pid": os.getpid()}, layout.RankMeta, from_attributes=True)
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, status: str, **fields: Any) -> None:
        self.record = msgspec.structs.replace(self.record, status=status, **fields)
        atomic_write(self.path, layout.to_json(self.record, indent=1))  # the parent may read it meanwhile

    def failed(self, e: BaseException, phase: str | None = None) -> None:
        self.write("failed", error=f"{type(e).__name__}: {e}".strip().splitlines()[0][:500],
                   error_type=type(e).__name__, phase=phase or "step")
