"""``spec.json``: what every rank of a run runs (written by the parent before launch). Torch-free."""

from __future__ import annotations

from pathlib import Path

import msgspec

from ftrun.config.parts import RunConfig
from ftrun.layout.codec import FORMAT, read_record
from ftrun.layout.faults import FaultSpec
from ftrun.link_spec import Link as Link  # the emulated link (--link): one type from the flag to the reports

SPEC_LIMIT = 16 << 20  # bytes of spec.json read at most: the config tree, the faults and the network: a few KB


class Network(msgspec.Struct, kw_only=True):
    """How the other hosts of a job reach this host's replica group (``ftrun.launch.network``).
    ``scope``: "loopback" (every group on this host) or "hosts"; ``address``: the group's store
    (torchrun ``--master-addr``) and process-group address; ``interface``: the one holding it;
    ``advertise_host``: what torchft's manager and checkpoint server hand to the other groups;
    ``found``: how the address was chosen; ``env``: ``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME``
    as the groups get them, ``env_from_user`` the ones the user had set (kept as they were)."""

    scope: str
    address: str
    interface: str | None
    advertise_host: str
    found: str
    env: dict[str, str] = {}
    env_from_user: list[str] = []
    store_port: int | None = None  # torchrun --master-port (None: --standalone picks one)


class Spec(msgspec.Struct):
    """``spec.json``: what every rank of the run runs. ``config``: the run's ``RunConfig`` tree
    (``ftrun.config``), decoded with its type (written and read by the same ftrun)."""

    config: RunConfig
    run_dir: str
    job_id: str
    profile_window: list[int] | None
    threads: int
    link: Link | None
    faults: list[FaultSpec]
    quorum_timeout_s: float
    start_barrier: int | None  # ranks writing to this run dir (None: groups on several hosts)
    hostname: str
    format: int = FORMAT
    network: Network | None = None  # None: not given (loopback)
    # ``--backend gloo-native``: the bootstrap store (``host:port``) every replica group's native
    # group meets on (``ftrun.launch.native_store``); None for every other backend
    native_store: str | None = None


def read_spec(path: Path) -> Spec:
    """spec.json -> ``Spec`` (a rank's input; ``BadInput``, one line naming the file, if it is
    unreadable, over ``SPEC_LIMIT`` bytes or not one)."""
    return read_record(Path(path), SPEC_LIMIT, "spec", lambda stamp: Spec)
