"""Test helper: traces shaped like what kineto really writes for CUDA + NCCL, without a GPU.

``to_cuda`` turns a real ftrun CPU (Gloo) trace into a CUDA one; ``ddp_trace`` and
``inference_trace`` are hand-made traces of other programs (no torchft spans). Each rule names
the kineto behaviour it mirrors, as seen on real GPU traces of other projects (A100, V100,
GP100, B200; NCCL 2.1x-2.27; DDP, torchrec, DLRM, vLLM; 2022-2025):

1. Host spans stay as they are (``user_annotation`` record_function, ``cpu_op`` ops).
2. An NCCL collective sits on the calling thread as ``c10d::allreduce_`` (cpu_op) >
   ``record_param_comms`` (cpu_op; args ``Collective name``, ``In msg nelems``,
   ``Out msg nelems``, ``dtype``, ``Group size``, ``Process Group Name``,
   ``Process Group Ranks``) > ``nccl:all_reduce`` (user_annotation) > the launch:
   ``cuLaunchKernelEx`` in ``cat: cuda_driver`` (NCCL 2.27; ``launch="runtime"``:
   ``cudaLaunchKernel`` in ``cuda_runtime``), ``args.correlation`` = N and ``External id`` = the
   innermost op's. The kernel (pid = device, tid = stream) carries ``correlation`` = N, the
   same ``External id``, and (``kernel_args=True``: kineto since 2024) the collective's args.
   Its name does not say the op: ``ncclDevKernel_Generic`` (NCCL >= 2.19), or
   ``ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t`` (A100 traces, under ``nccl:all_reduce`` too).
   ``ac2g`` flow events (id = correlation) join launch and kernel. Gloo's spans are dropped.
3. Device copies (``gpu_user_annotation``, pid = device, tid = stream): only the innermost user
   annotation open at a launch, spanning the kernels it launched on that stream, args only
   ``External id``. So the NCCL stream's copies are ``nccl:all_reduce``; the compute stream's
   are ``ftrun::step#S ...`` (compute launched directly in the step); ``ProfilerStep#k``
   (never innermost) and torchft's spans have none.
4. Timing on the NCCL stream: a kernel starts at ``max(its Gloo span's start, launch +
   LAUNCH_LAG_US)``; when that is before the previous kernel on the stream ended (queued), it
   starts at that end plus the next of ``GAPS_US``: some a few µs *early* (real B200/V100
   clocks: up to 13 µs before the previous end), most ~10 µs after, a tail to 264 µs.
5. Compute kernels: one per step on the compute stream, launched directly in the step.
6. CUDA graphs (``graph_replay``): one ``cudaGraphLaunch`` whose kernels all carry its
   correlation.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

DEVICE = 0
COMPUTE_STREAM = 7
NCCL_STREAM = 20
LAUNCH_LAG_US = 5.0
LAUNCH_DUR_US = 4.0
# start minus the previous kernel's end, for queued kernels, cycled (µs): real-trace shaped
GAPS_US = (10.0, -3.7, 6.0, 84.0, -0.1, 12.0, 264.0, 9.0, -13.0, 11.0, 8.0, -1.5)
KERNEL_NAMES = {
    "generic": "ncclDevKernel_Generic",
    "sendrecv": "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t",
    "dev": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
    "old": "ncclKernel_AllReduce_RING_LL_Sum_float",
}
LAUNCHES = {
    "driver": ("cuda_driver", "cuLaunchKernelEx"),
    "runtime": ("cuda_runtime", "cudaLaunchKernel"),
    "exc": ("cuda_runtime", "cudaLaunchKernelExC_v11060"),
}
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
COMPUTE_KERNEL = "void at::native::vectorized_elementwise_kernel<4>"


def read(path: Path) -> dict:
    data = Path(path).read_bytes()
    return json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


def write(trace: dict, path: Path) -> Path:
    path.write_bytes(
        gzip.compress(json.dumps(trace).encode()) if path.name.endswith(".gz") else json.dumps(trace).encode()
    )
    return path


def _numel(dims: object) -> int:
    n = 0
    for shape in (
        dims[0]
        if isinstance(dims, list) and dims and isinstance(dims[0], list) and dims[0] and isinstance(dims[0][0], list)
        else dims[:1]
        if isinstance(dims, list)
        else []
    ):
        k = 1
        for d in shape:
            k *= d
        n += k
    return n


class _Ids:
    """kineto's two counters: op ``External id``s and CUPTI correlations (small ints, may collide)."""

    def __init__(self, ext: int = 50000, corr: int = 900000) -> None:
        self.ext, self.corr = ext, corr

    def next_ext(self) -> int:
        self.ext += 1
        return self.ext

    def next_corr(self) -> int:
        self.corr += 1
        return self.corr


