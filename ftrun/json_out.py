"""Strict JSON for the reports ftrun writes (``compare``'s report.json, ``sweep``'s sweep.json and
their ``--json``). Torch-free.

A measured figure can be NaN or infinite (a loss that diverged, a rate over a zero interval);
Python's ``json.dumps`` would write the ``NaN``/``Infinity`` tokens, which are not JSON: strict
readers (``jq``, browsers, msgspec) refuse the whole file. ``report_json`` writes ``null`` for
each such value and says so in the report's ``notes`` (where the value was and what it was), so
a reader learns why a figure is missing. ``strict_json`` is the rule underneath, also what
``ftrun plan --json`` prints.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:  # (a leaf: no run-dir records imported to write JSON)
    from ftrun.layout.codec import JsonObject


def not_finite(value: Any, where: str = "") -> Iterator[tuple[str, float]]:
    """(path, value) of every float in ``value`` that is NaN or infinite; paths like ``cells[2].final_loss``."""
    if isinstance(value, float):
        if not math.isfinite(value):
            yield where or "$", value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from not_finite(v, f"{where}.{k}" if where else str(k))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from not_finite(v, f"{where}[{i}]")


def report_json(record: msgspec.Struct, notes_key: str = "notes") -> str:
    """``record`` (``ftrun.layout.CompareReport``, ``SweepResult``) as strict, indented JSON: NaN
    and infinities are ``null``, each named in its ``notes_key`` (a list, added when missing)
    with the value it had; its ``UNSET`` fields are left out."""
    # the one JSON boundary of these records: their builtins, so that a note can name the path
    result: JsonObject = msgspec.to_builtins(record)
    bad = list(not_finite(result))
    if bad:
        notes = list(result.get(notes_key) or [])
        notes += [f"{path} was {value} (not a JSON number): written as null" for path, value in bad]
        result = {**result, notes_key: notes}
    return strict_json(result)


def _finite(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    return x


def strict_json(result: Any) -> str:
    """``result`` as strict JSON (indented): a float that is not finite becomes ``null``, so no
    reader ever meets ``NaN`` or ``Infinity`` (``allow_nan=False`` guards the rule)."""
    return json.dumps(_finite(result), indent=1, allow_nan=False)
