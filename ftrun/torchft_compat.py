"""Everything ftrun relies on inside torchft: its profiler labels and the private attributes
of its live objects. A torchft upgrade touches this file only. Torch-free (objects come in).

Labels, as versioned data (the one place that spells them): torchft emits these with
``torch.profiler.record_function``; ftrun's worker adds its own step annotation. Checked
against torchft 0.2.0 (``local_sgd.py``, ``manager.py``) and torch 2.13. When a torchft release
renames a label, add a new ``LabelSet`` and keep the old one: traces written by older versions
must still be read.

Private attributes (torchft 0.2.0), read or wrapped only through the functions at the end:
``DiLoCo._fragments`` (the ``_StreamingDiLoCoFragment`` objects, whose ``prepare_sync`` /
``perform_sync`` / ``wait`` / ``original_parameters`` the worker wraps and reads),
``Manager._quorum_future`` (set once a quorum was asked for), ``Manager._quorum_id``,
``Manager._client._quorum`` (the RPC that returns each quorum), ``torchft._torchft.lighthouse_main``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Optional


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
    # (0.2; only set for a nonzero group rank), ``torchft_{uuid}_rank_{rank}`` (nightly).
    torchft_pg_name: re.Pattern[str] = re.compile(r"^torchft_(?:quorum_\d+|[0-9A-Fa-f-]{8,})_rank_(?P<rank>\d+)$")
    cuda_stream_wait: tuple[str, ...] = ("cudaStreamWaitEvent",)
    cuda_sync: tuple[str, ...] = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
    # the heal: the source stages its state, the healer fetches it (torchft's quorum thread)
    send_checkpoint: str = "torchft::manager::_checkpoint_transport::send_checkpoint"
    recv_checkpoint: str = "torchft::manager::_checkpoint_transport::recv_checkpoint"


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
# the emulated link holding a heal's checkpoint transfer (``ftrun.worker.lifecycle``): not a collective
LINK_HEAL = "ftrun::link::heal"


def ftrun_step_label(step: int, manager_step: int) -> str:
    """Name of the span that wraps training step ``step`` (manager step at the step's start)."""
    return f"{FTRUN_STEP_PREFIX}#{step} manager_step={manager_step}"


# --- private attributes of live torchft objects ----------------------------------------------


def diloco_fragments(diloco: Any) -> list[Any]:
    """The fragments of a ``torchft.local_sgd.DiLoCo``, in fragment-id order."""
    return list(diloco._fragments)


def has_quorum(manager: Any) -> bool:
    """Whether ``manager`` has asked for a quorum yet (before that, ``num_participants`` raises)."""
    return manager._quorum_future is not None


def quorum_id(manager: Any) -> Optional[int]:
    """The id of ``manager``'s current quorum (None before the first)."""
    return getattr(manager, "_quorum_id", None)


class _QuorumClient:
    """A transparent proxy for torchft's ``ManagerClient``: ``after(result)`` runs after each quorum RPC."""

    def __init__(self, client: Any, after: Callable[[Any], None]) -> None:
        self._client = client
        self._after = after

    def _quorum(self, *args: Any, **kwargs: Any) -> Any:
        result = self._client._quorum(*args, **kwargs)
        self._after(result)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def after_each_quorum(manager: Any, after: Callable[[Any], None]) -> None:
    """Call ``after(quorum_result)`` after every quorum RPC of ``manager`` (on torchft's quorum
    thread). ``quorum_result``: torchft's ``QuorumResult`` (``quorum_id``, ``replica_ids``,
    ``replica_rank``, ``max_step``, ``heal``, ``recover_src_replica_rank``)."""
    manager._client = _QuorumClient(manager._client, after)


def configure_quorum_id(args: tuple, kwargs: dict) -> Optional[int]:
    """The quorum id of a ``ProcessGroup.configure`` call as torchft 0.2.0 makes it:
    ``configure(store_addr, replica_id, rank, world_size, quorum_id, group_rank, ...)``."""
    q = kwargs.get("quorum_id", args[4] if len(args) > 4 else None)
    return q if isinstance(q, int) else None


def lighthouse_main() -> int:
    """torchft's lighthouse entry point (the ``torchft_lighthouse`` binary); parses ``sys.argv``."""
    from torchft._torchft import lighthouse_main as main

    return main()