def comm_args(
    kind: str, nelems: int, dtype: str = "Float", group: int = 2, pg: str = "1", out: int | None = None
) -> dict:
    return {
        "Collective name": kind,
        "In msg nelems": nelems,
        "Out msg nelems": nelems if out is None else out,
        "dtype": dtype,
        "Group size": group,
        "Process Group Name": pg,
        "Process Group Ranks": str(list(range(group))),
    }


def collective(
    out: list,
    ids: _Ids,
    thread: tuple,
    c10d: dict | None,
    ts: float,
    dur: float,
    *,
    kind: str,
    nccl_name: str,
    args: dict,
    kernel_ts: float,
    kernel_dur: float,
    naming: str,
    launch: str,
    kernel_args: bool,
    stream: int = NCCL_STREAM,
    device: int = DEVICE,
    rpc: bool = True,
) -> dict:
    """Append what one NCCL collective writes (rule 2) inside ``[ts, ts+dur]`` on ``thread``; the
    kernel at ``kernel_ts``. ``c10d``: the existing c10d op (None: write one). Returns the kernel."""
    pid, tid = thread
    if c10d is None:
        out.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": f"c10d::{kind}_",
                "pid": pid,
                "tid": tid,
                "ts": ts,
                "dur": dur,
                "args": {"External id": ids.next_ext()},
            }
        )
    t, d = ts + 0.3, max(dur - 0.6, 2.0)
    if rpc:
        out.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "record_param_comms",
                "pid": pid,
                "tid": tid,
                "ts": t,
                "dur": d,
                "args": {"External id": ids.next_ext(), **args, "Rank": 0},
            }
        )
    t, d = t + 0.2, max(d - 0.4, 1.5)
    ext = ids.next_ext()
    out.append(
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": nccl_name,
            "pid": pid,
            "tid": tid,
            "ts": t,
            "dur": d,
            "args": {"External id": ext},
        }
    )
    corr = ids.next_corr()
    cat, lname = LAUNCHES[launch]
    lts = t + 0.2
    out.append(
        {
            "ph": "X",
            "cat": cat,
            "name": lname,
            "pid": pid,
            "tid": tid,
            "ts": lts,
            "dur": min(LAUNCH_DUR_US, d - 0.4),
            "args": {"External id": ext, "cbid": 211, "correlation": corr},
        }
    )
    kargs = {
        "External id": ext,
        "queued": 0,
        "device": device,
        "context": 1,
        "stream": stream,
        "correlation": corr,
        "registers per thread": 96,
        "grid": [2, 1, 1],
        "block": [640, 1, 1],
    }
    if kernel_args:
        kargs.update(args)
    k = {
        "ph": "X",
        "cat": "kernel",
        "name": KERNEL_NAMES[naming],
        "pid": device,
        "tid": stream,
        "ts": kernel_ts,
        "dur": kernel_dur,
        "args": kargs,
    }
    out.append(k)
    out.append(
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": nccl_name,
            "pid": device,
            "tid": stream,
            "ts": kernel_ts,
            "dur": kernel_dur,
            "args": {"External id": ext},
        }
    )
    out.append({"ph": "s", "id": corr, "pid": pid, "tid": tid, "ts": lts, "cat": "ac2g", "name": "ac2g"})
    out.append(
        {"ph": "f", "id": corr, "pid": device, "tid": stream, "ts": kernel_ts, "cat": "ac2g", "name": "ac2g", "bp": "e"}
    )
    return k


