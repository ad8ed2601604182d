"""CUDA-shaped traces without a GPU: a real ftrun CPU run (tests/data/cpu_run, trimmed to the
events inspect reads) converted to what kineto writes by ``tests/kineto_cuda.py``, and
hand-made traces of other programs (DDP-like, inference-like)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

import kineto_cuda as kc
from ftrun.check.analyze import analyze
from ftrun.trace import nccl
from ftrun.trace.load import decode
from ftrun.trace.spans import compute_launches, extract, kernel_op

DATA = Path(__file__).parent.parent / "data" / "cpu_run"


def _spans(trace: dict, name: str = "t.json"):
    return extract(Path(name), decode(Path(name), json.dumps(trace).encode()))


def _compute(trace: dict):
    return compute_launches(decode(Path("t.json"), json.dumps(trace).encode()))


def _one_trace() -> dict:
    return kc.read(sorted((DATA / "traces").glob("*.gz"))[0])


def _events(trace: dict, cat: str, name: str = "") -> list[dict]:
    return [e for e in trace["traceEvents"] if e.get("cat") == cat and e.get("name", "").startswith(name)]


# --- the fixture writes what kineto writes ---------------------------------------------------


def test_fixture_is_shaped_like_kineto():
    tr = kc.to_cuda(_one_trace())
    copies = _events(tr, "gpu_user_annotation")
    # innermost annotation only: nccl:all_reduce on the NCCL stream, the step on the compute stream
    assert {c["name"].split("#")[0] for c in copies} == {"nccl:all_reduce", "ftrun::step"}
    assert not [c for c in copies if c["name"].startswith(("ProfilerStep#", "torchft::"))]
    assert all(set(c["args"]) == {"External id"} for c in copies)
    assert {e["name"] for e in _events(tr, "cuda_driver")} == {"cuLaunchKernelEx"}
    assert {k["name"] for k in kc.kernels(tr)} == {"ncclDevKernel_Generic"}
    assert all(k["args"]["Collective name"] == "allreduce" and k["args"]["In msg nelems"] > 0 for k in kc.kernels(tr))
    gaps = kc.queued_gaps(tr)
    assert min(gaps) <= -13.0 and max(gaps) >= 264.0 and sum(g < 0 for g in gaps) >= 5  # real clocks' spread


# --- part 2: a collective's kind and size from what the trace states ------------------------


def test_kernel_op_both_namings():
    pre = ("ncclDevKernel_", "ncclKernel_")
    assert kernel_op("ncclDevKernel_AllReduce_Sum_f32_RING_LL", pre) == "AllReduce"
    assert kernel_op("ncclKernel_AllReduce_RING_LL_Sum_float", pre) == "AllReduce"
    assert kernel_op("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", pre) == "SendRecv"
    assert kernel_op("void at::native::kernel", pre) is None
    # the name is a last resort: only specialised kernels state their op
    assert nccl.kind_from_kernel_name("ncclKernel_AllReduce_RING_LL_Sum_float", pre) == "allreduce"
    assert nccl.kind_from_kernel_name("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", pre) is None
    assert nccl.kind_from_kernel_name("ncclDevKernel_Generic_1", pre) is None


@pytest.mark.parametrize(
    "name, kind",
    [
        ("allreduce", "allreduce"),
        ("nccl:all_reduce", "allreduce"),
        ("c10d::allreduce_", "allreduce"),
        ("allreduce_coalesced", "allreduce"),
        ("_allgather_base", "allgather"),
        ("nccl:_all_gather_base", "allgather"),
        ("c10d::allgather_into_tensor_coalesced_", "allgather"),
        ("nccl:_reduce_scatter_base", "reduce_scatter"),
        ("reduce_scatter_tensor_coalesced", "reduce_scatter"),
        ("c10d::alltoall_base_", "alltoall"),
        ("all_to_allv", "alltoall"),
        ("nccl:all_to_all", "alltoall"),
        ("broadcast", "broadcast"),
        ("_broadcast_oop", "broadcast"),
        ("nccl:send 0->1", "send"),
        ("aten::mm", None),
    ],
)
def test_kind_spellings(name, kind):
    assert nccl.normalise(name) == kind


@pytest.mark.parametrize("naming", ["generic", "sendrecv", "dev", "old"])
@pytest.mark.parametrize("launch", ["driver", "runtime", "exc"])
def test_converted_real_run_passes(tmp_path, naming, launch):
    run = kc.convert_run(DATA, tmp_path / "run", naming, launch=launch)
    cpu = analyze([DATA])
    gpu = analyze([run])
    assert cpu.verdict == "pass"
    assert gpu.verdict == "pass", [e.problem for e in gpu.events if e.problem]
    assert len(gpu.events) == len(cpu.events)
    for e in gpu.events:
        if e.kind == "send":  # every send's collectives are the kernels, one per allreduce call
            assert e.send.collectives == e.send.allreduces and e.send.allreduces > 0
            assert e.send.bytes == 4 * e.send.numel  # dtype Float, from the kernels' args
    for sp in gpu.spans.values():
        assert {(k.kind, k.comm.source) for k in sp.kernels} == {("allreduce", "kernel args")}


@pytest.mark.parametrize(
    "strip, source",
    [
        ("kernel args", "record_param_comms"),  # pre-2024 kineto: no collective args on kernels
        ("record_param_comms", "nccl:all_reduce"),
        ("nccl:", "c10d::allreduce_"),
    ],
)
def test_kind_from_the_cpu_side_when_kernels_do_not_say(strip, source):
    """A generic kernel name says nothing; the launch's host spans do, most trusted first."""
    tr = kc.to_cuda(_one_trace(), "sendrecv", kernel_args=False)
    keep = {
        "kernel args": lambda e: True,
        "record_param_comms": lambda e: e.get("name") != "record_param_comms",
        "nccl:": lambda e: e.get("name") != "record_param_comms" and not e.get("name", "").startswith("nccl:"),
    }[strip]
    tr["traceEvents"] = [e for e in tr["traceEvents"] if keep(e)]
    t = _spans(tr)
    assert t.kernels and {(k.kind, k.comm.source) for k in t.kernels} == {("allreduce", source)}
    assert all(c.kernels == 1 and c.kind == "allreduce" for c in t.collectives)
    assert len(t.collectives) == sum(len(s.allreduces) for s in t.sends)


