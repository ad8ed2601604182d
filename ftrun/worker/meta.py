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
    """The rank's meta record and where it goes. ``fields`` are ``layout.RankMeta``'s, held as
    given: a list the rank keeps filling (``traces``, as the profiler writes them) is written
    as it stands at each ``write``."""

    def __init__(self, path: Path, **fields: Any) -> None:
        self.path = path
        # the record's fields by name as the rank gave them, converted (and so type-checked) into a
        # layout.RankMeta at each write: a list held here is written as it stands then
        self.fields: dict[str, Any] = {**fields, "pid": os.getpid()}
        self.record = self._record()  # a field of the wrong type fails here, at the rank's start
        path.parent.mkdir(parents=True, exist_ok=True)

    def _record(self) -> layout.RankMeta:
        fields = dict(self.fields)
        if fields.get("versions"):  # torch's version is a str subclass the encoder refuses: plain text
            fields["versions"] = {k: None if v is None else str(v) for k, v in fields["versions"].items()}
        return msgspec.convert(fields, layout.RankMeta, from_attributes=True)

    def write(self, status: str, **fields: Any) -> None:
        self.fields.update(fields, status=status)
        self.record = self._record()
        atomic_write(self.path, layout.to_json(self.record, indent=1))  # the parent may read it meanwhile

    def failed(self, e: BaseException, phase: str | None = None) -> None:
        self.write(
            "failed",
            error=f"{type(e).__name__}: {e}".strip().splitlines()[0][:500],
            error_type=type(e).__name__,
            phase=phase or "step",
        )
