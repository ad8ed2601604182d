"""Read a chrome trace's events in chunks: bounded memory, one decode per byte. Torch-free.

Contract: ``TraceFile(path).chunks()`` yields lists of ``schema.TraceEvent`` (every event of the
file, in file order, a chunk of about ``CHUNK`` bytes at a time); afterwards ``events`` is how
many there were and ``distributedInfo`` is decoded. Nothing but the current chunk is held, so a
trace of any size is read in a few chunks' memory (plus what the caller keeps: an event's
``args`` points into its chunk's bytes, so a caller that keeps events keeps ``args.copy()``).

The fast path only serves files it can read exactly as ``load.load_trace`` would: the object
before ``"traceEvents": [`` and after the array's end are checked by decoding them as a
``ChromeTrace`` with an empty array, and each chunk is cut between two events (``}`` ``,`` ``{``)
and decoded as a whole JSON array of events — a cut inside a string or a nested value never
decodes (its left part is not closed), so it is retried with more bytes. Anything else (a file
that is not valid JSON, an event that is not a ``TraceEvent``, a missing ``traceEvents`` key, an
unreadable file, a broken gzip) raises ``Fallback``: the caller then reads the file with
``load.load_trace``, which gives the same result or the same one-line error as before.
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path
from typing import Iterator, Optional

import msgspec

from ftrun.trace.schema import ChromeTrace, DistributedInfo, TraceEvent

CHUNK = 4 << 20  # bytes decoded at a time: big enough that per-call costs vanish, small next to any trace
HEAD_LIMIT = 64 << 20  # the metadata before "traceEvents" (torch writes a few KB)
GZIP_MAGIC = b"\x1f\x8b"
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_WS = b" \t\r\n"
_EVENTS = msgspec.json.Decoder(list[TraceEvent])
_HEAD = msgspec.json.Decoder(ChromeTrace)


class Fallback(Exception):
    """The fast path cannot read this file exactly: read it whole (``load.load_trace``)."""


class _Tail(msgspec.Struct):
    traceEvents: list[TraceEvent]
    distributedInfo: Optional[DistributedInfo] = None


_TAIL = msgspec.json.Decoder(_Tail)


def _byte_chunks(path: Path) -> Iterator[bytes]:
    """The file's bytes (gunzipped when it starts with the gzip magic), ``CHUNK`` at a time.
    Reading stops at the end of the first gzip stream, as ``load.gunzip`` does."""
    try:
        f = open(path, "rb")
    except OSError:
        raise Fallback from None
    with f:
        try:
            first = f.read(CHUNK)
            if first[:2] != GZIP_MAGIC:
                b = first
                while b:
                    yield b
                    b = f.read(CHUNK)
                return
            gz = zlib.decompressobj(wbits=31)
            b = first
            while b and not gz.eof:
                data = b
                while data and not gz.eof:  # at most CHUNK out per call: a bomb never lands whole
                    out = gz.decompress(data, CHUNK)
                    data = gz.unconsumed_tail
                    if out:
                        yield out
                b = f.read(CHUNK)
            if not gz.eof:
                raise Fallback  # truncated stream: load_trace says so
        except (OSError, zlib.error):
            raise Fallback from None


def _cut(buf: bytearray, lo: int) -> int:
    """Index just past the last ``}`` in ``buf[lo:]`` that is followed by ``, {`` (whitespace
    allowed): a candidate end of one event. -1 when there is none."""
    j = len(buf)
    while True:
        j = buf.rfind(b"{", lo, j)
        if j <= lo:
            return -1
        k = j - 1
        while k > lo and buf[k] in _WS:
            k -= 1
        if buf[k] == 0x2C:  # ","
            k -= 1
            while k > lo and buf[k] in _WS:
                k -= 1
            if buf[k] == 0x7D:  # "}"
                return k + 1


class TraceFile:
    """One trace file, read when ``chunks()`` is iterated (once)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.events = 0
        self.distributedInfo: Optional[DistributedInfo] = None

    def chunks(self) -> Iterator[list[TraceEvent]]:
        src = _byte_chunks(self.path)
        buf = bytearray()
        m = None
        for b in src:
            buf += b
            m = _KEY.search(buf)
            if m is not None or len(buf) > HEAD_LIMIT:
                break
        if m is None:
            raise Fallback
        head = bytes(buf[: m.start()])
        try:  # the keys before traceEvents: a JSON object's opening, nothing nested left open
            self.distributedInfo = _HEAD.decode(head + b'"traceEvents":[]}').distributedInfo
        except msgspec.DecodeError:
            raise Fallback from None
        # Each chunk gets its own buffer: "[", the bytes not decoded yet, the new bytes. A cut at
        # k turns the "," after it into "]" and decodes buf[:k] in place; the events' args
        # (msgspec.Raw) point into that buffer, which is freed with them (kept ones are copied).
        buf = bytearray(buf[m.end() - 1:])
        for b in src:
            buf += b
            if len(buf) < CHUNK:
                continue
            k = _cut(buf, 1)
            if k < 0:
                continue
            comma = buf.index(b",", k)
            buf[comma] = 0x5D  # "]"
            try:
                evs = _EVENTS.decode(memoryview(buf)[: comma + 1])
            except msgspec.ValidationError:
                raise Fallback from None
            except msgspec.DecodeError:
                buf[comma] = 0x2C
                if len(buf) > 8 * CHUNK:
                    raise Fallback from None  # no cut decodes: not a trace this path reads
                continue  # the cut was inside a string or a nested value: more bytes, another cut
            rest = bytearray(b"[")
            rest += memoryview(buf)[comma + 1:]
            buf = rest
            self.events += len(evs)
            yield evs
            del evs
        try:  # the rest of the array and the keys after it
            tail = _TAIL.decode(b'{"traceEvents":' + bytes(buf))
        except msgspec.DecodeError:
            raise Fallback from None
        if tail.distributedInfo is not None:
            self.distributedInfo = tail.distributedInfo
        self.events += len(tail.traceEvents)
        yield tail.traceEvents