def test_generic_kernel_is_never_read_by_name():
    """SendRecv under nccl:all_reduce is an allreduce; a generic kernel with nothing around it is
    nothing: never a collective by its name (the old rule read every unlinked AllReduce-named one)."""
    tr = kc.to_cuda(_one_trace(), "sendrecv", kernel_args=False)
    assert {k.kind for k in _spans(tr).kernels} == {"allreduce"}
    bare = copy.deepcopy(tr)
    bare["traceEvents"] = [e for e in bare["traceEvents"] if e.get("cat") not in kc.LAUNCH_CATS]
    t = _spans(bare)
    assert all(k.launch is None and k.kind is None and k.comm.source == "none" for k in t.kernels)
    assert t.collectives == []
    named = kc.to_cuda(_one_trace(), "dev", kernel_args=False)  # a specialised name: the last resort holds
    named["traceEvents"] = [e for e in named["traceEvents"] if e.get("cat") not in kc.LAUNCH_CATS]
    t = _spans(named)
    assert {(k.kind, k.comm.source) for k in t.kernels} == {("allreduce", "kernel name")}
    assert len(t.collectives) == len(t.kernels)


def test_sizes_without_record_shapes_come_from_record_param_comms(tmp_path):
    """NCCL states ``In msg nelems`` without record_shapes: the sends keep their size signature."""
    run = kc.convert_run(DATA, tmp_path / "run")
    for p in (run / "traces").glob("*.gz"):
        tr = kc.read(p)
        for e in tr["traceEvents"]:
            e.get("args", {}).pop("Input Dims", None)
        kc.write(tr, p)
    rep = analyze([run])
    assert rep.verdict == "pass", [e.problem for e in rep.events if e.problem]
    sends = [e for e in rep.events if e.kind == "send"]
    assert sends and all(
        e.evidence == "send sizes" and e.fragment_checked and e.send.bytes == 4 * e.send.numel for e in sends
    )


