"""torchft's profiler labels, as versioned data (the one place that spells them), and ftrun's own.

torchft emits these with ``torch.profiler.record_function``; ftrun's worker adds its own step
annotation. Checked against torchft 0.2.0 and torchft-nightly 2026.10.26 (``local_sgd.py``
byte-identical, ``manager.py``'s labels the same names) and torch 2.13. When a torchft release
renames a label, add a new ``LabelSet`` and keep the old one: traces written by older versions
must still be read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class LabelSet:
    torchft: str
    # Send: fragment.prepare_sync(), one manager.allreduce per parameter (or bucket) under it.
    prepare_sync: str
    allreduce: str
    allreduce_callback: str
    # Sync: fragment.perform_sync(): work.wait()s, wait, restore, should_commit, outer step.
    perform_sync: str
    wait: str
    restore_parameters: str
    save_parameters: str
    should_commit: str
    should_commit_prefix: str  # the recovery/current-stream synchronize children vary in spelling
    wait_quorum: str
    async_quorum: str
    pg_configure: str
    # The collective itself: c10d op on the calling thread, backend spans on comm threads.
    c10d_allreduce: tuple[str, ...]
    backend_allreduce: tuple[str, ...]
    nccl_kernel_prefixes: tuple[str, ...]
    # Quantized allreduce (torchft.collectives.allreduce_quantized, CUDA + triton): one
    # manager.allreduce = an alltoall (NCCL runs it as send/recv) then an allgather.
    c10d_quantized: tuple[str, ...] = ("c10d::alltoall_base_", "c10d::allgather_into_tensor_coalesced_")
    # Any NCCL kernel (both namings: ncclDevKernel_Op_... since NCCL 2.19, ncclKernel_Op_... before).
    nccl_kernel_any: tuple[str, ...] = ("ncclDevKernel_", "ncclKernel_")
    # CUDA runtime/driver calls read from host threads: kernel launches (name prefixes: kineto
    # writes e.g. cudaLaunchKernel, cudaLaunchKernelExC_v11060, cuLaunchKernelEx), stream waits.
    cuda_launch: tuple[str, ...] = ("cudaLaunchKernel", "cuLaunchKernel")
    # A CUDA graph replay: every kernel of the graph carries the replay call's correlation.
    cuda_graph_launch: tuple[str, ...] = ("cudaGraphLaunch", "cuGraphLaunch")
    # torch's host spans around an NCCL launch: c10d::<op>_ > record_param_comms > nccl:<op>.
    c10d_prefix: str = "c10d::"
    nccl_host_prefix: str = "nccl:"
    param_comms: str = "record_param_comms"
    # torchft's NCCL/Gloo group names: ``torchft_quorum_{quorum}_rank_{rank in the replica group}``
    # (0.2; only set for a nonzero group rank), ``torchft_{uuid}_rank_{rank}`` (nightly: the uuid is
    # the quorum id its Manager passes to ``reconfigure``, a decimal int; also gloo-native's names).
    torchft_pg_name: re.Pattern[str] = re.compile(r"^torchft_(?:quorum_\d+|\d+|[0-9A-Fa-f-]{8,})_rank_(?P<rank>\d+)$")
    cuda_stream_wait: tuple[str, ...] = ("cudaStreamWaitEvent",)
    cuda_sync: tuple[str, ...] = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
    # the heal: the source stages its state, the healer fetches it (torchft's quorum thread)
    send_checkpoint: str = "torchft::manager::_checkpoint_transport::send_checkpoint"
    recv_checkpoint: str = "torchft::manager::_checkpoint_transport::recv_checkpoint"
    # the quorum RPC to the lighthouse inside _async_quorum: ends when the lighthouse answered
    client_quorum: str = "torchft::manager::_client::_quorum"


TORCHFT_0_2 = LabelSet(
    torchft="0.2",
    prepare_sync="torchft::local_sgd::prepare_sync",
    allreduce="torchft::manager::allreduce",
    allreduce_callback="torchft::manager::allreduce::callback",
    perform_sync="torchft::local_sgd::perform_sync",
    wait="torchft::local_sgd::wait",
    restore_parameters="torchft::local_sgd::restore_parameters",
    save_parameters="torchft::local_sgd::save_parameters",
    should_commit="torchft::manager::should_commit",
    should_commit_prefix="torchft::manager::should_commit::",
    wait_quorum="torchft::manager::wait_quorum",
    async_quorum="torchft::manager::_async_quorum",
    pg_configure="torchft::manager::_pg::configure",
    c10d_allreduce=("c10d::allreduce_", "c10d::allreduce_coalesced_"),
    backend_allreduce=("gloo:all_reduce", "nccl:all_reduce", "gloo:allreduce", "ftrun::link::hold"),
    nccl_kernel_prefixes=("ncclDevKernel_AllReduce", "ncclKernel_AllReduce"),
)

LABELS = TORCHFT_0_2

# ftrun's own annotations (written by ftrun.worker).
PROFILER_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
# torch.optim's own span around every ``optimizer.step()`` (``Optimizer.step#SGD.step``): the inner
# steps and, inside ``perform_sync`` after ``should_commit``, the outer optimizer's step of a commit
OPTIMIZER_STEP_PREFIX = "Optimizer.step#"
FTRUN_STEP_PREFIX = "ftrun::step"
FTRUN_STEP_RE = re.compile(r"^ftrun::step#(\d+) manager_step=(\d+)$")
LINK_HOLD = "ftrun::link::hold"
# the numeric check waiting for a fragment's collectives right before torchft's ``perform_sync``
# (``ftrun.worker.sketch.NumericsProbe.sums_first``): the training thread blocked on the sync's
# data, outside torchft's span; ``ftrun.check.comm`` counts it as exposed
SKETCH_WAIT = "ftrun::sketch::wait"
# the emulated link holding a control RPC (see ftrun.linkcost): not data, never a collective
LINK_CONTROL_QUORUM = "ftrun::link::control::quorum"
# the emulated link holding a heal's checkpoint transfer (``ftrun.worker.lifecycle``): not a collective
LINK_HEAL = "ftrun::link::heal"


def ftrun_step_label(step: int, manager_step: int) -> str:
    """Name of the span that wraps training step ``step`` (manager step at the step's start)."""
    return f"{FTRUN_STEP_PREFIX}#{step} manager_step={manager_step}"