def to_cuda(
    trace: dict,
    naming: str = "generic",
    compute_kernels: bool = True,
    launch: str = "driver",
    kernel_args: bool = True,
    gaps: tuple[float, ...] = GAPS_US,
    pg: str = "1",
    group: int = 2,
) -> dict:
    """A copy of ``trace`` (a real ftrun CPU trace) in kineto's CUDA shape (module rules 1-5)."""
    out = copy.deepcopy(trace)
    evs: list[dict] = out["traceEvents"]
    host = [e for e in evs if e.get("ph") == "X" and e.get("cat") in ("user_annotation", "cpu_op")]
    glo = sorted((e for e in host if e["name"] == "gloo:all_reduce"), key=lambda e: e["ts"])
    issues = sorted((e for e in host if e["name"] == "c10d::allreduce_"), key=lambda e: e["ts"])
    ids = _Ids()
    added: list[dict] = []
    stream_free, queued = 0.0, 0
    used = [False] * len(glo)
    for op in issues:
        # the Gloo span of this issue: the earliest unused one starting at/after it
        k = next((i for i, g in enumerate(glo) if not used[i] and g["ts"] >= op["ts"] - 1e-3), None)
        if k is None:
            continue
        used[k] = True
        g = glo[k]
        n = _numel(op.get("args", {}).get("Input Dims", []))
        launch_ts = op["ts"] + 0.7
        start = max(g["ts"], launch_ts + LAUNCH_LAG_US)
        if start < stream_free:  # queued behind the stream's previous kernel (rule 4)
            start = max(stream_free + gaps[queued % len(gaps)], launch_ts + LAUNCH_LAG_US)
            queued += 1
        collective(
            added,
            ids,
            (op["pid"], op["tid"]),
            op,
            op["ts"],
            op["dur"],
            kind="allreduce",
            nccl_name="nccl:all_reduce",
            args=comm_args("allreduce", n, pg=pg, group=group),
            kernel_ts=start,
            kernel_dur=g["dur"],
            naming=naming,
            launch=launch,
            kernel_args=kernel_args,
        )
        stream_free = start + g["dur"]
    if compute_kernels:  # rule 5, with rule 3's copy of the step (the innermost annotation at the launch)
        for e in host:
            if e["name"].startswith("ftrun::step#"):
                added += compute_kernel(ids, e, e["ts"] + 2.0, e["ts"] + 10.0, 20.0)
    out["traceEvents"] = [e for e in evs if e.get("name") != "gloo:all_reduce"] + added
    out.setdefault("deviceProperties", [])
    if not out["deviceProperties"]:
        out["deviceProperties"] = [{"id": DEVICE, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85520809984}]
    return out


def compute_kernel(
    ids: _Ids, annotation: dict, launch_ts: float, ts: float, dur: float, stream: int = COMPUTE_STREAM
) -> list[dict]:
    """A compute kernel launched inside ``annotation`` (its innermost user annotation), with its copy."""
    corr, ext = ids.next_corr(), annotation.get("args", {}).get("External id", 0)
    return [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": annotation["pid"],
            "tid": annotation["tid"],
            "ts": launch_ts,
            "dur": LAUNCH_DUR_US,
            "args": {"External id": ext, "cbid": 211, "correlation": corr},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": COMPUTE_KERNEL,
            "pid": DEVICE,
            "tid": stream,
            "ts": ts,
            "dur": dur,
            "args": {"External id": ext, "correlation": corr, "device": DEVICE, "stream": stream},
        },
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": annotation["name"],
            "pid": DEVICE,
            "tid": stream,
            "ts": ts,
            "dur": dur,
            "args": {"External id": ext},
        },
    ]


