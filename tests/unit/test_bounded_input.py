"""Issue 24 item 10: every trace read is bounded. Regular files only (a FIFO, a device, a symlink
to one: one line, exit 2, without blocking); the JSON handed to the decoder is at most the limit
(``--max-trace-mb``), so a gzip bomb stops early; a stream whose first byte cannot start a trace
stops at once; a signal ends the read. Unit tests: no process is started.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import time
import tracemalloc
import zlib
from pathlib import Path

import pytest

from ftrun.errors import BadInput
from ftrun.trace import load
from train_fixtures import inspect as cli, one_line, torchft_events

FLAGS = ["--fragments", "2", "--sync-every", "8", "--fragment-sync-delay", "2"]


def test_a_fifo_as_trace_path_is_one_line_and_never_blocks(tmp_path, deadline):
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    res = cli(str(fifo), *FLAGS)
    assert res.exit_code == 2, res.output
    line = one_line(res)
    assert "FIFO" in line and "not a regular file" in line and str(fifo) in line


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_symlink_to_a_device_is_one_line(tmp_path, deadline, device):
    link = tmp_path / "replica0_rank0.1.pt.trace.json.gz"
    link.symlink_to(device)
    res = cli(str(link), *FLAGS)
    assert res.exit_code == 2, res.output
    line = one_line(res)
    assert "character device" in line and device in line


def _bomb(path: Path, size: int, head: bytes = b"") -> Path:
    """A gzip of ``head`` + ``size`` zero bytes, compressed chunk by chunk (a few hundred KB)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    with path.open("wb") as f:
        f.write(c.compress(head))
        block = b"\0" * (1 << 24)
        for _ in range(size // len(block)):
            f.write(c.compress(block))
        f.write(c.flush())
    return path


class _CountingInflater(load.gunzip.Inflater):
    """The reader's inflater, counting the bytes it inflated: the work done, not the time taken
    (a wall-clock bound here failed on a loaded machine: issue 42 item 14)."""

    inflated = 0

    def decompress(self, data, max_length=0):  # noqa: ANN001, ANN201
        out = super().decompress(data, max_length)
        _CountingInflater.inflated += len(out)
        return out


def test_a_gzip_bomb_stops_at_the_limit(tmp_path, monkeypatch):
    bomb = _bomb(tmp_path / "bomb.json.gz", 512 << 20, head=b'{"traceEvents": [' + b" " * 100)
    monkeypatch.setattr(load.gunzip, "Inflater", _CountingInflater)
    _CountingInflater.inflated = 0
    tracemalloc.start()
    with pytest.raises(BadInput, match="decompresses to more than the limit of 64 MB.*--max-trace-mb"):
        load.read_bounded(bomb, 64 << 20)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 200 << 20, peak  # about the limit, never the 512 MB inside
    assert (64 << 20) < _CountingInflater.inflated <= (64 << 20) + load.CHUNK  # stopped at the limit


def test_a_gzip_bomb_whose_first_byte_is_not_json_stops_at_once(tmp_path, deadline):
    bomb = _bomb(tmp_path / "bomb.json.gz", 512 << 20)  # zeros from byte 0
    tracemalloc.start()
    with pytest.raises(BadInput, match="not JSON"):
        load.read_bounded(bomb)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 16 << 20, peak


def test_the_limit_is_one_line_and_the_flag_raises_it(tmp_path):
    ev = torchft_events(range(1, 9))
    ev += [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "ts": 1.0,
            "dur": 1.0,
            "pid": 1,
            "tid": 1,
            "args": {"pad": "x" * 1000},
        }
        for _ in range(1500)
    ]  # about 1.6 MB of JSON
    t = tmp_path / "replica0_rank0.1.pt.trace.json.gz"
    t.write_bytes(gzip.compress(json.dumps({"traceEvents": ev}).encode()))
    res = cli(str(t), *FLAGS, "--max-trace-mb", "1")
    assert res.exit_code == 2, res.output
    line = one_line(res)
    assert "decompresses to more than the limit of 1 MB" in line and "--max-trace-mb" in line
    res = cli(str(t), *FLAGS, "--max-trace-mb", "2")
    assert res.exit_code == 0, res.output
    assert cli(str(t), *FLAGS, "--max-trace-mb", "0").exit_code == 2


def test_a_signal_ends_the_read(tmp_path, monkeypatch):
    """Reading happens in chunks: a signal's handler runs between two of them (a slow disk:
    each read takes 1 ms)."""
    big = tmp_path / "big.json"
    big.write_bytes(b'{"traceEvents": [' + b" " * (4 << 20) + b"]}")
    monkeypatch.setattr(load, "CHUNK", 4096)
    real_read = os.read

    def slow_read(fd, n):
        time.sleep(0.001)
        return real_read(fd, n)

    monkeypatch.setattr(load.os, "read", slow_read)

    def stop(signum, frame):
        raise KeyboardInterrupt("SIGALRM")

    old = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, 0.05)
    try:
        with pytest.raises(KeyboardInterrupt):
            load.read_bounded(big)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_a_folder_skips_fifos_and_devices(tmp_path, deadline):
    (tmp_path / "replica0_rank0.1.pt.trace.json").write_text(json.dumps({"traceEvents": torchft_events(range(1, 9))}))
    os.mkfifo(tmp_path / "replica1_rank0.1.pt.trace.json")
    (tmp_path / "replica2_rank0.1.pt.trace.json").symlink_to("/dev/zero")
    res = cli(str(tmp_path), *FLAGS)
    assert res.exit_code == 0, res.output
