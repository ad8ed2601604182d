"""Load one chrome trace file (``.json`` or ``.json.gz``) into ``schema.ChromeTrace``.

Contract: returns a decoded trace, or raises ``BadInput`` with one line naming the file and the
problem (missing, unreadable, broken gzip, not JSON / truncated, JSON that is not a chrome
trace). Never any other exception for any file content. Gzip is detected by its magic bytes,
not by the name. Torch-free; stdlib zlib + msgspec only.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import msgspec

from ftrun.errors import BadInput
from ftrun.trace.schema import DECODER, ChromeTrace

GZIP_MAGIC = b"\x1f\x8b"


def read_bytes(path: Path) -> bytes:
    """The file's JSON bytes, gunzipped when it starts with the gzip magic."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except IsADirectoryError:
        raise BadInput(f"{path}: is a directory, expected a trace file") from None
    except OSError as e:
        raise BadInput(f"{path}: cannot read ({e.strerror or e})") from None
    if data[:2] == GZIP_MAGIC:
        return gunzip(path, data)
    return data


def gunzip(path: Path, data: bytes) -> bytes:
    try:
        d = zlib.decompressobj(wbits=31)
        out = d.decompress(data)
        if not d.eof:
            raise BadInput(f"{path}: broken gzip (truncated stream)")
        return out
    except zlib.error as e:
        raise BadInput(f"{path}: broken gzip ({e})") from None


def decode(path: Path, data: bytes) -> ChromeTrace:
    """Decode JSON bytes as a chrome trace, mapping every failure to one ``BadInput`` line."""
    if not data.strip():
        raise BadInput(f"{path}: empty file, expected a chrome trace")
    try:
        return DECODER.decode(data)
    except msgspec.ValidationError as e:
        raise BadInput(f"{path}: JSON but not a chrome trace ({e})") from None
    except msgspec.DecodeError as e:
        if "truncated" in str(e):
            raise BadInput(f"{path}: truncated JSON ({e})") from None
        raise BadInput(f"{path}: not JSON ({e})") from None
    except (RecursionError, MemoryError, ValueError) as e:
        raise BadInput(f"{path}: not a readable chrome trace ({type(e).__name__})") from None


def load_trace(path: Path) -> ChromeTrace:
    """Read and decode ``path``; see the module contract."""
    return decode(path, read_bytes(path))
