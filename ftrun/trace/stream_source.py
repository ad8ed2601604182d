"""A trace file's bytes for the streaming reader (``ftrun.trace.stream``): a plain file read by
offset, or a gzip stream inflated by a thread ahead of the decoder, either one stopping at a
seam so that two processes can read the halves. Torch-free."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import threading
from collections.abc import Iterator
from pathlib import Path

from ftrun import gunzip
from ftrun.errors import BadInput
from ftrun.trace.load import CHUNK as LOAD_CHUNK, GZIP_MAGIC, open_regular

CHUNK = (
    1 << 20
)  # bytes decoded at a time: per-call costs vanish, and a chunk and its events stay in cache (4 MB: ~25% slower)
SEAM_WINDOW = 4 << 20  # bytes from the split point in which the seam is looked for
_AHEAD = 2  # gzip: pieces inflated ahead of the decoder
_INFLATED = 8 << 20  # gzip: bytes inflated per call (the thread waits for the GIL between calls)
_PAUSE = object()  # on a gzip source's queue: its first half ends here


class Fallback(Exception):
    """The fast path cannot read this file exactly: read it whole (``load.load_trace``)."""


class Source:
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
    the same seam in the inflated bytes from offset ``split`` (``seam_in``): the first
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
            if len(window) >= SEAM_WINDOW:
                break
        seam = seam_in(bytes(window))
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


def more(src: Source, rest: memoryview) -> tuple[bytearray, bool]:
    """(a new buffer: ``rest`` and then up to ``CHUNK`` more bytes of ``src``, whether ``src`` has ended)."""
    buf = bytearray(len(rest) + CHUNK)
    buf[: len(rest)] = rest
    n = len(rest) + src.fill(memoryview(buf)[len(rest) :])
    if n < len(buf):
        del buf[n:]
        return buf, True
    return buf, False


def seam_in(window: bytes) -> tuple[int, int] | None:
    """(just past an event's ``}``, the ``{`` of the next): the first such pair in ``window``,
    found by bytes alone (it may lie inside a string: the first half's decode checks it)."""
    m = _NEXT.search(window)
    return None if m is None else (m.start() + 1, m.end() - 1)


_NEXT = re.compile(rb"\}\s*,\s*\{")
