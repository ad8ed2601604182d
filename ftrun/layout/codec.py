"""The one encoder of run-dir records, the run-dir format and its one rule, and the typed read. Torch-free."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import msgspec

from ftrun.errors import BadInput
from ftrun.small_files import decode_json, read_file

T = TypeVar("T")

# A JSON object as plain builtins (dicts, lists, scalars), where ftrun hands one out rather than
# a record: the public API's documented dict returns (docs/python-api.md: ``Report.to_json``,
# ``failed_commits``, ``numerics``), the strict-JSON writer's last step (``ftrun.json_out``), and
# launch's summary ``inspection`` (the check's ``ReportJson``, which sits in check/ above layout,
# so layout cannot name it). Not for values passed between ftrun's own layers: those are Structs.
JsonObject = dict[str, Any]

# Raise when a field changes meaning or goes away; adding an optional field does not need it.
# 2: the manifest's ``config`` is the ``RunConfig`` tree (1: its flat form by key); the summaries
# carry ``format`` too.
FORMAT = 2


class FormatStamp(msgspec.Struct):
    """What a spec, manifest or summary of any format says about itself: ``format`` (absent:
    written before the field, format 1), and what picks its record type (a manifest's ``kind``;
    a summary's ``mode`` (train) or ``script`` (launch))."""

    format: int = 1
    kind: str | None = None
    mode: object = None
    script: object = None


def refuse_format(path: Path, got: int) -> BadInput:
    """The one rule for a run-dir file of another format: one line naming the file, its format
    and what to do (no compatibility readers)."""
    return BadInput(
        f"{path}: run dir format {got}, this ftrun reads format {FORMAT} "
        "(read it with the ftrun that wrote it, or run it again with this one)"
    )


def read_record(
    path: Path, limit: int, what: str, pick: Callable[[FormatStamp], type[T]], shape: str | None = None
) -> T:
    """A spec, manifest or summary: read once (at most ``limit`` bytes), its ``FormatStamp``
    checked (``refuse_format`` unless ``FORMAT``), then one typed decode as the type ``pick``
    chooses from the stamp (``BadInput`` from ``pick`` for a file of the other kind); ``BadInput``
    (one line naming the file) for any other failure: "unreadable WHAT", "not an ftrun SHAPE"."""
    data = read_file(path, limit, what)
    stamp = decode_json(data, path, what, FormatStamp)
    if stamp.format != FORMAT:
        raise refuse_format(path, stamp.format)
    record: T = decode_json(data, path, shape or what, pick(stamp))
    return record


_ENCODER = msgspec.json.Encoder()


def to_json(record: msgspec.Struct, indent: int | None = None) -> str:
    """A record as JSON text: one line (event logs), or indented (``indent``) for the files people read."""
    if indent is None:
        return _ENCODER.encode(record).decode()
    return json.dumps(msgspec.to_builtins(record), indent=indent)


class ReadAsDict:
    """``summary["key"]``, ``summary.get("key")``: how ``ftrun.api.Run.summary`` (and
    ``Comparison.result``, ``summary.numerics``: ``_READ_AS``) read when it was the file's dict. Deprecated
    (``DeprecationWarning``; README, "What is stable"): the field, as the JSON has it."""

    __slots__ = ()
    __struct_fields__: tuple[str, ...]
    _READ_AS: ClassVar[tuple[str, str]] = ("Run.summary", "summary")  # (the API's attribute, its short name)

    def __getitem__(self, key: str) -> Any:
        self._warn(f"[{key!r}]")
        if key not in self.__struct_fields__:
            raise KeyError(key)
        return msgspec.to_builtins(getattr(self, key))

    def get(self, key: str, default: Any = None) -> Any:
        self._warn(f".get({key!r})")
        return msgspec.to_builtins(getattr(self, key)) if key in self.__struct_fields__ else default

    def __contains__(self, key: object) -> bool:
        self._warn(f" ({key!r} in {self._READ_AS[1]})")
        return key in self.__struct_fields__

    def _warn(self, how: str) -> None:
        import warnings

        api, short = self._READ_AS
        warnings.warn(
            f"{api} is a {type(self).__name__} (ftrun.layout), no longer a dict: read {short}.FIELD, not {short}{how}",
            DeprecationWarning,
            stacklevel=3,
        )
