"""Read a chrome trace's events in chunks: bounded memory, one decode per byte. Torch-free.

Contract: ``TraceFile(path).chunks()`` yields lists of ``schema.TraceEvent`` (every event of the
file, in file order, a chunk of about ``CHUNK`` bytes at a time); afterwards ``events`` is how
many there were and ``meta`` is a ``ChromeTrace`` of the other keys (``distributedInfo``, the
run-identity keys ``ftrun.check.provenance`` reads) with an empty ``traceEvents``. Nothing but
the current chunk is held, so a trace of any size is read in a few chunks' memory (plus what
the caller keeps: an event's ``args`` points into its chunk's bytes, so a caller that keeps
events keeps ``args.copy()``; and, with ``inside``, the held events, their ``args`` copied: a
trace's ``aten::copy_`` are about 10% of its bytes).

The fast path only serves files it can read exactly as ``load.load_trace`` would: the object
before ``"traceEvents": [`` and after the array's end are checked by decoding them as a
``ChromeTrace`` with an empty array, and each chunk is cut between two events (``}`` ``,`` ``{``)
and decoded as a whole JSON array of events — a cut inside a string or a nested value never
decodes (its left part is not closed), so it is retried with more bytes. Anything else (a file
that is not valid JSON, an event that is not a ``TraceEvent``, a missing ``traceEvents`` key, an
unreadable file, a broken gzip, a value nested too deeply to decode) raises ``Fallback``: the
caller then reads the file with ``load.load_trace``, which gives the same result or the same one-line error as before.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Generator, Iterator, Mapping
from itertools import compress, repeat
from operator import attrgetter, is_
from pathlib import Path

import msgspec

from ftrun.trace import forked
from ftrun.trace.forked import Forked
from ftrun.trace.load import MAX_TRACE_BYTES
from ftrun.trace.schema import EMPTY, GPU_ANNOTATION, ChromeTrace, DistributedInfo, KnownEvent, TraceEvent
from ftrun.trace.stream_held import Held, within
from ftrun.trace.stream_source import CHUNK, SEAM_WINDOW, Fallback, Source, more, seam_in

_TRIES = 4  # cuts tried, last one first, before reading more (a cut inside a string does not decode)
# A plain file this large is read in two halves at once (scripts/bench_inspect.py --parallelism):
# from a 37 MB file on it took 0.46-0.56x the one-process read's wall and no more CPU, while a
# folder of 19 MB files split one by one took 1.34-1.46x the CPU (and more wall on a busy host).
PARALLEL_BYTES = 32 << 20
# A gzip stream is never split (None): both processes inflate it up to the seam (a folder of gzip
# traces split took 2.1x the CPU, no less wall: scripts/bench_inspect.py --parallelism).
GZ_PARALLEL_BYTES: int | None = None
FIRST_HALF = 0.5  # of the file, read here (this process also decodes what the child sends back, but the child
# places its held copies too: measured, a half each finishes together)
GZ_FIRST_HALF = 0.52  # of a gzip stream's inflated bytes (the child inflates the first part too, unused: measured)
HEAD_LIMIT = 64 << 20  # the metadata before "traceEvents" (torch writes a few KB)
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_WS = b" \t\r\n"
_EVENTS = msgspec.json.Decoder(list[TraceEvent])
_KNOWN = msgspec.json.Decoder(list[KnownEvent])
_HEAD = msgspec.json.Decoder(ChromeTrace)
_ENC = msgspec.json.Encoder()
_NAME = attrgetter("name")
_PID, _TID, _TS = attrgetter("pid"), attrgetter("tid"), attrgetter("ts")
# what the reader does with an event of a name: a falsy code is not yielded as it comes
# (compress(events, codes) keeps the others in C), "" is held (an ``inside`` name's)
_DROP, _KEEP, _CONTAINER, _INSIDE = 0, 1, 2, ""
_CONTAINERS = msgspec.json.Decoder(list[tuple[int | str, int | str, float, float]])


class _Tail(msgspec.Struct):
    """The keys after the array, typed as ``ChromeTrace``'s (lenient where it is)."""

    traceEvents: list[TraceEvent]
    distributedInfo: DistributedInfo | None = None
    baseTimeNanoseconds: int | float | str | None = None
    trace_id: str | int | None = None
    deviceProperties: msgspec.Raw = EMPTY


_TAIL = msgspec.json.Decoder(_Tail)


def _decode(data: memoryview) -> list[TraceEvent]:
    """A JSON array of events: as ``KnownEvent`` (the same values, faster), else as ``TraceEvent``;
    ``Fallback`` when one is not a ``TraceEvent`` (``load_trace`` then words it), ``DecodeError``
    when it is not JSON."""
    try:
        return _KNOWN.decode(data)  # type: ignore[return-value]  # (a list of a subclass)
    except msgspec.ValidationError:
        pass
    try:
        return _EVENTS.decode(data)
    except msgspec.ValidationError:
        raise Fallback from None


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


