"""Load one chrome trace file (``.json`` or ``.json.gz``) into ``schema.ChromeTrace``.

Contract: returns a decoded trace, or raises ``BadInput`` with one line naming the file and the
problem (missing, not a regular file, unreadable, broken gzip, larger than the limit, not JSON /
truncated, JSON that is not a chrome trace). Never any other exception for any file content.
Gzip is detected by its magic bytes, not by the name. Torch-free; msgspec, and ``ftrun.gunzip`` for a gzip stream.

Every read is bounded (``read_bounded``, the one guard; the decoder only ever sees its bytes):
only regular files are opened (a FIFO, a device or a symlink to one is refused without
blocking); the file is read in chunks and gunzipped incrementally, so the bytes handed to the
decoder never exceed ``limit`` (default ``MAX_TRACE_BYTES``; ``inspect-trace --max-trace-mb``
raises it), a gzip bomb stops at the limit, a stream whose first byte cannot start a chrome
trace stops at once, and a signal (Ctrl-C, SIGTERM) ends the read between chunks.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import msgspec

from ftrun import gunzip
from ftrun.errors import BadInput
from ftrun.small_files import file_kind
from ftrun.trace.schema import DECODER, ChromeTrace

GZIP_MAGIC = b"\x1f\x8b"
MAX_TRACE_BYTES = 4 << 30  # 4 GiB of JSON per file: decoding takes about 1.3x that in memory
LIMIT_FLAG = "--max-trace-mb"
CHUNK = 1 << 20


def describe_limit(limit: int) -> str:
    return f"{limit / (1 << 20):,.0f} MB"


def _too_big(path: Path, what: str, limit: int) -> BadInput:
    return BadInput(
        f"{path}: {what} more than the limit of {describe_limit(limit)} per trace (raise it with {LIMIT_FLAG})"
    )


def open_regular(path: Path) -> int:
    """An fd on ``path`` if it is a regular file (symlinks followed); ``BadInput`` otherwise.
    ``O_NONBLOCK``: opening a FIFO never waits for a writer."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except IsADirectoryError:
        raise BadInput(f"{path}: is a directory, expected a trace file") from None
    except OSError as e:
        raise BadInput(f"{path}: cannot read ({e.strerror or e})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = file_kind(mode, "not a regular file")
        target = f" (a symlink to {os.path.realpath(path)})" if os.path.islink(path) else ""
        if kind == "a directory":
            raise BadInput(f"{path}: is a directory, expected a trace file")
        raise BadInput(f"{path}: is {kind}{target}, not a regular file; give a trace file")
    return fd


def _chunks(path: Path, fd: int):
    while True:
        try:
            b = os.read(fd, CHUNK)
        except BlockingIOError:  # cannot happen on a regular file; never spin on one
            raise BadInput(f"{path}: cannot read (would block)") from None
        except OSError as e:
            raise BadInput(f"{path}: cannot read ({e.strerror or e})") from None
        if not b:
            return
        yield b


class _Head:
    """A chrome trace is a JSON object: stop at once when the first byte says it is not."""

    def __init__(self, path: Path) -> None:
        self.path, self.done = path, False

    def check(self, out: bytearray) -> None:
        if self.done:
            return
        i = 0
        while i < len(out) and out[i] in b" \t\r\n":
            i += 1
        if i == len(out):
            return  # only whitespace so far
        self.done = True
        c = out[i : i + 1]
        if c == b"{":
            return
        if c in (b"[", b'"', b"-", b"t", b"f", b"n") or c.isdigit():
            raise BadInput(
                f"{self.path}: JSON but not a chrome trace (starts with {bytes(c)!r}; a trace is an object "
                "holding traceEvents)"
            )
        raise BadInput(f"{self.path}: not JSON (starts with {bytes(c)!r})")


def read_bounded(path: Path, limit: int = MAX_TRACE_BYTES) -> bytearray:
    """The file's JSON bytes (gunzipped when it starts with the gzip magic), at most ``limit``.
    A bytearray (no final copy: the decoder reads any buffer)."""
    fd = open_regular(path)
    try:
        out = bytearray()
        head = _Head(path)
        gz = None
        for b in _chunks(path, fd):
            if gz is None and not out and b[:2] == GZIP_MAGIC:
                gz = gunzip.Inflater()
            if gz is None:
                out += b
                if len(out) > limit:
                    raise _too_big(path, "is", limit)
                head.check(out)
            elif not gz.eof:  # bytes after the gzip stream are not read
                _gunzip_into(path, gz, b, out, limit, head)
        if gz is not None and not gz.eof:
            raise BadInput(f"{path}: broken gzip (truncated stream)")
        return out
    finally:
        os.close(fd)


def _gunzip_into(path: Path, gz, data: bytes, out: bytearray, limit: int, head: _Head) -> None:
    """Decompress ``data`` into ``out`` in pieces of ``CHUNK`` (a bomb stops at ``limit``)."""
    try:
        while data and not gz.eof:
            out += gz.decompress(data, CHUNK)
            if len(out) > limit:
                raise _too_big(path, "decompresses to", limit)
            head.check(out)
            data = gz.unconsumed_tail
    except gunzip.BrokenGzip as e:
        raise BadInput(f"{path}: broken gzip ({e})") from None


def read_bytes(path: Path, limit: int = MAX_TRACE_BYTES) -> bytearray:
    """The file's JSON bytes, bounded (``read_bounded``)."""
    return read_bounded(path, limit)


def decode(path: Path, data: bytes | bytearray) -> ChromeTrace:
    """Decode JSON bytes as a chrome trace, mapping every failure to one ``BadInput`` line."""
    if not data or data.isspace():  # (isspace: no copy of a large buffer)
        raise BadInput(f"{path}: empty file, expected a chrome trace")
    try:
        return DECODER.decode(data)
    except msgspec.ValidationError as e:
        raise BadInput(f"{path}: JSON but not a chrome trace ({e})") from None
    except msgspec.DecodeError as e:
        if "truncated" in str(e):
            raise BadInput(f"{path}: truncated JSON ({e})") from None
        raise BadInput(f"{path}: not JSON ({e})") from None
    except RecursionError:  # (msgspec recurses per level: a 2,000-deep list in 4 KB)
        raise BadInput(f"{path}: not a readable chrome trace (nested too deeply)") from None
    except (MemoryError, ValueError) as e:
        raise BadInput(f"{path}: not a readable chrome trace ({type(e).__name__})") from None


def load_trace(path: Path, limit: int = MAX_TRACE_BYTES) -> ChromeTrace:
    """Read (bounded) and decode ``path``; see the module contract."""
    return decode(path, read_bounded(path, limit))
