"""``LogTail``: the new complete lines of a growing file (a group's log, the lighthouse's log, a
rank's JSONL event log), read from where the last call stopped; a partial last line waits for
its newline. One home for "tail a file", for the live views and the supervisors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class LogTail:
    """New complete lines of a growing log file, and its last non-empty line."""

    path: Path
    offset: int = 0
    partial: str = ""
    last: str = ""

    def read_new(self) -> list[str]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        self.offset += len(data)
        text = self.partial + data.decode(errors="replace")
        lines = text.split("\n")
        self.partial = lines.pop()
        for ln in reversed(lines):
            if ln.strip():
                self.last = ln.strip()[:300]
                break
        return lines