class _Half(msgspec.Struct, omit_defaults=True):  # (an empty Raw is no JSON: omitted)
    """What the child that read the second half sends last: its event count, the kept events of
    the array's end, the keys after the array."""

    events: int
    kept: list[TraceEvent]
    containers: list[tuple[int | str, int | str, float, float]] = []  # the half's (pid, tid, ts, dur)
    distributedInfo: DistributedInfo | None = None
    baseTimeNanoseconds: int | float | str | None = None
    trace_id: str | int | None = None
    deviceProperties: msgspec.Raw = EMPTY


_HALF = msgspec.json.Decoder(_Half)
_TAIL_KEYS = ("distributedInfo", "baseTimeNanoseconds", "trace_id")


def _seam(fd: int, size: int) -> tuple[int, int] | None:
    """A candidate place to split a plain file in two (``seam_in`` the window at ``FIRST_HALF``
    of the file), as offsets in the file; None when there is none in that window."""
    at = int(size * FIRST_HALF)
    try:
        seam = seam_in(os.pread(fd, SEAM_WINDOW, at))
    except OSError:
        return None
    return None if seam is None else (at + seam[0], at + seam[1])


class TraceFile:
    """One trace file, read when ``chunks()`` is iterated (once).

    ``chunks(keep)`` (``keep``: a name -> bool test, asked once per distinct name) yields only the
    events whose name it keeps (``events`` still counts them all). ``chunks(keep, inside)``:
    an event whose name is a key of ``inside`` (and kept; not a device-side gpu_user_annotation, which is
    yielded as it comes) is yielded only if it starts within an
    ``X`` event named ``inside[name]`` of the same pid and tid (``ts <= e.ts <= ts + dur``), and
    only after all the others (held until every such span is known): a superset of what a
    caller nesting it in those spans finds, without the many that lie outside any (aten::copy_).

    With ``keep``, a large plain file (``PARALLEL_BYTES`` or more of JSON; a gzip stream only
    where ``GZ_PARALLEL_BYTES`` is set, by its trailer's size) on a machine with a second CPU
    is read in two halves at once: a forked child
    (``ftrun.trace.forked``) decodes the second half from a seam found near the middle (a
    gzip stream: the child inflates it too, to the same seam) and sends back its kept events,
    re-encoded, and its held ones within the containers of either half (this process sends it
    its own once its half is read); this process decodes the first half, up to the seam. The
    seam is only a guess until the first half's last decode ends exactly on it (which proves it
    lies between two events of the array); a seam that does not, a child that fails in any
    way, and the file is read on here in one piece, as without a child: the same events
    either way."""

    def __init__(self, path: Path, limit: int = MAX_TRACE_BYTES) -> None:
        self.path = Path(path)
        self.limit = limit
        self.events = 0
        self.meta = ChromeTrace([])  # the keys besides traceEvents (its events are not kept here)
        self.keep: Callable[[str], bool] | None = None
        self.inside: Mapping[str, str] = {}
        self._known: dict[str, int | str] = {}  # name -> _DROP, _KEEP, _CONTAINER or _INSIDE
        self._held = Held()  # events of an ``inside`` name, until every container is known
        self._released_at: set[int] = set()  # the held ones already yielded (by index)
        self._containers: list[tuple[int | str, int | str, float, float]] = []  # (pid, tid, ts, dur)

    def _code(self, name: str) -> int | str:
        assert self.keep is not None
        if not self.keep(name):
            return _DROP
        if name in self.inside:
            return _INSIDE
        return _CONTAINER if name in self.inside.values() else _KEEP

    def _kept(self, evs: list[TraceEvent]) -> list[TraceEvent]:
        """The events whose name ``keep`` keeps (all without ``keep``), those of an ``inside``
        name held back and the containers' spans noted: per event only C-level work (the codes
        a chunk holds are found from its distinct names, and picked by identity, ``is_``: no
        rich comparisons); ``keep`` runs once per name not seen before."""
        if self.keep is None:
            return evs
        known = self._known
        names = list(map(_NAME, evs))
        distinct = set(names)
        if not distinct <= known.keys():
            for name in distinct - known.keys():
                known[name] = self._code(name)
        present = set(map(known.__getitem__, distinct))
        codes = list(map(known.__getitem__, names))
        if _CONTAINER in present:
            self._containers += [
                (e.pid, e.tid, e.ts, e.dur) for e in compress(evs, map(is_, codes, repeat(_CONTAINER))) if e.ph == "X"
            ]
        if _INSIDE in present:
            inside = list(compress(evs, map(is_, codes, repeat(_INSIDE))))
            # a device-side one (kineto's gpu_user_annotation) is yielded as it comes: callers count
            # those wherever they lie, so only host-side ones wait for their containers
            device = [e for e in inside if e.cat == GPU_ANNOTATION]
            self._held.add([e for e in inside if e.cat != GPU_ANNOTATION] if device else inside)
            return [*compress(evs, codes), *device]
        return list(compress(evs, codes))

    def _released(self, containers: list[tuple[int | str, int | str, float, float]]) -> list[TraceEvent]:
        """The held events within one of ``containers`` that no earlier call released: a half's
        own are released as soon as its half is read, the other half's when they come."""
        done = self._released_at
        at = [i for i in within(self._held, containers) if i not in done]
        done.update(at)
        return self._held.pick(at)

    @staticmethod
    def _cut_chunk(buf: bytearray) -> tuple[list[TraceEvent], int] | None:
        """(the events before the last cut of ``buf`` that decodes, the index of the "," after
        them, now "["), or None when none of the last ``_TRIES`` cuts decodes."""
        hi = len(buf)
        for _ in range(_TRIES):
            k = _cut(buf, 1, hi)
            if k < 0:
                return None
            comma = buf.index(b",", k)
            buf[comma] = 0x5D  # "]"
            try:
                evs = _decode(memoryview(buf)[: comma + 1])
            except msgspec.DecodeError:
                buf[comma] = 0x2C
                hi = k - 1  # the cut was inside a string or a nested value: the one before it
                continue
            buf[comma] = 0x5B  # "[": the rest of the buffer starts the next chunk's array
            return evs, comma
        return None

    def chunks(
        self, keep: Callable[[str], bool] | None = None, inside: Mapping[str, str] | None = None
    ) -> Iterator[list[TraceEvent]]:
        self.keep, self.inside = keep, inside or {}
        src = Source(self.path, self.limit)
        child: Forked | None = None
        try:
            if self.keep is not None and forked.usable():
                child = self._fork_second_half(src)
            yield from self._chunks(src, child)
        except RecursionError:  # a value nested deeper than the decoder's stack: load_trace words it
            raise Fallback from None
        finally:
            if child is not None:
                child.close()
            src.close()

    def _fork_second_half(self, src: Source) -> Forked | None:
        """A child reading the second half of a large file (see the class), or None."""
        if src.plain and PARALLEL_BYTES <= src.size <= self.limit:
            seam = _seam(src.fd, src.size)
            if seam is None:
                return None
            src.until, src.start = seam
            most = 4 * (src.size - src.start) + (1 << 20)
            return Forked(lambda inbox: self._second_half(src.fd, seam[1], None, inbox), max_bytes=most)
        if not src.gz or GZ_PARALLEL_BYTES is None:
            return None
        size = src.inflated_size()
        if GZ_PARALLEL_BYTES <= size <= self.limit:
            src.split = at = int(size * GZ_FIRST_HALF)
            return Forked(lambda inbox: self._second_half(src.fd, 0, at, inbox), max_bytes=4 * (size - at) + (1 << 20))
        return None

    def _events(self, src: Source, rest: memoryview) -> Generator[list[TraceEvent], None, memoryview]:
        """Decode ``rest`` (from "[") and then the bytes of ``src`` chunk by chunk, yielding each
        chunk's events (all of them; counted); returns the bytes left at the end of ``src``."""
        # Each chunk gets its own buffer: "[", the bytes not decoded yet, the new bytes. A cut at
        # k turns the "," after it into "]" and decodes buf[:k] in place; the events' args
        # (msgspec.Raw) point into that buffer, which is freed with them (kept ones are copied).
        while True:
            buf, eof = more(src, rest)
            if eof:
                return memoryview(buf)
            got = self._cut_chunk(buf)
            if got is None:
                if len(buf) > 8 * CHUNK:
                    raise Fallback  # no cut decodes: not a trace this path reads
                rest = memoryview(buf)  # more bytes, then try again
                continue
            evs, comma = got
            rest = memoryview(buf)[comma:]
            self.events += len(evs)
            yield evs
            del evs, got

    def _filtered(self, gen: Generator[list[TraceEvent], None, memoryview]):
        """``gen``'s chunks as ``_kept`` keeps them; returns what ``gen`` returns."""
        while True:
            try:
                evs = next(gen)
            except StopIteration as stop:
                return stop.value
            yield self._kept(evs)

    def _tail(self, rest: memoryview) -> _Tail:
        """The rest of the array and the keys after it (its events counted)."""
        try:
            tail = _TAIL.decode(b'{"traceEvents":' + bytes(rest))
        except msgspec.DecodeError:
            raise Fallback from None
        self.events += len(tail.traceEvents)
        return tail

    def _keys_after(self, tail: _Tail | _Half) -> None:
        """A key after the array is the file's (over one before it)."""
        for key in _TAIL_KEYS:
            if getattr(tail, key) is not None:
                setattr(self.meta, key, getattr(tail, key))
        if tail.deviceProperties:
            self.meta.deviceProperties = tail.deviceProperties

    def _chunks(self, src: Source, child: Forked | None) -> Iterator[list[TraceEvent]]:
        buf, m, eof = bytearray(), None, False
        while m is None and len(buf) <= HEAD_LIMIT:
            if eof and src.at_seam():  # the seam in the head: no halves
                _close(child)
                child, eof = None, False
                src.read_on()
            if eof:
                break
            buf, eof = more(src, memoryview(buf))
            m = _KEY.search(buf)
        if m is None:
            raise Fallback
        head = bytes(buf[: m.start()])
        try:  # the keys before traceEvents: a JSON object's opening, nothing nested left open
            self.meta = _HEAD.decode(head + b'"traceEvents":[]}')
        except msgspec.DecodeError:
            raise Fallback from None
        rest = memoryview(buf)[m.end() - 1 :]
        while True:
            rest = yield from self._filtered(self._events(src, rest))
            if not src.at_seam():
                break
            # at the seam: the first half's last events end on it, or it was a guess inside a value
            try:
                evs = _decode(memoryview(bytes(rest) + b"]"))
            except msgspec.DecodeError:
                _close(child)
                child = None
                src.read_on()  # read on from here, in one piece
                continue
            self.events += len(evs)
            yield self._kept(evs)
            del evs
            frames = None
            if child is not None:
                child.send(_ENC.encode(self._containers))  # the child's held events are inside one of these or its own
                yield self._released(self._containers)  # those within this half's, while the child ends its half
                frames = child.result()
            if frames:
                yield from self._from_child(frames)  # (the child's containers join this half's)
                yield self._released(self._containers)
                return
            src.from_seam()  # no second half from the child: read it here
            child, rest = None, memoryview(bytearray(b"["))
        tail = self._tail(rest)
        self._keys_after(tail)
        yield self._kept(tail.traceEvents)
        yield self._released(self._containers)

    def _from_child(self, frames: list[bytes]) -> Iterator[list[TraceEvent]]:
        try:
            for f in frames[:-1]:
                yield _decode(memoryview(f))
            half = _HALF.decode(frames[-1])
        except msgspec.DecodeError:  # (a child that exited 0 wrote what it encoded)
            raise Fallback from None
        self.events += half.events
        self._keys_after(half)
        self._containers += half.containers
        yield half.kept

    def _second_half(self, fd: int, start: int, split: int | None, inbox: Callable[[], bytes | None]) -> list[bytes]:
        """In the child: the kept events of the file the parent opened (``fd``, its descriptor,
        inherited across the fork; never the path again) from ``start`` (an event's ``{``; a
        gzip stream: from the seam after inflated offset ``split``) to the end, encoded,
        then its held events inside its containers or the parent's (``inbox``: the parent's,
        once its half is read; all of them held when none come), and last a ``_Half``.
        ``Fallback`` (or any error) ends the child without a result. Read by a reader of its
        own: nothing of this one changes (as in the child it could not)."""
        other = TraceFile(self.path, self.limit)
        other.keep, other.inside, other._known = self.keep, self.inside, dict(self._known)
        src = Source(self.path, self.limit, start=start, split=split, split_first=False, fd=fd)
        frames: list[bytes] = []
        try:
            gen = other._filtered(other._events(src, memoryview(bytearray(b"["))))
            while True:
                try:
                    evs = next(gen)
                except StopIteration as stop:
                    rest = stop.value
                    break
                if evs:
                    frames.append(_ENC.encode(evs))
                del evs
            tail = other._tail(rest)
        finally:
            src.close()
        kept = other._kept(tail.traceEvents)
        own = list(other._containers)
        frames.append(_ENC.encode(other._released(own)))  # before the parent's half ends
        message = inbox()
        if message is None:  # no containers of the parent: all the others (a superset)
            n = len(other._held.ts)
            frames.append(_ENC.encode(other._held.pick([i for i in range(n) if i not in other._released_at])))
        else:
            frames.append(_ENC.encode(other._released(_CONTAINERS.decode(message))))
        half = _Half(other.events, kept, own, *(getattr(tail, k) for k in _TAIL_KEYS))
        if tail.deviceProperties:
            half.deviceProperties = tail.deviceProperties
        frames.append(_ENC.encode(half))
        return frames


def _close(child: Forked | None) -> None:
    if child is not None:
        child.close()
