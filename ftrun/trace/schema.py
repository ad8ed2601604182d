"""The typed view of a chrome trace that ftrun decodes: only the fields the checks read.

``msgspec`` skips every other key while parsing, so nothing else is materialised. ``args``
keeps three keys: ``"Input Dims"`` / ``"Input type"`` (present with ``record_shapes=True``; left
undecoded as ``msgspec.Raw`` and parsed only for the few events that need them) and
``"External id"`` (links GPU kernels to CPU ops). ``pid``/``tid`` may be ints or strings.
"""

from __future__ import annotations

from typing import Any, Optional, Union

import msgspec


EMPTY = msgspec.Raw()


class Args(msgspec.Struct, gc=False):
    input_dims: msgspec.Raw = msgspec.field(default=EMPTY, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=EMPTY, name="Input type")
    external_id: Optional[int] = msgspec.field(default=None, name="External id")


class TraceEvent(msgspec.Struct, gc=False):
    name: str = ""
    ph: str = ""
    ts: float = 0.0
    dur: float = 0.0
    tid: Union[int, str] = 0
    pid: Union[int, str] = 0
    cat: str = ""
    args: Optional[Args] = None


class DistributedInfo(msgspec.Struct):
    rank: Optional[int] = None
    world_size: Optional[int] = None
    backend: Optional[str] = None


class ChromeTrace(msgspec.Struct):
    traceEvents: list[TraceEvent]
    distributedInfo: Optional[DistributedInfo] = None


DECODER = msgspec.json.Decoder(ChromeTrace)
_ANY = msgspec.json.Decoder(Any)


def raw_json(raw: msgspec.Raw) -> Any:
    """Decode a deferred ``args`` value (absent or bad JSON gives ``None``)."""
    if not raw:
        return None
    try:
        return _ANY.decode(raw)
    except msgspec.DecodeError:
        return None
