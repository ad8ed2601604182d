"""ftrun.gunzip: ISA-L's inflate gives zlib's bytes, stops at the first member, and words a corrupt
stream as ``BrokenGzip``."""

from __future__ import annotations

import gzip
import os
import zlib

import pytest

from ftrun.gunzip import BrokenGzip, Inflater


def _inflate_all(data: bytes, piece: int) -> tuple[bytes, Inflater]:
    d, out = Inflater(), bytearray()
    rest = data
    while rest and not d.eof:
        out += d.decompress(rest, piece)
        rest = d.unconsumed_tail
    return bytes(out), d


@pytest.mark.parametrize("piece", [1, 1000, 0])
def test_same_bytes_as_zlib(piece: int) -> None:
    raw = os.urandom(50_000) + b'{"traceEvents": []}' * 3000
    data = gzip.compress(raw)
    got, d = _inflate_all(data, piece)
    assert got == zlib.decompress(data, wbits=31) == raw and d.eof


def test_first_member_only() -> None:
    got, d = _inflate_all(gzip.compress(b"[1]") + gzip.compress(b"[2]"), 0)
    assert got == b"[1]" and d.eof


def test_truncated_is_not_at_its_end() -> None:
    got, d = _inflate_all(gzip.compress(b"x" * 1000)[:-6], 0)
    assert not d.eof


def test_corrupt_stream_is_broken_gzip() -> None:
    data = bytearray(gzip.compress(b",".join(b"%d" % i for i in range(3000)), mtime=0))  # (deterministic)
    data[20:40] = b"\xff" * 20
    with pytest.raises(BrokenGzip):
        _inflate_all(bytes(data), 0)
