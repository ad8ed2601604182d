"""Profiler labels, as versioned data. The one place that spells them.

torchft emits these with ``torch.profiler.record_function``; ftrun's worker adds its own step
annotation. Checked against torchft 0.2.0 (``local_sgd.py``, ``manager.py``) and torch 2.13.
When a torchft release renames a label, add a new ``LabelSet`` and keep the old one: traces
written by older versions must still be read.
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
    cuda_stream_wait: tuple[str, ...] = ("cudaStreamWaitEvent",)
    cuda_sync: tuple[str, ...] = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")


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
FTRUN_STEP_PREFIX = "ftrun::step"
FTRUN_STEP_RE = re.compile(r"^ftrun::step#(\d+) manager_step=(\d+)$")
LINK_HOLD = "ftrun::link::hold"
# the emulated link holding a control RPC (see ftrun.linkcost): not data, never a collective
LINK_CONTROL_QUORUM = "ftrun::link::control::quorum"


def ftrun_step_label(step: int, manager_step: int) -> str:
    """Name of the span that wraps training step ``step`` (manager step at the step's start)."""
    return f"{FTRUN_STEP_PREFIX}#{step} manager_step={manager_step}"
