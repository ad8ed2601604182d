"""Test helper: turn a real ftrun CPU (Gloo) trace into the shape kineto writes for a CUDA run.

No GPU is needed, so inspect-trace's CUDA path can be tested on CPU. Each rule names the kineto
fields it mirrors (torch.profiler with ``ProfilerActivity.CUDA``, kineto's chrome exporter):

1. Host spans stay as they are: ``cat`` ``user_annotation`` (record_function), ``cpu_op``
   (aten/c10d ops), pid = process id, tid = thread id.
2. Device copies: kineto repeats every ``record_function`` range that enclosed GPU work as
   ``cat: "gpu_user_annotation"`` with ``pid`` = device index and ``tid`` = the stream
   (``args.device``, ``args.stream``) — ``ProfilerStep#k`` and ``ftrun::step#S ...`` on the
   compute stream, ``prepare_sync`` / ``perform_sync`` / ``manager::allreduce`` /
   ``should_commit`` likewise. The copy keeps the host span's name; its times are shifted by
   ``GPU_LAG_US`` (device work runs after the host enqueued it).
3. Collectives: each ``gloo:all_reduce`` (Gloo's worker thread) becomes what ProcessGroupNCCL
   writes — a host ``user_annotation`` ``nccl:all_reduce`` at the ``c10d::allreduce_`` that
   issued it, a ``cat: "cuda_runtime"`` ``cudaLaunchKernel`` on the issuing thread (inside
   ``c10d::allreduce_``, ``args.correlation`` = N, ``args["External id"]`` = the op's), and a
   ``cat: "kernel"`` ``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` (or, with ``naming="old"``,
   ``ncclKernel_AllReduce_RING_LL_Sum_float``) on pid = device, tid = the NCCL stream, with
   ``args.correlation`` = N, ``args.device``, ``args.stream``. The kernel starts at
   ``max(gloo span start, launch + LAUNCH_LAG_US, previous kernel's end on the stream)``
   (a stream runs its kernels one at a time, in launch order) and lasts as the Gloo span did.
   The Gloo span is dropped (a CUDA run has none).
4. Compute kernels: one ``cat: "kernel"`` per step on the compute stream with its own launch,
   so the reader must tell NCCL kernels from the rest.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Optional

DEVICE = 0
COMPUTE_STREAM = 7
NCCL_STREAM = 20
GPU_LAG_US = 3.0
LAUNCH_LAG_US = 5.0
LAUNCH_DUR_US = 4.0
KERNEL_NAMES = {"dev": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "old": "ncclKernel_AllReduce_RING_LL_Sum_float"}
COPIED = (
    "ProfilerStep#", "ftrun::step#", "torchft::local_sgd::prepare_sync", "torchft::local_sgd::perform_sync",
    "torchft::manager::allreduce", "torchft::manager::should_commit",
)


def read(path: Path) -> dict:
    data = Path(path).read_bytes()
    return json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


def write(trace: dict, path: Path) -> Path:
    path.write_bytes(gzip.compress(json.dumps(trace).encode()) if path.name.endswith(".gz") else json.dumps(trace).encode())
    return path


def _inside(outer: dict, inner: dict) -> bool:
    return (outer["pid"], outer["tid"]) == (inner["pid"], inner["tid"]) and outer["ts"] <= inner["ts"] <= outer["ts"] + outer["dur"]


def to_cuda(trace: dict, naming: str = "dev", compute_kernels: bool = True) -> dict:
    """A copy of ``trace`` (a real ftrun CPU trace) in kineto's CUDA shape (module rules 1-4)."""
    out = copy.deepcopy(trace)
    evs: list[dict] = out["traceEvents"]
    host = [e for e in evs if e.get("ph") == "X" and e.get("cat") in ("user_annotation", "cpu_op")]
    glo = sorted((e for e in host if e["name"] == "gloo:all_reduce"), key=lambda e: e["ts"])
    issues = sorted((e for e in host if e["name"] == "c10d::allreduce_"), key=lambda e: e["ts"])
    corr = 900000
    added: list[dict] = []
    # rule 2: device copies of record_function ranges
    for e in host:
        if e["cat"] == "user_annotation" and e["name"].startswith(COPIED):
            added.append({**e, "cat": "gpu_user_annotation", "pid": DEVICE, "tid": COMPUTE_STREAM,
                          "ts": e["ts"] + GPU_LAG_US, "args": {"External id": e.get("args", {}).get("External id", 0),
                                                             "device": DEVICE, "stream": COMPUTE_STREAM}})
    # rule 3: gloo spans -> nccl launch + kernel, in issue order (Gloo runs them in that order too)
    stream_free = 0.0
    used = [False] * len(glo)
    for op in issues:
        # the Gloo span of this issue: the earliest unused one starting at/after it
        k = next((i for i, g in enumerate(glo) if not used[i] and g["ts"] >= op["ts"] - 1e-3), None)
        if k is None:
            continue
        used[k] = True
        g = glo[k]
        corr += 1
        ext = op.get("args", {}).get("External id", 0)
        launch_ts = op["ts"] + min(1.0, op["dur"] / 2)
        added.append({"ph": "X", "cat": "user_annotation", "name": "nccl:all_reduce", "pid": op["pid"], "tid": op["tid"],
                      "ts": op["ts"] + 0.5, "dur": max(op["dur"] - 1.0, 1.0), "args": {"External id": ext}})
        added.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": op["pid"], "tid": op["tid"],
                      "ts": launch_ts, "dur": LAUNCH_DUR_US, "args": {"External id": ext, "cbid": 211, "correlation": corr}})
        start = max(g["ts"], launch_ts + LAUNCH_LAG_US, stream_free)
        added.append({"ph": "X", "cat": "kernel", "name": KERNEL_NAMES[naming], "pid": DEVICE, "tid": NCCL_STREAM,
                      "ts": start, "dur": g["dur"], "args": {"External id": ext, "correlation": corr,
                                                             "device": DEVICE, "stream": NCCL_STREAM}})
        stream_free = start + g["dur"]
    # rule 4: one compute kernel per step
    if compute_kernels:
        for e in host:
            if e["name"].startswith("ftrun::step#"):
                corr += 1
                added.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": e["pid"], "tid": e["tid"],
                              "ts": e["ts"] + 2.0, "dur": LAUNCH_DUR_US, "args": {"correlation": corr}})
                added.append({"ph": "X", "cat": "kernel", "name": "void at::native::vectorized_elementwise_kernel<4>",
                              "pid": DEVICE, "tid": COMPUTE_STREAM, "ts": e["ts"] + 10.0, "dur": 20.0,
                              "args": {"correlation": corr, "device": DEVICE, "stream": COMPUTE_STREAM}})
    out["traceEvents"] = [e for e in evs if e.get("name") != "gloo:all_reduce"] + added
    return out