def test_quantized_call_is_one_collective_recognised_by_its_ops():
    t = _spans(kc.quantize(kc.to_cuda(_one_trace())))
    calls = sum(len(s.allreduces) for s in t.sends)
    assert all(a.quantized for s in t.sends for a in s.allreduces)
    assert len(t.kernels) == 2 * calls and {k.kind for k in t.kernels} == {"alltoall", "allgather"}
    assert len(t.collectives) == calls
    assert all(c.kernels == 2 and c.name == "quantized allreduce (alltoall+allgather)" for c in t.collectives)
    assert all(c.itemsize is None for c in t.collectives)  # int8 buffers: not the pseudo-gradient's element size


def test_ddp_trace_collectives_read_from_what_it_states():
    """DDP: 20 NCCL allreduces in SendRecv kernels, none of them a torchft send's."""
    t = _spans(kc.ddp_trace())
    assert len(t.kernels) == 20 and {k.name for k in t.kernels} == {kc.KERNEL_NAMES["sendrecv"]}
    assert {(k.kind, k.comm.source) for k in t.kernels} == {("allreduce", "kernel args")}
    assert {k.comm.in_nelems for k in t.kernels} == {5_000_000} and {k.comm.group_size for k in t.kernels} == {8}
    assert all(k.launch is not None and k.call is None for k in t.kernels)
    assert t.sends == [] and t.syncs == [] and t.collectives == []
    assert (t.rank, t.world_size) == (3, 8)
    assert (
        t.device_copies == 20
    )  # the nccl:all_reduce copies (DistributedDataParallel.forward's are not read); no ProfilerStep copy


def test_compute_and_ddp_kernels_are_not_collectives():
    tr = kc.to_cuda(_one_trace())
    # an allreduce launched outside any manager.allreduce (DDP's own gradient allreduce)
    step = next(
        e for e in tr["traceEvents"] if e.get("cat") == "user_annotation" and e["name"].startswith("ftrun::step#")
    )
    kc.collective(
        tr["traceEvents"],
        kc._Ids(10, 10),
        (step["pid"], step["tid"]),
        None,
        step["ts"] + 1,
        3.0,
        kind="allreduce",
        nccl_name="nccl:all_reduce",
        args=kc.comm_args("allreduce", 10),
        kernel_ts=step["ts"] + 5,
        kernel_dur=9.0,
        naming="generic",
        launch="driver",
        kernel_args=True,
        stream=30,
    )
    base = _spans(kc.to_cuda(_one_trace()))
    t = _spans(tr)
    assert len(t.kernels) == len(base.kernels) + 1
    assert len(t.collectives) == len(base.collectives)


# --- part 3: device-side facts from launches ------------------------------------------------


def test_device_copies_are_counted_never_events():
    cpu = _spans(_one_trace())
    tr = kc.to_cuda(_one_trace())
    t = _spans(tr)
    assert len(t.sends) == len(cpu.sends) and len(t.syncs) == len(cpu.syncs) and len(t.steps) == len(cpu.steps)
    assert t.device_copies == len(_events(tr, "gpu_user_annotation"))  # nccl:all_reduce and ftrun::step#S ... copies
    assert len(t.kernels) == sum(len(s.allreduces) for s in t.sends)
    assert all(k.launch is not None and k.call is not None for k in t.kernels)
    assert all(c.kernels == 1 and c.launch_ts is not None for c in t.collectives)
    assert len(_compute(tr)) == len(t.steps)
    assert not t.notes


def test_kernel_steps_come_from_launches_not_copies():
    from ftrun.check.gpu_comm import kernel_steps

    tr = kc.to_cuda(_one_trace())
    placed = kernel_steps(_spans(tr), _compute(tr))
    assert placed and all(a is not None and d is not None for a, d in placed)
    no_copies = copy.deepcopy(tr)
    no_copies["traceEvents"] = [e for e in tr["traceEvents"] if e.get("cat") != "gpu_user_annotation"]
    assert kernel_steps(_spans(no_copies), _compute(no_copies)) == placed  # the copies play no part
    # every NCCL kernel 1000 s later: it runs after the compute of every later step was launched and ran
    late = copy.deepcopy(tr)
    for k in kc.kernels(late):
        k["ts"] += 1e9
    got = kernel_steps(_spans(late), _compute(late))
    last = max(s.number for s in _spans(late).steps)
    assert got and all(d == last for _, d in got) and all(a < last for a, _ in got)