def kernels(trace: dict) -> list[dict]:
    return sorted(
        (e for e in trace["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("nccl")),
        key=lambda e: e["ts"],
    )


def launches(trace: dict) -> dict[int, dict]:
    """Launch events by correlation (runtime and driver)."""
    return {
        e["args"]["correlation"]: e
        for e in trace["traceEvents"]
        if e.get("cat") in LAUNCH_CATS and "correlation" in e.get("args", {})
    }


def queued_gaps(trace: dict) -> list[float]:
    """start - previous end of every NCCL kernel that was queued (launched before the previous ended)."""
    ks, ls = kernels(trace), launches(trace)
    return [
        k["ts"] - (p["ts"] + p["dur"])
        for p, k in zip(ks, ks[1:], strict=False)
        if ls[k["args"]["correlation"]]["ts"] < p["ts"] + p["dur"]
    ]


def queue_behind(trace: dict, first_of_later: int, extra_us: float | None = None, gap_us: float = 0.0) -> dict:
    """Hand-made queueing: stretch the NCCL kernel before ``first_of_later`` (index into the NCCL
    kernels by start) until past that kernel's launch, and start the later kernels of the stream
    ``gap_us`` after their predecessor's end when they would start before it (a negative gap: a
    few µs early, as real clocks show)."""
    out = copy.deepcopy(trace)
    ks = kernels(out)
    launch = launches(out)
    prev, nxt = ks[first_of_later - 1], ks[first_of_later]
    lt = launch[nxt["args"]["correlation"]]["ts"]
    prev["dur"] = (lt - prev["ts"]) + (extra_us if extra_us is not None else 2000.0)
    free = prev["ts"] + prev["dur"]
    for k in ks[first_of_later:]:
        if k["ts"] < free:
            k["ts"] = free + gap_us
        free = k["ts"] + k["dur"]
    _copies_follow(out)
    return out


def _copies_follow(trace: dict) -> None:
    """Re-fit each nccl:* device copy to the kernel with its External id (after kernels moved)."""
    by_ext = {k["args"].get("External id"): k for k in kernels(trace)}
    for e in trace["traceEvents"]:
        if e.get("cat") == "gpu_user_annotation" and e["name"].startswith("nccl:"):
            k = by_ext.get(e["args"].get("External id"))
            if k is not None:
                e["ts"], e["dur"] = k["ts"], k["dur"]


def quantize(tr: dict) -> dict:
    """torchft's allreduce_quantized: per manager.allreduce, c10d::alltoall_base_ then
    c10d::allgather_into_tensor_coalesced_, each with record_param_comms and nccl:<op>, on int8
    buffers, in generic kernels (the c10d::allreduce_ path is gone)."""
    out = copy.deepcopy(tr)
    evs = out["traceEvents"]
    ks = {k["args"]["correlation"]: k for k in kernels(out)}
    for launch in [e for e in evs if e.get("cat") in LAUNCH_CATS and e["args"].get("correlation") in ks]:
        k = ks[launch["args"]["correlation"]]
        n = k["args"]["In msg nelems"]
        for e in evs:  # the allreduce host stack around this launch becomes the alltoall's
            if (
                e.get("pid") == launch["pid"]
                and e.get("tid") == launch["tid"]
                and e["ts"] <= launch["ts"] <= e["ts"] + e.get("dur", 0)
            ):
                if e["name"] == "c10d::allreduce_":
                    e["name"] = "c10d::alltoall_base_"
                elif e["name"] == "record_param_comms":
                    e["args"].update(comm_args("all_to_all", n, dtype="Char"))
                elif e["name"] == "nccl:all_reduce":
                    e["name"] = "nccl:all_to_all"
        k["args"].update(comm_args("all_to_all", n, dtype="Char"))
        k["dur"] /= 2
        ag = copy.deepcopy(k)
        ag["ts"] = k["ts"] + k["dur"] + 1.0
        ag["args"].update(
            comm_args("allgather_into_tensor_coalesced", n, dtype="Char"), correlation=k["args"]["correlation"] + 50000
        )
        agl = {**copy.deepcopy(launch), "ts": launch["ts"] + 1.0, "dur": 1.0}
        agl["args"]["correlation"] = ag["args"]["correlation"]
        evs += [
            ag,
            agl,
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "c10d::allgather_into_tensor_coalesced_",
                "pid": launch["pid"],
                "tid": launch["tid"],
                "ts": launch["ts"] + 0.9,
                "dur": 1.2,
                "args": {},
            },
        ]
    for e in evs:
        if e.get("cat") == "gpu_user_annotation" and e["name"] == "nccl:all_reduce":
            e["name"] = "nccl:all_to_all"
    return out


def orphan_kernel(trace: dict) -> dict:
    """A kernel whose launch is outside the window: kineto writes its own correlation as its
    ``External id`` — here equal to an unrelated op's id, as the two counters allow."""
    out = copy.deepcopy(trace)
    launch = next(e for e in out["traceEvents"] if e.get("cat") in LAUNCH_CATS and e["name"] != "cudaLaunchKernel")
    ext = launch["args"]["External id"]
    k = copy.deepcopy(kernels(out)[0])
    k["ts"] = min(e["ts"] for e in kernels(out)) - 500.0
    k["args"] = {**k["args"], "External id": ext, "correlation": ext}
    out["traceEvents"].append(k)
    return out


def graph_replay(trace: dict, kernels_per_graph: int = 3) -> dict:
    """Rule 6: every compute launch becomes a ``cudaGraphLaunch`` replaying ``kernels_per_graph``
    kernels, all with the replay's correlation."""
    out = copy.deepcopy(trace)
    evs = out["traceEvents"]
    compute = {e["args"]["correlation"]: e for e in evs if e.get("cat") == "kernel" and e["name"] == COMPUTE_KERNEL}
    for e in evs:
        if (
            e.get("cat") == "cuda_runtime"
            and e["name"] == "cudaLaunchKernel"
            and e["args"].get("correlation") in compute
        ):
            e["name"], e["args"]["cbid"] = "cudaGraphLaunch", 311
            k = compute[e["args"]["correlation"]]
            for j in range(1, kernels_per_graph):
                evs.append({**copy.deepcopy(k), "ts": k["ts"] + j * (k["dur"] + 1.0)})
    return out


def convert_run(run_dir: Path, dst: Path, naming: str = "generic", **kw) -> Path:
    """Copy an ftrun run dir to ``dst`` with every trace converted (manifest, events as they are)."""
    import shutil

    shutil.copytree(run_dir, dst)
    for p in (dst / "traces").glob("*.pt.trace.json*"):
        write(to_cuda(read(p), naming, **kw), p)
    return dst


def _base(rank: int, world: int, nccl_version: str = "2.21.5") -> dict:
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}],
        "distributedInfo": {
            "backend": "nccl",
            "rank": rank,
            "world_size": world,
            "pg_count": 1,
            "pg_config": [
                {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "ranks": list(range(world))}
            ],
            "nccl_version": nccl_version,
        },
        "record_shapes": 0,
        "trace_id": f"DDP{rank:04d}",
        "baseTimeNanoseconds": 1700000000000000000,
        "traceEvents": [],
    }


