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

import contextlib
import os
import queue
import re
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from itertools import compress, repeat
from operator import and_, attrgetter, eq, is_, le
from pathlib import Path

import msgspec

from ftrun import gunzip
from ftrun.errors import BadInput
from ftrun.trace import forked
from ftrun.trace.forked import Forked
from ftrun.trace.load import CHUNK as LOAD_CHUNK, GZIP_MAGIC, MAX_TRACE_BYTES, open_regular
from ftrun.trace.schema import EMPTY, GPU_ANNOTATION, ChromeTrace, DistributedInfo, KnownEvent, TraceEvent

CHUNK = (
    1 << 20
)  # bytes decoded at a time: per-call costs vanish, and a chunk and its events stay in cache (4 MB: ~25% slower)
_AHEAD = 2  # gzip: pieces inflated ahead of the decoder
_INFLATED = 8 << 20  # gzip: bytes inflated per call (the thread waits for the GIL between calls)
_WINDOW = 4 << 20  # bytes from the split point in which the seam is looked for
_PAUSE = object()  # on a gzip source's queue: its first half ends here
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


class Fallback(Exception):
    """The fast path cannot read this file exactly: read it whole (``load.load_trace``)."""


class _Tail(msgspec.Struct):
    """The keys after the array, typed as ``ChromeTrace``'s (lenient where it is)."""

    traceEvents: list[TraceEvent]
    distributedInfo: DistributedInfo | None = None
    baseTimeNanoseconds: int | float | str | None = None
    trace_id: str | int | None = None
    deviceProperties: msgspec.Raw = EMPTY


_TAIL = msgspec.json.Decoder(_Tail)


