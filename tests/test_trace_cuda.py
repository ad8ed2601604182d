"""CUDA-shaped traces without a GPU: a real ftrun CPU run (tests/data/cpu_run, trimmed to the
events inspect reads) converted to kineto's CUDA shape by ``tests/kineto_cuda.py``."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

import kineto_cuda as kc
from ftrun.check.analyze import analyze
from ftrun.trace.load import decode
from ftrun.trace.spans import extract, kernel_op

import json

DATA = Path(__file__).parent / "data" / "cpu_run"


def _spans(trace: dict, name: str = "t.json"):
    return extract(Path(name), decode(Path(name), json.dumps(trace).encode()))


def _one_trace() -> dict:
    return kc.read(sorted((DATA / "traces").glob("*.gz"))[0])


def test_kernel_op_both_namings():
    pre = ("ncclDevKernel_", "ncclKernel_")
    assert kernel_op("ncclDevKernel_AllReduce_Sum_f32_RING_LL", pre) == "AllReduce"
    assert kernel_op("ncclKernel_AllReduce_RING_LL_Sum_float", pre) == "AllReduce"
    assert kernel_op("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", pre) == "SendRecv"
    assert kernel_op("void at::native::kernel", pre) is None


@pytest.mark.parametrize("naming", ["dev", "old"])
def test_converted_real_run_passes(tmp_path, naming):
    run = kc.convert_run(DATA, tmp_path / "run", naming)
    cpu = analyze([DATA])
    gpu = analyze([run])
    assert cpu.verdict == "pass"
    assert gpu.verdict == "pass", [e.problem for e in gpu.events if e.problem]
    assert len(gpu.events) == len(cpu.events)
    # every send's collectives are the kernels, one per allreduce call
    for e in gpu.events:
        if e.kind == "send":
            assert e.collectives == e.allreduces and e.allreduces > 0


def test_device_copies_are_recognised_not_events():
    cpu = _spans(_one_trace())
    t = _spans(kc.to_cuda(_one_trace()))
    assert len(t.sends) == len(cpu.sends) and len(t.syncs) == len(cpu.syncs) and len(t.steps) == len(cpu.steps)
    assert t.device_copies > len(cpu.steps)  # step, send, sync and call copies were there
    assert [s.number for s in t.device_steps] == [s.number for s in t.steps]
    # collectives: the kernels (no gloo spans left), every one linked to its launch and its call
    assert len(t.kernels) == sum(len(s.allreduces) for s in t.sends)
    assert all(k.launch is not None and k.call is not None for k in t.kernels)
    assert all(c.kernels == 1 and c.launch_ts is not None for c in t.collectives)
    assert not t.notes


def test_compute_and_ddp_kernels_are_not_collectives():
    tr = kc.to_cuda(_one_trace())
    # an AllReduce kernel launched outside any manager.allreduce (DDP's own gradient allreduce)
    step = next(e for e in tr["traceEvents"] if e.get("cat") == "user_annotation" and e["name"].startswith("ftrun::step#"))
    tr["traceEvents"] += [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": step["pid"], "tid": step["tid"],
         "ts": step["ts"] + 1, "dur": 2, "args": {"correlation": 5}},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0, "tid": 30,
         "ts": step["ts"] + 5, "dur": 9, "args": {"correlation": 5, "stream": 30}},
    ]
    base = _spans(kc.to_cuda(_one_trace()))
    t = _spans(tr)
    assert len(t.kernels) == len(base.kernels) + 1
    assert len(t.collectives) == len(base.collectives)


def test_unlinked_kernels_fall_back_to_allreduce_by_name():
    tr = kc.to_cuda(_one_trace())
    tr["traceEvents"] = [e for e in tr["traceEvents"] if e.get("cat") != "cuda_runtime"]
    t = _spans(tr)
    assert all(k.launch is None for k in t.kernels)
    assert len(t.collectives) == len(t.kernels) > 0


def test_kernel_before_launch_is_said_once():
    tr = kc.to_cuda(_one_trace())
    ks = kc.kernels(tr)
    launch = {e["args"]["correlation"]: e for e in tr["traceEvents"] if e.get("cat") == "cuda_runtime"}
    for k in ks[:3]:
        k["ts"] = launch[k["args"]["correlation"]]["ts"] - 50.0
    t = _spans(tr)
    assert len(t.notes) == 1 and "3 NCCL kernel(s) start before their launch" in t.notes[0]


def test_quantized_call_is_one_collective(tmp_path):
    """torchft's allreduce_quantized: alltoall (NCCL SendRecv) then allgather per manager.allreduce."""
    tr = kc.to_cuda(_one_trace())
    extra = []
    for k in kc.kernels(tr):
        k["name"] = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
        k["dur"] = k["dur"] / 2
        g = copy.deepcopy(k)
        g["name"], g["ts"] = "ncclDevKernel_AllGather_RING_LL", k["ts"] + k["dur"]
        extra.append(g)
    tr["traceEvents"] += extra
    t = _spans(tr)
    calls = sum(len(s.allreduces) for s in t.sends)
    assert len(t.kernels) == 2 * calls
    assert len(t.collectives) == calls and all(c.kernels == 2 and c.name == "SendRecv+AllGather" for c in t.collectives)


def test_driver_launches_link_too():
    """NCCL >= 2.19 launches through the driver: kineto writes cat cuda_driver, cuLaunchKernelEx."""
    tr = kc.to_cuda(_one_trace())
    for e in tr["traceEvents"]:
        if e.get("cat") == "cuda_runtime":
            e["cat"], e["name"] = "cuda_driver", "cuLaunchKernelEx"
    t = _spans(tr)
    assert t.kernels and all(k.launch is not None and k.call is not None for k in t.kernels)


def test_device_step_copies_place_kernels():
    from ftrun.check.gpu_comm import kernel_steps

    tr = kc.to_cuda(_one_trace())
    steps = _spans(tr)
    placed = kernel_steps(steps)
    assert placed and all(a is not None for a, _ in placed)
    # move every NCCL kernel 1000 s later: it now runs under no step's device copy (after the window)
    for k in kc.kernels(tr):
        k["ts"] += 1e6 * 1000
    assert all(d is None for _, d in kernel_steps(_spans(tr)))


@pytest.mark.e2e
@pytest.mark.parametrize("config", ["streaming", "baseline"])
def test_fresh_run_converted_passes(ftrun_run, tmp_path, config):
    """A fresh ftrun CPU run (trained once per session, shared with other tests), in CUDA shape."""
    run = kc.convert_run(ftrun_run(config), tmp_path / "run", "old")
    rep = analyze([run])
    assert rep.verdict == "pass", [e.problem for e in rep.events if e.problem]
    assert all(sp.kernels and not sp.notes for sp in rep.spans.values())


def test_clock_disagreement_said_once_per_report(tmp_path):
    run = kc.convert_run(DATA, tmp_path / "run")
    for p in (run / "traces").glob("*.gz"):
        tr = kc.read(p)
        launch = {e["args"]["correlation"]: e for e in tr["traceEvents"] if e.get("cat") == "cuda_runtime"}
        k = kc.kernels(tr)[0]
        k["ts"] = launch[k["args"]["correlation"]]["ts"] - 10.0
        kc.write(tr, p)
    rep = analyze([run])
    said = [n for n in rep.notes if "start before their launch" in n]
    assert len(said) == 1 and "likewise in 1 more trace file" in said[0]