def ddp_trace(
    steps: int = 4,
    buckets: int = 5,
    rank: int = 3,
    world: int = 8,
    naming: str = "sendrecv",
    launch: str = "runtime",
    kernel_args: bool = True,
) -> dict:
    """A DDP step loop as kineto writes it: ``ProfilerStep#k`` (profiler schedule), forward under
    ``DistributedDataParallel.forward``, and per gradient bucket an NCCL allreduce launched from
    the autograd thread (rule 2, generic kernel names). No torchft span anywhere."""
    d = _base(rank, world)
    evs = d["traceEvents"]
    ids = _Ids(ext=1000, corr=1000)
    pid, main, autograd = 4242 + rank, 4242 + rank, 4250 + rank
    t = 1_000_000.0 + 37.5 * rank  # ranks' clocks and steps differ a little
    free = 0.0
    for s in range(steps):
        k = s + 2  # the schedule's warm-up steps are before the window
        step = {
            "ph": "X",
            "cat": "user_annotation",
            "name": f"ProfilerStep#{k}",
            "pid": pid,
            "tid": main,
            "ts": t,
            "dur": 9000.0,
            "args": {"External id": ids.next_ext()},
        }
        fwd = {
            "ph": "X",
            "cat": "user_annotation",
            "name": "DistributedDataParallel.forward",
            "pid": pid,
            "tid": main,
            "ts": t + 10,
            "dur": 3000.0,
            "args": {"External id": ids.next_ext()},
        }
        evs += [step, fwd]
        evs += compute_kernel(ids, fwd, t + 20, t + 40, 2500.0)
        for b in range(buckets):
            ts = t + 4000 + b * 900
            n = 25_000_000 // buckets
            start = max(ts + 8.0, free + (10.0 if free > ts else 0.0))
            collective(
                evs,
                ids,
                (pid, autograd),
                None,
                ts,
                60.0,
                kind="allreduce",
                nccl_name="nccl:all_reduce",
                args=comm_args("allreduce", n, group=world, pg="0"),
                kernel_ts=start,
                kernel_dur=700.0,
                naming=naming,
                launch=launch,
                kernel_args=kernel_args,
            )
            free = start + 700.0
        t += 10_000.0
    return d