# --- part 4: launches, graphs, orphans -------------------------------------------------------


def test_unlinked_kernels_fall_back_to_their_stated_kind():
    tr = kc.to_cuda(_one_trace())
    tr["traceEvents"] = [e for e in tr["traceEvents"] if e.get("cat") not in kc.LAUNCH_CATS]
    t = _spans(tr)
    assert all(k.launch is None for k in t.kernels)
    assert len(t.collectives) == len(t.kernels) > 0  # the kernels' args say allreduce
    pairs = zip(t.collectives, t.kernels, strict=True)
    assert all(c.shapes == ((k.comm.in_nelems,),) and c.itemsize == 4 for c, k in pairs)


def test_unlinked_kernels_attributed_by_element_count(tmp_path):
    """A kernel states a flat element count, the c10d op its tensors' shapes: they match by count."""
    run = kc.convert_run(DATA, tmp_path / "run")
    for p in (run / "traces").glob("*.gz"):
        tr = kc.read(p)
        tr["traceEvents"] = [e for e in tr["traceEvents"] if e.get("cat") not in kc.LAUNCH_CATS]
        kc.write(tr, p)
    rep = analyze([run])
    assert rep.verdict == "pass" and not rep.notes
    sends = [e for e in rep.events if e.kind == "send"]
    assert all(e.send.collectives == e.send.allreduces and e.send.bytes == 4 * e.send.numel for e in sends)
    assert all(e.sync.hidden_comm_ms is not None for e in rep.events if e.kind == "sync")


def test_kernel_before_launch_is_said_once():
    tr = kc.to_cuda(_one_trace())
    ls = kc.launches(tr)
    for k in kc.kernels(tr)[:3]:
        k["ts"] = ls[k["args"]["correlation"]]["ts"] - 50.0
    t = _spans(tr)
    assert len(t.notes) == 1 and "3 NCCL kernel(s) start before their launch" in t.notes[0]


def test_external_id_that_is_the_kernels_own_correlation_links_nothing():
    """Launch outside the window: kineto writes the kernel's correlation as External id; that
    number is an unrelated NCCL launch's External id here, which the old fallback linked."""
    base = _spans(kc.to_cuda(_one_trace()))
    t = _spans(kc.orphan_kernel(kc.to_cuda(_one_trace())))
    assert len(t.kernels) == len(base.kernels) + 1
    orphan = t.kernels[0]
    assert orphan.launch is None and orphan.call is None
    assert [(c.kernels, c.span) for c in t.collectives] == [(c.kernels, c.span) for c in base.collectives]
    assert len(t.notes) == 1 and "1 NCCL kernel(s) launched before the trace's window" in t.notes[0]


def test_external_id_fallback_still_links_a_real_op_id():
    tr = kc.to_cuda(_one_trace())
    ls = kc.launches(tr)
    for k in kc.kernels(tr):  # correlations lost on the kernels (old exporters): External id is the op's
        k["args"]["correlation"] += 10_000_000
    t = _spans(tr)
    assert all(k.launch is not None and k.call is not None for k in t.kernels) and ls


def test_graph_replays_are_launches():
    tr = kc.graph_replay(kc.to_cuda(_one_trace()))
    t = _spans(tr)
    assert len(_compute(tr)) == 3 * len(t.steps)  # every replayed kernel linked to its cudaGraphLaunch
    # an NCCL kernel replayed from a graph: linked, and said once
    for e in tr["traceEvents"]:
        if e.get("cat") == "cuda_driver":
            e["cat"], e["name"] = "cuda_runtime", "cudaGraphLaunch"
    t = _spans(tr)
    assert all(k.launch is not None and k.graph for k in t.kernels)
    assert len(t.notes) == 1 and "replayed from a CUDA graph" in t.notes[0]


def test_inference_trace_kernels_linked_through_graph_replays():
    """vLLM-like: no step spans (extract refuses: nothing to check), kernels only via cudaGraphLaunch."""
    from ftrun.errors import BadInput

    tr = kc.inference_trace()
    with pytest.raises(BadInput, match="no step spans"):
        _spans(tr)
    tr["traceEvents"].append(
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 9100,
            "tid": 9100,
            "ts": 1_999_000.0,
            "dur": 10_000.0,
            "args": {},
        }
    )
    t = _spans(tr)
    assert len(t.kernels) == 6 and all(k.graph and k.kind is None for k in t.kernels)  # pynccl: nothing states the op
    assert t.collectives == [] and len(_compute(tr)) == 12


