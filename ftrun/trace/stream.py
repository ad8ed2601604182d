"""Read a chrome trace's events in chunks: bounded memory, one decode per byte. Torch-free.

Contract: ``TraceFile(path).chunks()`` yields lists of ``schema.TraceEvent`` (every event of the
file, in file order, a chunk of about ``CHUNK`` bytes at a time); afterwards ``events`` is how
many there were and ``meta`` is a ``ChromeTrace`` of the other keys (``distributedInfo``, the
run-identity keys ``ftrun.check.provenance`` reads) with an empty ``traceEvents``. Nothing but the current chunk is held, so a
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

import os
import re
import zlib
from pathlib import Path
from typing import Iterator, Optional, Union

import msgspec

from ftrun.errors import BadInput
from ftrun.trace.load import GZIP_MAGIC, MAX_TRACE_BYTES, open_regular
from ftrun.trace.load import _chunks as load_chunks
from ftrun.trace.schema import EMPTY, ChromeTrace, DistributedInfo, TraceEvent

CHUNK = 4 << 20  # bytes decoded at a time: big enough that per-call costs vanish, small next to any trace
HEAD_LIMIT = 64 << 20  # the metadata before "traceEvents" (torch writes a few KB)
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_WS = b" \t\r\n"
_EVENTS = msgspec.json.Decoder(list[TraceEvent])
_HEAD = msgspec.json.Decoder(ChromeTrace)


class Fallback(Exception):
    """The fast path cannot read this file exactly: read it whole (``load.load_trace``)."""


class _Tail(msgspec.Struct):
    """The keys after the array, typed as ``ChromeTrace``'s (lenient where it is)."""

    traceEvents: list[TraceEvent]
    distributedInfo: Optional[DistributedInfo] = None
    baseTimeNanoseconds: Union[int, float, str, None] = None
    trace_id: Union[str, int, None] = None
    deviceProperties: msgspec.Raw = EMPTY


_TAIL = msgspec.json.Decoder(_Tail)


def _byte_chunks(path: Path, limit: int) -> Iterator[bytes]:
    """The file's bytes (gunzipped when it starts with the gzip magic), a piece at a time, through
    ``load``'s guard: regular files only (``open_regular``), bounded reads, at most ``limit``
    bytes out (beyond it, ``Fallback``: ``load_trace`` then says so in its words). Reading stops
    at the end of the first gzip stream, as ``load.read_bounded`` does."""
    try:
        fd = open_regular(path)
    except BadInput:
        raise Fallback from None
    try:
        src = load_chunks(path, fd)
        gz, n = None, 0
        for b in src:
            if gz is None and n == 0 and b[:2] == GZIP_MAGIC:
                gz = zlib.decompressobj(wbits=31)
            if gz is None:
                n += len(b)
                if n > limit:
                    raise Fallback
                yield b
                continue
            data = b
            while data and not gz.eof:  # at most CHUNK out per call: a bomb never lands whole
                out = gz.decompress(data, CHUNK)
                data = gz.unconsumed_tail
                n += len(out)
                if n > limit:
                    raise Fallback
                if out:
                    yield out
            if gz.eof:
                break
        if gz is not None and not gz.eof:
            raise Fallback  # truncated stream: load_trace says so
    except (BadInput, zlib.error):
        raise Fallback from None
    finally:
        os.close(fd)


def _cut(buf: bytearray, lo: int, hi: int) -> int:
    """Index just past the last ``}`` in ``buf[lo:hi]`` that is followed by ``, {`` (whitespace
    allowed): a candidate end of one event. -1 when there is none."""
    j = hi
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

    def __init__(self, path: Path, limit: int = MAX_TRACE_BYTES) -> None:
        self.path = Path(path)
        self.limit = limit
        self.events = 0
        self.meta = ChromeTrace([])  # the keys besides traceEvents (its events are not kept here)

    def _cut_chunk(self, buf: bytearray) -> Optional[tuple[list[TraceEvent], bytearray]]:
        """(the events before a cut near ``CHUNK`` (else the last cut) of ``buf``, a new buffer of
        "[" and the rest), or None when no cut decodes yet."""
        for hi in (min(CHUNK, len(buf)), len(buf)):
            k = _cut(buf, 1, hi)
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
                continue  # the cut was inside a string or a nested value: another cut, or more bytes
            rest = bytearray(b"[")
            rest += memoryview(buf)[comma + 1:]
            return evs, rest
        if len(buf) > 8 * CHUNK:
            raise Fallback  # no cut decodes: not a trace this path reads
        return None

    def chunks(self) -> Iterator[list[TraceEvent]]:
        src = _byte_chunks(self.path, self.limit)
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
            self.meta = _HEAD.decode(head + b'"traceEvents":[]}')
        except msgspec.DecodeError:
            raise Fallback from None
        # Each chunk gets its own buffer: "[", the bytes not decoded yet, the new bytes. A cut at
        # k turns the "," after it into "]" and decodes buf[:k] in place; the events' args
        # (msgspec.Raw) point into that buffer, which is freed with them (kept ones are copied).
        buf = bytearray(buf[m.end() - 1:])
        more = True
        while True:
            while len(buf) >= CHUNK:
                got = self._cut_chunk(buf)
                if got is None:
                    break  # no cut decodes yet: more bytes
                evs, buf = got
                self.events += len(evs)
                yield evs
                del evs, got
            if not more:
                break
            b = next(src, None)
            if b is None:
                more = False
                break
            buf += b
        try:  # the rest of the array and the keys after it
            tail = _TAIL.decode(b'{"traceEvents":' + bytes(buf))
        except msgspec.DecodeError:
            raise Fallback from None
        for key in ("distributedInfo", "baseTimeNanoseconds", "trace_id"):  # a key after the array: the file's
            if getattr(tail, key) is not None:
                setattr(self.meta, key, getattr(tail, key))
        if tail.deviceProperties:
            self.meta.deviceProperties = tail.deviceProperties
        self.events += len(tail.traceEvents)
        yield tail.traceEvents