def inference_trace(replays: int = 6, rank: int = 0, world: int = 2) -> dict:
    """A vLLM-like decode loop: no step spans (profiler without a schedule), the model replayed
    from a CUDA graph (``cudaGraphLaunch``) whose kernels include a tensor-parallel NCCL allreduce
    launched by pynccl (``ncclDevKernel_Generic_1``, no CPU op, no collective args). No torchft span."""
    d = _base(rank, world, "2.27.5")
    evs = d["traceEvents"]
    ids = _Ids(ext=7000, corr=7000)
    pid = tid = 9100
    t = 2_000_000.0
    for _r in range(replays):
        ex = {
            "ph": "X",
            "cat": "user_annotation",
            "name": "execute_model",
            "pid": pid,
            "tid": tid,
            "ts": t,
            "dur": 400.0,
            "args": {"External id": ids.next_ext()},
        }
        corr = ids.next_corr()
        evs += [
            ex,
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaGraphLaunch",
                "pid": pid,
                "tid": tid,
                "ts": t + 5,
                "dur": 12.0,
                "args": {"External id": ex["args"]["External id"], "cbid": 311, "correlation": corr},
            },
        ]
        for j, name in enumerate((COMPUTE_KERNEL, "ncclDevKernel_Generic_1", COMPUTE_KERNEL)):
            evs.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": name,
                    "pid": 0,
                    "tid": COMPUTE_STREAM,
                    "ts": t + 30 + j * 60,
                    "dur": 50.0,
                    "args": {
                        "External id": ex["args"]["External id"],
                        "correlation": corr,
                        "device": 0,
                        "stream": COMPUTE_STREAM,
                    },
                }
            )
        t += 1000.0
    return d


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

        def in_restore(e: dict, restores: list[dict] = restores) -> bool:
            return any(r["tid"] == e["tid"] and r["ts"] <= e["ts"] <= r["ts"] + r["dur"] for r in restores)

        d["traceEvents"] = [
            e
            for e in evs
            if e.get("ph") == "M"
            or e.get("name", "").startswith(TRIM_KEEP)
            or (e.get("name") == "aten::copy_" and in_restore(e))
        ]
        (dst / "traces" / p.name).write_bytes(gzip.compress(json.dumps(d).encode(), mtime=0))
    return dst


GPU_TRIM_KEEP = (*TRIM_KEEP, "nccl:", "record_param_comms", "Optimizer.step")


def trim_gpu_run(src: Path, dst: Path) -> Path:
    """How ``tests/data/h200_run`` was made from a real GPU run dir: ``trim_run``'s rule, with the
    NCCL path kept whole — ``nccl:*`` and ``record_param_comms`` spans, every NCCL kernel, and the
    CUDA calls (any thread, any name) that share a correlation with one. Names, threads and times
    unchanged; compute kernels and their launches dropped."""
    trim_run(src, dst)
    for p in (dst / "traces").glob("*.pt.trace.json*"):
        whole = read(src / "traces" / p.name)["traceEvents"]
        nccl_corr = {
            e["args"].get("correlation")
            for e in whole
            if e.get("cat") == "kernel" and e.get("name", "").startswith(("ncclDevKernel_", "ncclKernel_"))
        }
        d = read(p)
        d["traceEvents"] = [
            e
            for e in whole
            if e.get("ph") == "M"
            or (e.get("cat") not in ("kernel", *LAUNCH_CATS) and e.get("name", "").startswith(GPU_TRIM_KEEP))
            or (e.get("cat") in ("kernel", *LAUNCH_CATS) and e.get("args", {}).get("correlation") in nccl_corr)
        ]
        (dst / "traces" / p.name).write_bytes(gzip.compress(json.dumps(d).encode(), mtime=0))
    return dst
