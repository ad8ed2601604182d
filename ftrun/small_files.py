"""The one bounded read of a file that is not a trace (traces: ``ftrun.trace.load``): a run-dir
record (``ftrun.layout``'s readers), an event log (``ftrun.event_log``), a ``--config`` file.

Contract: ``read_file(path, limit, what)`` returns at most ``limit`` bytes of a regular file, or
raises ``BadInput`` with one line ``PATH: unreadable WHAT (WHY)``: no such file (``Missing``, so
that a reader for which a missing file is normal can tell), not a regular file (a FIFO, a device
or a directory is never read: the open is ``O_NONBLOCK``, so a FIFO without a writer does not
wait), more than the limit, or the OS's reason. ``read_json`` / ``decode_json``: the file's JSON, bounded in size and in
depth, every failure one ``BadInput`` line naming the file. Torch-free.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, TypeVar, overload

import msgspec

from ftrun.errors import BadInput

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)
_CHUNK = 1 << 20


def file_kind(mode: int, other: str) -> str:
    """What a non-regular file is, as a person reads it (``a FIFO``, ``a directory``...), from
    its ``st_mode`` (``other`` for a kind not in the table); the one table of these, shared with
    the trace loader's guard."""
    return next((k for test, k in _KINDS if test(mode)), other)


class Missing(BadInput):
    """``read_file``'s file does not exist."""


def describe_size(n: int) -> str:
    """A limit as a person reads it: ``64 MB``, ``64 KB``, ``100 bytes``."""
    for unit, shift in (("GB", 30), ("MB", 20), ("KB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def read_file(path: Path, limit: int, what: str) -> bytes:
    """The bytes of the regular file ``path`` (at most ``limit``; see the module contract)."""
    return _read(path, limit, what, whole=True)


def read_head(path: Path, n: int, what: str) -> bytes:
    """The first ``n`` bytes of the regular file ``path`` (fewer: it is shorter), as ``read_file``
    refuses what is not one; the rest is never read."""
    return _read(path, n, what, whole=False)


def _read(path: Path, limit: int, what: str, whole: bool) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise Missing(f"{path}: unreadable {what} (no such file)") from None
    except OSError as e:
        raise BadInput(f"{path}: unreadable {what} ({e.strerror or e})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = file_kind(mode, "something else")
            raise BadInput(f"{path}: unreadable {what} (not a regular file: {kind})")
        parts: list[bytes] = []
        got = 0
        while got <= limit:
            b = os.read(fd, min(_CHUNK, limit + 1 - got))
            if not b:
                break
            parts.append(b)
            got += len(b)
    except BlockingIOError:  # cannot happen on a regular file; never spin on one
        raise BadInput(f"{path}: unreadable {what} (would block)") from None
    except OSError as e:
        raise BadInput(f"{path}: unreadable {what} ({e.strerror or e})") from None
    finally:
        os.close(fd)
    if got > limit and not whole:
        return b"".join(parts)[:limit]
    if got > limit:
        raise BadInput(f"{path}: unreadable {what} (more than {describe_size(limit)})")
    return b"".join(parts)


def read_ends(path: Path, since: int, limit: int) -> bytes | None:
    """The bytes of the regular file ``path`` from offset ``since`` as its size is now; past
    ``limit`` of them only the first and the last ``limit // 2``, joined by a newline (a log: its
    first exception is near the start, its report at the end). None for a missing, irregular (a
    FIFO is never waited on) or unreadable one."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        size, half = st.st_size, limit // 2
        if size - since <= limit:
            return os.pread(fd, max(0, size - since), since)
        return os.pread(fd, half, since) + b"\n" + os.pread(fd, half, size - half)
    except OSError:
        return None
    finally:
        os.close(fd)


def last_byte(path: Path) -> bytes:
    """The last byte of the regular file ``path`` (b"" for a missing, empty or irregular one):
    is a log's last line complete? One byte read, however long the log is."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        size = os.fstat(fd)
        return os.pread(fd, 1, size.st_size - 1) if stat.S_ISREG(size.st_mode) and size.st_size else b""
    except OSError:
        return b""
    finally:
        os.close(fd)


T = TypeVar("T")


@overload
def decode_json(data: bytes, path: Path, what: str, type: type[T], python_json: bool = False) -> T: ...
@overload
def decode_json(data: bytes, path: Path, what: str, type: None = None, python_json: bool = False) -> Any: ...
def decode_json(data: bytes, path: Path, what: str, type: Any = None, python_json: bool = False) -> Any:
    """``data`` (the bytes of ``path``, read bounded by ``read_file``) decoded as JSON, as
    ``type`` when one is given; else ``BadInput`` with one line: ``PATH: unreadable WHAT (WHY)``
    when it is not JSON or is nested deeper than the decoder's stack allows (the
    interpreter's recursion limit, about a thousand levels: ftrun's own files nest a few; the
    decoders recurse, so a 2,000-deep list in a 4 KB file would end in a ``RecursionError``
    traceback), ``PATH: not an ftrun WHAT (WHY)`` when it is JSON of another shape. The one
    decode of every JSON file ftrun reads back (its own or a user's).
    ``python_json``: a file Python's ``json.dumps`` wrote, read as ``json.loads`` reads it (its
    ``NaN``/``Infinity`` tokens too: earlier ftruns wrote them)."""
    try:
        if python_json:  # (then as ``type``: a record of its Python values)
            got = json.loads(data)
            return got if type is None else msgspec.convert(got, type)
        if type is None:
            return msgspec.json.decode(data)
        return msgspec.json.decode(data, type=type)
    except RecursionError:
        raise BadInput(f"{path}: unreadable {what} (nested too deeply)") from None
    except msgspec.ValidationError as e:
        raise BadInput(f"{path}: not an ftrun {what} ({e})") from None
    except (msgspec.DecodeError, ValueError) as e:  # (json's JSONDecodeError, UnicodeDecodeError)
        raise BadInput(f"{path}: unreadable {what} ({e})") from None


@overload
def read_json(path: Path, limit: int, what: str, type: type[T], python_json: bool = False) -> T: ...
@overload
def read_json(path: Path, limit: int, what: str, type: None = None, python_json: bool = False) -> Any: ...
def read_json(path: Path, limit: int, what: str, type: Any = None, python_json: bool = False) -> Any:
    """``read_file`` (at most ``limit`` bytes) then ``decode_json``: one line naming the file for
    every way it can fail."""
    return decode_json(read_file(path, limit, what), path, what, type, python_json)