def test_clock_disagreement_said_once_per_report(tmp_path):
    run = kc.convert_run(DATA, tmp_path / "run")
    for p in (run / "traces").glob("*.gz"):
        tr = kc.read(p)
        ls = kc.launches(tr)
        k = kc.kernels(tr)[0]
        k["ts"] = ls[k["args"]["correlation"]]["ts"] - 10.0
        kc.write(tr, p)
    rep = analyze([run])
    said = [n for n in rep.notes if "start before their launch" in n]
    assert len(said) == 1 and "likewise in 1 more trace file" in said[0]


# --- part 5: identity -------------------------------------------------------------------------

SCHEDULE = {"fragments": 2, "sync_every": 20, "fragment_sync_delay": 5}  # tests/data/cpu_run's


def _loose(tmp_path: Path, infos: list[tuple[int, int]], pg: str = "1") -> list[Path]:
    """The run's two traces as loose files (no run dir, no replica in the name), CUDA-shaped,
    with the given (distributedInfo.rank, world_size)."""
    out = []
    for i, (p, (rank, world)) in enumerate(zip(sorted((DATA / "traces").glob("*.gz")), infos, strict=False)):
        tr = kc.to_cuda(kc.read(p), pg=pg)
        tr["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
        out.append(kc.write(tr, tmp_path / f"a{i}.json"))
    return out


def test_distributed_info_is_the_global_rank_never_the_replica(tmp_path):
    from rich.console import Console

    from ftrun.report.inspect_view import render

    files = _loose(tmp_path, [(5, 8), (3, 8)])
    rep = analyze(files, **SCHEDULE)
    assert rep.verdict == "pass", rep.problems()
    got = [(w.replica, w.rank, w.source, w.global_rank, w.world_size, Path(w.files[0]).name) for w in rep.workers]
    assert got == [(0, 0, "file order", 5, 8, "a0.json"), (1, 0, "file order", 3, 8, "a1.json")]
    con = Console(width=200, record=True)
    render(rep, con)
    text = con.export_text()
    assert "replica 0 rank 0  (identity: file order; global rank 5 of 8;" in text
    assert "replica 5" not in text and "replica 3" not in text
    assert rep.to_json()["workers"][1]["global_rank"] == 3


def test_rank_from_torchfts_process_group_name(tmp_path):
    files = _loose(tmp_path, [(1, 2), (1, 2)], pg="torchft_quorum_3_rank_1")
    t = _spans(kc.read(files[0]))
    assert t.group_rank == 1
    rep = analyze(files, **SCHEDULE)
    assert [(w.replica, w.rank, w.source) for w in rep.workers] == [
        (0, 1, "file order; rank from torchft's process-group name"),
        (1, 1, "file order; rank from torchft's process-group name"),
    ]
    # a nightly name (torchft_{uuid}_rank_{r}) states it too; a plain c10d name does not
    from ftrun.torchft_compat import LABELS

    assert nccl.group_rank("torchft_1b4e28ba-2fa1-11d2-883f-0016d3cca427_rank_2", LABELS.torchft_pg_name) == 2
    assert nccl.group_rank("0", LABELS.torchft_pg_name) is None
    # the nightly's uuid is the quorum id the Manager passes (an int), as in gloo-native's names
    assert nccl.group_rank("torchft_7_rank_1", LABELS.torchft_pg_name) == 1


def test_manifest_identity_keeps_distributed_info_apart(tmp_path):
    run = kc.convert_run(DATA, tmp_path / "run")
    for p in (run / "traces").glob("*.gz"):
        tr = kc.read(p)
        tr["distributedInfo"] = {"backend": "nccl", "rank": 0, "world_size": 1}
        kc.write(tr, p)
    rep = analyze([run])
    assert [(w.replica, w.rank, w.source, w.global_rank_text()) for w in rep.workers] == [
        (0, 0, "manifest", "global rank 0 of 1"),
        (1, 0, "manifest", "global rank 0 of 1"),
    ]


# --- traces that are not torchft's: the refusal is part 1 (the shared loader/verdict rule) ---


def ddp_files(tmp_path: Path, n: int = 2) -> list[Path]:
    """DDP-shaped NCCL traces of ranks 0..n-1 of one job, for the "not a torchft trace" rule."""
    return [kc.write(kc.ddp_trace(rank=r, world=n), tmp_path / f"ddp_rank{r}.json") for r in range(n)]


@pytest.mark.parametrize("flags", [SCHEDULE, {}])
def test_ddp_trace_is_not_a_torchft_trace(tmp_path, flags):
    """Part 1's rule, on a DDP-shaped NCCL trace (today: FAIL "send of fragment 0 missing" with
    flags, a request for --fragments without)."""
    from ftrun.errors import BadInput

    with pytest.raises(BadInput, match="(?i)not a torchft"):
        analyze(ddp_files(tmp_path), **flags)


def test_inference_trace_is_not_a_torchft_trace(tmp_path):
    from ftrun.errors import BadInput

    with pytest.raises(BadInput, match="(?i)not a torchft"):
        analyze([kc.write(kc.inference_trace(), tmp_path / "vllm.json")], **SCHEDULE)


def test_each_kind_of_trace_note_said_once(tmp_path):
    run = kc.convert_run(DATA, tmp_path / "run")
    for p in (run / "traces").glob("*.gz"):
        tr = kc.orphan_kernel(kc.read(p))
        ls = kc.launches(tr)
        k = kc.kernels(tr)[1]
        k["ts"] = ls[k["args"]["correlation"]]["ts"] - 10.0
        kc.write(tr, p)
    notes = analyze([run]).notes
    early = [n for n in notes if "start before their launch" in n]
    outside = [n for n in notes if "launched before the trace's window" in n]
    assert len(early) == len(outside) == 1
    assert all("likewise in 1 more trace file" in n for n in early + outside)


# --- issue 25 on CUDA: compute kernels while an NCCL kernel runs vs not -----------------------


def test_gpu_overlap_measures_the_same_kernels_both_ways():
    """Hand-made device timeline: kernel "gemm" takes 100 us alone and 130 us while an NCCL kernel
    runs on its device (another device's NCCL kernel does not count)."""
    from ftrun.check.overlap import gpu_overlap
    from ftrun.trace.spans import Kernel, Span, StepSpan, TraceSpans

    steps = [StepSpan(n, None, Span(n * 1000.0, n * 1000.0 + 999.0, "t")) for n in range(1, 5)]
    nccl = [
        Kernel("ncclDevKernel_Generic", "Generic", Span(3000.0, 3400.0, (0, 20)), (0, 20)),
        Kernel("ncclDevKernel_Generic", "Generic", Span(1000.0, 1900.0, (1, 20)), (1, 20)),
    ]
    compute = []
    for n in range(1, 5):  # two gemms per step, launched in step n, on device 0
        for j in range(2):
            ts = n * 1000.0 + 50.0 + j * 200.0
            compute.append((0, ts, n * 1000.0 + 10.0, 130.0 if n == 3 else 100.0, "gemm"))
    compute.append((0, 4700.0, 4010.0, 5.0, "only_alone"))  # never overlapped: not compared
    trace = TraceSpans(Path("t.json"), "ftrun", steps, [], [], [], kernels=nccl)
    got = gpu_overlap(trace, compute)
    assert got.overlapped_kernels == 2 and got.compute_kernels == 9
    assert got.slowdown == pytest.approx(1.3) and got.kernel_names_compared == 1
    assert (got.steps_overlapped, got.steps_alone) == (1, 3)
    assert got.median_step_kernel_ms_overlapped == pytest.approx(0.26)
    assert got.median_step_kernel_ms_alone == pytest.approx(0.2)
    assert gpu_overlap(TraceSpans(Path("t.json"), "ftrun", steps, [], [], []), compute) is None  # no NCCL kernel


def test_gpu_overlap_on_a_kineto_shaped_trace():
    from ftrun.check.overlap import gpu_overlap

    tr = kc.to_cuda(_one_trace())
    got = gpu_overlap(_spans(tr), _compute(tr))
    assert got is not None and got.compute_kernels == len(_compute(tr)) > 0
    assert got.steps_overlapped + got.steps_alone > 0
