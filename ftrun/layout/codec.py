"""The one encoder of run-dir records, the run-dir format number, and the bounded JSON-object read. Torch-free."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from ftrun.errors import BadInput
from ftrun.small_files import read_json

# Raise when a field changes meaning or goes away; adding an optional field does not need it.
FORMAT = 1


_ENCODER = msgspec.json.Encoder()


def to_json(record: msgspec.Struct, indent: int | None = None) -> str:
    """A record as JSON text: one line (event logs), or indented (``indent``) for the files people read."""
    if indent is None:
        return _ENCODER.encode(record).decode()
    return json.dumps(msgspec.to_builtins(record), indent=indent)


def json_object(path: Path, limit: int, what: str) -> dict[str, Any]:
    """The file as a JSON object, bounded (``limit``); ``BadInput`` naming the file: unreadable
    ``what``, or not an ftrun ``what`` (JSON that is not an object)."""
    raw = read_json(path, limit, what)
    if not isinstance(raw, dict):
        raise BadInput(f"{path}: not an ftrun {what} (a JSON {type(raw).__name__}, not an object)")
    return raw