class _Source:
    """The file's bytes (gunzipped when it starts with the gzip magic) poured into the caller's
    buffers, through ``load``'s guard: regular files only (``open_regular``), bounded reads, at
    most ``limit`` bytes out (beyond it, ``Fallback``: ``load_trace`` then says so in its words).
    Reading stops at the end of the first gzip stream, as ``load.read_bounded`` does.

    A plain file is read straight into the buffer (``readinto``: no copy of its own). A gzip
    stream is inflated by a thread while the caller decodes what came before (``ftrun.gunzip`` releases the
    GIL): a queue of at most ``_AHEAD`` pieces of ``CHUNK`` bytes bounds what it inflates ahead.
    The thread starts at the first ``fill`` (a process about to fork has one thread).
    ``close()`` stops and joins that thread.

    Halves: a plain file stops at ``until`` (``at_seam``) and reads on from there
    (``read_on``) or from ``start`` (``from_seam``; a child's source opens at ``start``). A
    gzip stream cannot be entered in the middle, so both processes inflate it, and each finds
    the same seam in the inflated bytes from offset ``split`` (``_seam_in``): the first
    (``split_first``) delivers the bytes before it, pauses there and, once told, goes on from
    either side of it; the second delivers from the seam's ``{`` (no seam: ``Fallback``).

    Every read is by offset (``os.pread``; ``n`` is the next one), never through the fd's own
    position: a forked child's source borrows the parent's descriptor (``fd``, inherited
    across the fork, which shares its position), so both halves read the file the parent
    opened, never the path again (a file renamed over it meanwhile is not read), and neither
    moves the other's reads. A borrowed ``fd`` is not closed by ``close()``."""

    def __init__(
        self,
        path: Path,
        limit: int,
        start: int = 0,
        split: int | None = None,
        split_first: bool = True,
        fd: int | None = None,
    ) -> None:
        self.owned = fd is None
        if fd is None:
            try:
                fd = open_regular(path)
            except BadInput:
                raise Fallback from None
        self.fd = fd
        self.path, self.limit, self.n = path, limit, 0
        self.until: int | None = None  # a plain file's bytes are read up to this offset only (``seek`` lifts it)
        self.start = 0  # a plain file's second half starts here
        self.ended = False
        self.pending = memoryview(b"")
        self.thread: threading.Thread | None = None
        self.split, self.split_first = split, split_first
        self.paused = False  # a gzip stream's first half has ended at its seam
        try:
            self.size = os.fstat(self.fd).st_size
            first = os.pread(self.fd, 2, 0)
        except OSError:
            self.close()
            raise Fallback from None
        self.gz = first == GZIP_MAGIC
        if start:
            if self.gz:  # (never asked: a gzip stream is read from its start)
                self.close()
                raise Fallback
            self.n = start
        elif self.gz:
            self.queue: queue.Queue = queue.Queue(_AHEAD)
            self.stop = threading.Event()
            self.go_on: queue.Queue = queue.Queue(1)  # paused at the seam: True = from its "{", False = its "}"

    def inflated_size(self) -> int:
        """A gzip stream's size inflated, as its trailer says (mod 2**32, one member: a guess)."""
        try:
            return int.from_bytes(os.pread(self.fd, 4, max(0, self.size - 4)), "little")
        except OSError:
            return 0

    def _pieces(self) -> Iterator[bytes]:
        """The stream inflated, ``CHUNK`` bytes at most at a time (a bomb never lands whole)."""
        gz, n = gunzip.Inflater(), 0
        for b in self._raw():
            data = b
            while data and not gz.eof:
                out = gz.decompress(data, _INFLATED)
                data = gz.unconsumed_tail
                n += len(out)
                if n > self.limit:
                    raise Fallback
                if out:
                    yield out
            if gz.eof:
                return
        raise Fallback  # truncated stream: load_trace says so

    def _raw(self) -> Iterator[bytes]:
        """The file's bytes from its start, ``load.CHUNK`` at a time, each read by offset."""
        at = 0
        while True:
            try:
                b = os.pread(self.fd, LOAD_CHUNK, at)
            except OSError as e:
                raise Fallback from e
            if not b:
                return
            at += len(b)
            yield b

    def _inflate(self) -> None:
        """The thread: inflate the stream into the queue; a problem goes on the queue as ``Fallback``."""
        try:
            pieces = self._pieces()
            if self.split is not None and not self._to_seam(pieces, self.split):
                return
            for out in pieces:
                if not self._put(out):
                    return
            self._put(None)
        except Exception:  # BadInput, gunzip.BrokenGzip, Fallback, anything: load_trace then reads it (or words it)
            self._put(Fallback)

    def _to_seam(self, pieces: Iterator[bytes], at: int) -> bool:
        """Deliver up to the seam from ``at`` (the second half: only from it), and what follows
        it in the window it was found in; False when stopped."""
        n, window = 0, bytearray()
        for out in pieces:
            if n < at:
                k = min(len(out), at - n)
                if self.split_first and not self._put(out[:k]):
                    return False
                n, out = n + k, out[k:]
            window += out
            if len(window) >= _WINDOW:
                break
        seam = _seam_in(bytes(window))
        if seam is None:  # none in the window: no halves (the second half's reader gives up)
            if not self.split_first:
                raise Fallback
            return self._put(bytes(window))
        end, start = seam
        if not self.split_first:
            return self._put(bytes(window[start:]))
        if not (self._put(bytes(window[:end])) and self._put(_PAUSE)):
            return False
        while not self.stop.is_set():
            try:
                from_start = self.go_on.get(timeout=0.1)
            except queue.Empty:
                continue
            return not self.stop.is_set() and self._put(bytes(window[start if from_start else end :]))
        return False

    def _put(self, item) -> bool:
        """Queue ``item``; False when stopped (``close`` wakes a put that waits at once)."""
        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=0.1)
                return not self.stop.is_set()
            except queue.Full:
                continue
        return False

    def _next_piece(self) -> memoryview | None:
        if self.ended or self.paused:
            return None
        if self.thread is None:
            self.thread = threading.Thread(target=self._inflate, name="ftrun-gunzip", daemon=True)
            self.thread.start()
        item = self.queue.get()
        if item is Fallback:
            raise Fallback
        if item is _PAUSE:
            self.paused = True  # until go_on: fill says the end, and asking again must not wait
            return None
        if item is None:
            self.ended = True  # (the end is said once: asking again must not wait)
            return None
        return memoryview(item)

    def fill(self, view: memoryview) -> int:
        """Write the next bytes into ``view``, as many as fit; how many (fewer only at the end)."""
        done = 0
        while done < len(view):
            if not self.gz:
                want = view[done:] if self.until is None else view[done : done + max(0, self.until - self.n)]
                if not want:
                    break
                try:
                    got = os.preadv(self.fd, [want], self.n)
                except OSError as e:
                    raise Fallback from e
                if not got:
                    break
                self.n += got
                if self.n > self.limit:
                    raise Fallback
            else:
                if not self.pending:
                    piece = self._next_piece()
                    if piece is None:
                        break
                    self.pending = piece
                got = min(len(self.pending), len(view) - done)
                view[done : done + got] = self.pending[:got]
                self.pending = self.pending[got:]
            done += got
        return done

    def _wake(self) -> None:
        """Unblock the thread now, wherever it waits (a put on the full queue, the pause at the
        seam), so it sees ``stop`` at once, not at its next poll (measured: a 0-100 ms wait at
        the end of every large gzip read)."""
        with contextlib.suppress(queue.Full):
            self.go_on.put_nowait(False)
        with contextlib.suppress(queue.Empty):
            while True:
                self.queue.get_nowait()

    @property
    def plain(self) -> bool:
        return not self.gz

    def at_seam(self) -> bool:
        """Whether the bytes ended at the seam (not at the file's end)."""
        return self.paused if self.gz else self.until is not None

    def read_on(self) -> None:
        """Past the seam, in one piece: on from the first half's end."""
        self._go_on(False)

    def from_seam(self) -> None:
        """On from the second half's start (its ``{``), to the end."""
        self._go_on(True)

    def _go_on(self, from_start: bool) -> None:
        if self.gz:
            if self.paused:
                self.paused = False
                self.go_on.put(from_start)
        elif from_start:
            self.n, self.until = self.start, None
        else:
            self.until = None

    def close(self) -> None:
        if self.thread is not None:
            self.stop.set()
            self._wake()
            self.thread.join()
            self.thread = None
        if self.owned:
            os.close(self.fd)


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


