"""``--backend gloo-native`` and ``nccl2``: torch's own ``ProcessGroupGloo`` or ``ProcessGroupNCCL2``
built with ``enable_reconfigure=True`` (torch >= 2.14), the native group torchft-nightly's Manager
reconfigures at every quorum change (nccl2 on the rank's CUDA device, registered as torch's
``init_process_group("nccl2")`` registers it: a custom backend type).

How torchft wires one (its ``manager_integ_test.py`` and ``reconfigure_test.py``): every replica
group's rank g creates ``ProcessGroup`` + ``ProcessGroupGloo(PrefixStore("native/g", bootstrap),
replica, replicas, enable_reconfigure=True)`` on one bootstrap ``TCPStore`` that every replica
group reaches, with distinct initial ranks; the communicator is made only by ``reconfigure``, with
the peers' handles (``gloo:<initial rank>:<last uuid>:<rank>:<store host>:<port>``, ``nccl2:...``) that the
lighthouse hands out with each quorum. ftrun's bootstrap store is hosted by the ftrun process that
starts the groups (``ftrun.launch.native_store``; its address is the spec's ``native_store``).

``NativeGroup`` carries the native group under ftrun's wrappers (the emulated link, the sketches),
which are torchft ``ProcessGroupWrapper``s: those read each peer's handle as torchft's JSON
(``id``, ``store``, ``global_rank``) to find their rank, so the native handle travels inside it
(``native``) and ``reconfigure`` hands the native group the native handles, in the quorum's order.
The native group stays the same object across quorums (torchft: "Aborting must not discard the
native PG"); after each reconfigure it is named as torchft names its own groups,
``torchft_{uuid}_rank_{rank in the replica group}`` (``LabelSet.torchft_pg_name``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torchft.process_group import ProcessGroupWrapper, ReconfigureOptions

c10d: Any = dist  # torch >= 2.14's reconfigure API, which torch 2.13's type stubs (mypy's) do not have


@dataclass(frozen=True)
class NativeSite:
    """Where a rank's native group meets the others: the bootstrap store (``host:port``), this
    replica group's index and the number of replica groups (the initial rank and size), and the
    rank inside the replica group (one native group per rank position: the store prefix)."""

    store: str
    replica: int
    replicas: int
    group_rank: int


class NativeGroup(ProcessGroupWrapper):
    """torchft's process-group interface over one native reconfigurable group (``backend``: the
    ``--backend`` it is, ``gloo-native`` or ``nccl2``)."""

    def __init__(self, native: Any, store: str, timeout: timedelta, backend: str = "gloo-native") -> None:
        super().__init__(timeout=timeout, pg=native)
        self._native = native  # a torch.distributed.ProcessGroup (Any: torch 2.13's stubs lack reconfigure)
        self._store_addr = store
        self._backend = backend

    def get_reconfigure_handle(self) -> str:
        return json.dumps(
            {
                "id": self._handle_id(),
                "store": self._store_addr,
                "global_rank": self._global_rank,
                "native": self._native.get_reconfigure_handle(),
            }
        )

    def reconfigure(self, opts: ReconfigureOptions) -> Any:
        peers = [json.loads(h) for h in opts.handles]
        self._rank = [p["id"] for p in peers].index(self._handle_id())
        self._uuid = opts.uuid
        native = ReconfigureOptions()
        native.uuid = opts.uuid
        native.handles = [p["native"] for p in peers]
        native.timeout = opts.timeout or self._timeout
        work = self._native.reconfigure(native)
        work.wait()
        if self._group_rank is not None and self._group_world_size:
            self._native._set_group_name(f"torchft_{opts.uuid}_rank_{self._group_rank % self._group_world_size}")
        return work

    def errored(self) -> Exception | None:
        """The native backend's asynchronous error (as torchft's Manager reads a native group's)."""
        from torch._C._distributed_c10d import ErrorType

        for device in self._native._device_types:
            error = self._native._get_backend(device).get_error()
            if error != ErrorType.SUCCESS:
                return c10d.DistBackendError(f"Native process group error: {error}")
        return None

    def abort(self, errored: bool = True) -> None:
        self._native.abort()  # the group and its handle stay: the next reconfigure makes a new communicator

    def shutdown(self) -> None:
        self._native.shutdown()

    def getBackendName(self) -> str:
        return "gloo" if self._backend == "gloo-native" else self._backend


def native_group(site: NativeSite, timeout: timedelta, backend: str = "gloo-native") -> NativeGroup:
    """This rank's native ``backend`` group (``gloo-native``: CPU Gloo; ``nccl2``: NCCL on the
    current CUDA device) on the bootstrap store at ``site.store`` (a client: the store is hosted
    by an ftrun launcher), not yet connected (the first quorum reconfigures it)."""
    host, _, port = site.store.rpartition(":")
    store = c10d.TCPStore(host.strip("[]"), int(port), is_master=False, timeout=timeout, wait_for_workers=False)
    prefixed = c10d.PrefixStore(f"native/{site.group_rank}", store)
    pg = c10d.ProcessGroup(prefixed, site.replica, site.replicas)
    if backend == "nccl2":
        opts = c10d.ProcessGroupNCCL.Options()
        opts._timeout = timeout
        opts.enable_reconfigure = True
        impl = c10d.ProcessGroupNCCL2(prefixed, site.replica, site.replicas, opts)
        kind, device = c10d.ProcessGroup.BackendType.CUSTOM, torch.device("cuda")
    else:
        impl = c10d.ProcessGroupGloo(prefixed, site.replica, site.replicas, timeout=timeout, enable_reconfigure=True)
        kind, device = c10d.ProcessGroup.BackendType.GLOO, torch.device("cpu")
    pg._set_default_backend(kind)
    pg._register_backend(device, kind, impl)
    return NativeGroup(pg, site.store, timeout, backend)