def kernels(trace: dict) -> list[dict]:
    return sorted((e for e in trace["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("nccl")),
                  key=lambda e: e["ts"])


def queue_behind(trace: dict, first_of_later: int, extra_us: Optional[float] = None) -> dict:
    """Hand-made queueing: stretch the NCCL kernel before ``first_of_later`` (index into the NCCL
    kernels by start) until past that kernel's launch, and start the later kernels of the stream
    no earlier than their predecessor's end — as a CUDA stream runs them."""
    out = copy.deepcopy(trace)
    ks = kernels(out)
    launch = {e["args"]["correlation"]: e for e in out["traceEvents"] if e.get("cat") == "cuda_runtime"}
    prev, nxt = ks[first_of_later - 1], ks[first_of_later]
    lt = launch[nxt["args"]["correlation"]]["ts"]
    prev["dur"] = (lt - prev["ts"]) + (extra_us if extra_us is not None else 2000.0)
    free = prev["ts"] + prev["dur"]
    for k in ks[first_of_later:]:
        k["ts"] = max(k["ts"], free)
        free = k["ts"] + k["dur"]
    return out


def convert_run(run_dir: Path, dst: Path, naming: str = "dev") -> Path:
    """Copy an ftrun run dir to ``dst`` with every trace converted (manifest, events as they are)."""
    import shutil

    shutil.copytree(run_dir, dst)
    for p in (dst / "traces").glob("*.pt.trace.json*"):
        write(to_cuda(read(p), naming), p)
    return dst


TRIM_KEEP = ("ProfilerStep#", "ftrun::step#", "torchft::", "gloo:", "c10d::", "ftrun::link")


def trim_run(src: Path, dst: Path) -> Path:
    """How ``tests/data/cpu_run`` was made from a real run dir: manifest and event logs as they
    are; traces keep metadata events, every event whose name starts with ``TRIM_KEEP``, and the
    ``aten::copy_`` ops inside ``restore_parameters`` (the fragment's shapes). Names and times unchanged."""
    import shutil

    shutil.rmtree(dst, ignore_errors=True)
    (dst / "traces").mkdir(parents=True)
    shutil.copy(src / "manifest.json", dst / "manifest.json")
    shutil.copytree(src / "events", dst / "events")
    for p in (src / "traces").glob("*.pt.trace.json*"):
        d = read(p)
        evs = d["traceEvents"]
        restores = [e for e in evs if e.get("name") == "torchft::local_sgd::restore_parameters"]

        def in_restore(e: dict) -> bool:
            return any(r["tid"] == e["tid"] and r["ts"] <= e["ts"] <= r["ts"] + r["dur"] for r in restores)

        d["traceEvents"] = [e for e in evs if e.get("ph") == "M" or e.get("name", "").startswith(TRIM_KEEP)
                            or (e.get("name") == "aten::copy_" and in_restore(e))]
        (dst / "traces" / p.name).write_bytes(gzip.compress(json.dumps(d).encode(), mtime=0))
    return dst