def _more(src: _Source, rest: memoryview) -> tuple[bytearray, bool]:
    """(a new buffer: ``rest`` and then up to ``CHUNK`` more bytes of ``src``, whether ``src`` has ended)."""
    buf = bytearray(len(rest) + CHUNK)
    buf[: len(rest)] = rest
    n = len(rest) + src.fill(memoryview(buf)[len(rest) :])
    if n < len(buf):
        del buf[n:]
        return buf, True
    return buf, False


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
    """A candidate place to split a plain file in two (``_seam_in`` the window at ``FIRST_HALF``
    of the file), as offsets in the file; None when there is none in that window."""
    at = int(size * FIRST_HALF)
    try:
        seam = _seam_in(os.pread(fd, _WINDOW, at))
    except OSError:
        return None
    return None if seam is None else (at + seam[0], at + seam[1])


def _seam_in(window: bytes) -> tuple[int, int] | None:
    """(just past an event's ``}``, the ``{`` of the next): the first such pair in ``window``,
    found by bytes alone (it may lie inside a string: the first half's decode checks it)."""
    m = _NEXT.search(window)
    return None if m is None else (m.start() + 1, m.end() - 1)


_NEXT = re.compile(rb"\}\s*,\s*\{")


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
        self._held = _Held()  # events of an ``inside`` name, until every container is known
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
        at = [i for i in _within(self._held, containers) if i not in done]
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
        src = _Source(self.path, self.limit)
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

    def _fork_second_half(self, src: _Source) -> Forked | None:
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

    def _events(self, src: _Source, rest: memoryview) -> Generator[list[TraceEvent], None, memoryview]:
        """Decode ``rest`` (from "[") and then the bytes of ``src`` chunk by chunk, yielding each
        chunk's events (all of them; counted); returns the bytes left at the end of ``src``."""
        # Each chunk gets its own buffer: "[", the bytes not decoded yet, the new bytes. A cut at
        # k turns the "," after it into "]" and decodes buf[:k] in place; the events' args
        # (msgspec.Raw) point into that buffer, which is freed with them (kept ones are copied).
        while True:
            buf, eof = _more(src, rest)
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

    def _chunks(self, src: _Source, child: Forked | None) -> Iterator[list[TraceEvent]]:
        buf, m, eof = bytearray(), None, False
        while m is None and len(buf) <= HEAD_LIMIT:
            if eof and src.at_seam():  # the seam in the head: no halves
                _close(child)
                child, eof = None, False
                src.read_on()
            if eof:
                break
            buf, eof = _more(src, memoryview(buf))
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
        src = _Source(self.path, self.limit, start=start, split=split, split_first=False, fd=fd)
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


