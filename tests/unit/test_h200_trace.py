"""A real GPU run's traces (tests/data/h200_run: NCCL 2.28, torch 2.11 + CUDA 13, torchft 0.2.0 on an
H200), read as inspect-trace reads them. There torchft's nonblocking NCCL communicator launches each
kernel from NCCL's own thread, which kineto never registered (a pthread id as ``tid``, no host span
on it): the kernel must still be placed in the torchft allreduce its process was running, or no
collective, hidden time or send→done time is measured. Unit: no process."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import ftrun
from ftrun.trace.load import load_trace
from ftrun.trace.spans import extract

DATA = Path(__file__).parent.parent / "data" / "h200_run"


def _spans(path: Path):
    return extract(path, load_trace(path, 1 << 30))


def test_every_nccl_kernel_is_placed_in_its_allreduce_call():
    for path in sorted((DATA / "traces").glob("*.pt.trace.json.gz")):
        sp = _spans(path)
        assert len(sp.kernels) == 29
        assert all(k.launch is not None for k in sp.kernels)  # linked by correlation (cuLaunchKernelEx)
        host = {k.launch.thread for k in sp.kernels if k.launch is not None}
        assert len(host) == 1 and next(iter(host))[1] > 1 << 20  # the launch thread: a pthread id
        calls = [k.call for k in sp.kernels]
        assert None not in calls and len(set(calls)) == 29  # one kernel per call, each call its own
        assert {k.comm.source for k in sp.kernels} == {"record_param_comms"}  # not the kernel name
        assert len(sp.collectives) == 29
        assert any("launched from a thread with no host spans" in n for n in sp.notes)


def test_the_run_passes_with_hidden_and_send_to_done_measured():
    r = ftrun.check_traces(DATA)
    assert r.ok and r.verdict == "pass" and len(r.events) == 8
    syncs = [e for e in r.events if e.kind == "sync"]
    assert len(syncs) == 4
    for e in syncs:
        assert e.sync is not None and e.sync.hidden_comm_ms is not None and e.sync.send_to_done_ms is not None
        assert e.sync.send_to_done_ms > 0
    assert not any("no collective spans" in n for n in r.notes)
    assert sum("launched from a thread with no host spans" in n for n in r.notes) == 1  # said once
    assert r.numerics is not None and r.numerics["status"] == "checked"


def test_a_launch_two_threads_could_have_made_is_not_placed(tmp_path):
    """A collective's host span on a second thread of the process, open at one kernel's launch:
    which thread's collective that kernel is was not recorded, so it is placed in no call and
    its size is not read from either (never a guess); the other 28 stay placed."""
    run = tmp_path / "run"
    shutil.copytree(DATA, run)
    path = sorted((run / "traces").glob("*.pt.trace.json.gz"))[0]
    d = json.loads(gzip.decompress(path.read_bytes()))
    evs = d["traceEvents"]
    first = min((e for e in evs if e.get("name") == "record_param_comms"), key=lambda e: e["ts"])
    evs.append({**first, "tid": first["tid"] + 1})  # the same collective span, on a second host thread
    path.write_bytes(gzip.compress(json.dumps(d).encode()))
    sp = _spans(path)
    inside = [
        k for k in sp.kernels if k.launch is not None and first["ts"] <= k.launch.ts <= first["ts"] + first["dur"]
    ]
    assert len(inside) == 1 and inside[0].call is None and inside[0].comm.source == "kernel name"
    assert sum(k.call is not None for k in sp.kernels) == 28


LINK = Path(__file__).parent.parent / "data" / "h200_link_run"


def test_plain_diloco_on_a_gpu_hides_nothing_however_long_the_issuing():
    """τ = 0 on NCCL (--link 1gbit,20ms): torchft's nonblocking NCCL takes ~4 ms of host time per
    allreduce issued, so the send's span (prepare_sync, 29 allreduces) lasts ~138 ms while its first
    collectives already fly. That is the training thread issuing, not compute: it is ``issuing``,
    and the sync, waiting right after, hides (almost) nothing."""
    r = ftrun.check_traces(LINK)
    assert r.ok and r.verdict == "pass"
    syncs = [e.sync for e in r.events if e.kind == "sync"]
    assert len(syncs) == 2
    for s in syncs:
        assert s is not None and s.send_to_done_ms is not None and s.issuing_comm_ms is not None
        assert s.hidden_comm_ms is not None and s.hidden_comm_ms < 1.0  # ms: the gap before the wait
        assert s.issuing_comm_ms > 100.0
        total = s.issuing_comm_ms + s.hidden_comm_ms + s.exposed_comm_ms
        assert abs(total - s.send_to_done_ms) < 0.01
