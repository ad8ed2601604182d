"""torchft's process-group API, either release's: 0.2.x configures a group with
``ProcessGroup.configure(store_addr, replica_id, rank, world_size, ...)`` ("configure"); the
nightly removed it for ``supports_reconfigure`` / ``set_rank_info`` / ``get_reconfigure_handle()`` /
``reconfigure(ReconfigureOptions)`` ("reconfigure"), exchanges the handles through the lighthouse
(the quorum RPC gains a ``reconfigure_handle`` argument, its result ``reconfigure_handles``) and
refuses a group without ``supports_reconfigure``. ftrun's wrapper (``ftrun.worker.link.LinkEmulator``)
inherits torchft's ``ProcessGroupWrapper`` and so either API; ``connect()`` joins a group without a
Manager on either API (nightly: through the private ``ProcessGroup._handle_id()``).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any


def pg_api(pg: Any) -> str:
    """``reconfigure`` or ``configure``: what a live torchft process group offers."""
    return "reconfigure" if getattr(pg, "supports_reconfigure", False) else "configure"


def connect(pg: Any, store_addr: str, rank: int, world_size: int, timeout: timedelta = timedelta(seconds=60)) -> None:
    """Make ``pg`` rank ``rank`` of a group of ``world_size`` that meets on the TCPStore at
    ``store_addr`` (``host:port/prefix``, one prefix per group), without a Manager.

    "configure": ``pg.configure(store_addr, "0", rank, world_size)``. "reconfigure": the
    exchange of torchft's ``reconfigure_with_store``, except that each handle names the given
    store: torchft's own ``get_reconfigure_handle()`` starts a store on this host's name (every
    interface), and ftrun's tests bind loopback only."""
    if pg_api(pg) == "configure":
        pg.configure(store_addr, "0", rank, world_size)
        return
    from torchft.process_group import ReconfigureOptions, create_store_client

    host_port = store_addr.partition("/")[0]
    store = create_store_client(store_addr, timeout)
    store.set(f"handle/{rank}", json.dumps({"id": pg._handle_id(), "store": host_port, "global_rank": rank}))
    if rank == 0:
        import secrets  # (here: hashlib and random stay out of the torch-free commands' imports)

        store.set("uuid", str(secrets.randbits(63)))
    keys = ["uuid", *(f"handle/{r}" for r in range(world_size))]
    store.wait(keys, timeout)
    uuid, *handles = store.multi_get(keys)
    opts = ReconfigureOptions()
    opts.uuid = int(uuid)
    opts.handles = [h.decode("utf-8") for h in handles]
    opts.timeout = timeout
    pg.reconfigure(opts).wait()


def configure_method(pg: Any) -> str:
    """The name of the call torchft's Manager makes on ``pg`` at every quorum change:
    ``configure`` (0.2.x) or ``reconfigure`` (the nightly, whose groups ``supports_reconfigure``)."""
    return "reconfigure" if hasattr(pg, "supports_reconfigure") and hasattr(pg, "reconfigure") else "configure"


def configure_quorum_id(args: tuple, kwargs: dict) -> int | None:
    """The quorum id of a ``ProcessGroup.configure`` call as torchft 0.2.0 makes it:
    ``configure(store_addr, replica_id, rank, world_size, quorum_id, group_rank, ...)``."""
    q = kwargs.get("quorum_id", args[4] if len(args) > 4 else None)
    return q if isinstance(q, int) else None