class _Held:
    """Held events, their ``args`` copied out of their chunk's buffer (which is then freed with
    the chunk's other events), with the pid, tid and ts of each, one list each, read while the
    events are in cache. (Re-encoding them instead, to decode the few released, measured ~9x
    the cost: ~900 ns a held event.)"""

    def __init__(self) -> None:
        self.events: list[TraceEvent] = []
        self.pid: list[int | str] = []
        self.tid: list[int | str] = []
        self.ts: list[float] = []

    def add(self, evs: list[TraceEvent]) -> None:
        for e in evs:
            e.args = e.args.copy()
        self.events += evs
        self.pid += map(_PID, evs)
        self.tid += map(_TID, evs)
        self.ts += map(_TS, evs)

    def pick(self, indices: list[int]) -> list[TraceEvent]:
        """The held events at ``indices``."""
        return list(map(self.events.__getitem__, indices))


def _within(held: _Held, containers: list[tuple[int | str, int | str, float, float]]) -> list[int]:
    """The indices (ascending) of the held events that start within a container of their pid
    and tid (closed intervals, as ``ftrun.trace.spans`` nests spans); per event only C-level
    work. Events in time order (a kineto trace's, per thread) are sliced out of each span by
    bisection; others are placed one by one."""
    by_thread: dict[tuple[int | str, int | str], list[tuple[float, float]]] = {}
    for pid, tid, start, dur in containers:
        by_thread.setdefault((pid, tid), []).append((start, start + dur))
    n = len(held.ts)
    if not n or not by_thread:
        return []
    out: list[int] = []
    for (pid, tid), spans in by_thread.items():
        evs: Sequence[int]
        if held.pid.count(pid) == n and held.tid.count(tid) == n:  # every held event is of this thread
            evs, ts = range(n), held.ts
        else:
            mine = list(map(and_, map(eq, held.pid, repeat(pid)), map(eq, held.tid, repeat(tid))))
            evs, ts = list(compress(range(n), mine)), list(compress(held.ts, mine))
        unions: list[list[float]] = []  # the spans' union, in order
        for lo, hi in sorted(spans):
            if unions and lo <= unions[-1][1]:
                unions[-1][1] = max(unions[-1][1], hi)
            else:
                unions.append([lo, hi])
        if sorted(ts) == ts:
            for lo, hi in unions:
                out += evs[bisect_left(ts, lo) : bisect_right(ts, hi)]
            continue
        starts = [lo for lo, _ in unions]
        ends = [float("-inf"), *(hi for _, hi in unions)]  # ends[i]: the i-th union's end (1-based)
        # bisect_right: how many unions start at or before ts, so ends[that] ends the one it may lie in
        out += compress(evs, map(le, ts, map(ends.__getitem__, map(bisect_right, repeat(starts), ts))))
    return sorted(out) if len(by_thread) > 1 else out  # (the threads' indices are disjoint)


def _close(child: Forked | None) -> None:
    if child is not None:
        child.close()
