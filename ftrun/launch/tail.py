"""``LogTail``: the new complete lines of a growing file (a group's log, the lighthouse's log, a
rank's JSONL event log), read from where the last call stopped; a partial last line waits for
its newline. One home for "tail a file", for the live views and the supervisors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Bytes read per call at most: a log that grew by more is caught up over the next calls, so one
# refresh never holds a runaway log in memory (a group prints kilobytes a second)
CHUNK_LIMIT = 8 << 20


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
                data = f.read(CHUNK_LIMIT)
        except OSError:
            return []
        if len(data) == CHUNK_LIMIT and (cut := data.rfind(b"\n")) >= 0:
            data = data[: cut + 1]  # (the rest next call: never a character split in two)
        self.offset += len(data)
        text = self.partial + data.decode(errors="replace")
        lines = text.split("\n")
        self.partial = lines.pop()[-CHUNK_LIMIT:]  # (a line without end keeps only its tail)
        for ln in reversed(lines):
            if ln.strip():
                self.last = ln.strip()[:300]
                break
        return lines
