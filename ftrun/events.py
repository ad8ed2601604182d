"""Read the JSON-lines event logs (``events/*.jsonl``). The one reader; torch-free.

A group killed mid-write leaves a torn last line, and a relaunched group appends after it, so
a torn record (a line starting with ``{`` that does not parse) may also sit mid-file: it is
skipped. Anything else that is not a JSON object is skipped too, unless ``strict``, where a
line that is not even a torn record, or an unreadable file, is ``BadInput`` naming the place.
"""

from __future__ import annotations

import json
from pathlib import Path

from ftrun.errors import BadInput


def parse_lines(lines: list[str] | list[bytes], path: Path | None = None, strict: bool = False) -> list[dict]:
    out: list[dict] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            text = line.decode(errors="replace") if isinstance(line, bytes) else line
            if strict and n != len(lines) and not text.lstrip().startswith("{"):
                raise BadInput(f"{path}:{n}: not a JSON line") from None
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def read_events(path: Path, strict: bool = False) -> list[dict]:
    """Every record of one event log ([] for a missing file unless ``strict``)."""
    try:
        text = path.read_text() if strict else path.read_text(errors="replace")
    except (OSError, UnicodeDecodeError) as e:
        if strict:
            raise BadInput(f"{path}: unreadable event log ({e})") from None
        return []
    return parse_lines(text.splitlines(), path, strict)
