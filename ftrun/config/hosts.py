"""``HostsConfig``: the replica groups, their ranks and process group, and (several hosts) where
this one runs: a part of ``ftrun.config.parts.RunConfig``. Torch-free. Its rules read only its
own fields (``cfg``, the whole tree, is taken as every part's ``check`` takes it)."""

# No ``from __future__ import annotations``: the fields' ``Opt``s are objects at class creation
# (``ftrun.config.options`` reads them), as in ``ftrun.config.parts``.

import re
from typing import Annotated, ClassVar

import msgspec

from ftrun.config.fields import (
    _RUN_NAME_RE,
    BACKENDS,
    GROUPS,
    HOSTS,
    MAX_REPLICAS,
    NATIVE_STORE_BACKENDS,
    TRAIN,
    At,
    Opt,
    _at_least_one,
)


class HostsConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """The replica groups, their ranks and process group, and (several hosts) where this one runs."""

    PANEL: ClassVar[str] = GROUPS

    replicas: Annotated[int, Opt("Replica groups R (default 2).", flags=("--replicas", "--num-replica-groups"))] = 2
    nproc_per_replica: Annotated[int, Opt("Ranks per replica group G (default 1).")] = 1
    backend: Annotated[
        str,
        Opt("auto (NCCL with CUDA, else Gloo), gloo, nccl, baby-nccl, baby-gloo, gloo-native, nccl2, torchcomms."),
    ] = "auto"
    min_replicas: Annotated[int, Opt("torchft min_replica_size (and the lighthouse's min_replicas).")] = 1
    lighthouse: Annotated[
        str, Opt("Use this lighthouse (http://HOST:PORT) instead of starting one.", commands=(TRAIN,), panel=HOSTS)
    ] = ""
    replica_group_id: Annotated[
        int, Opt("Run only replica group K here (needs --lighthouse).", commands=(TRAIN,), panel=HOSTS)
    ] = -1  # -1: every group, on this host
    job_id: Annotated[
        str, Opt("The job's id (default: from --lighthouse and --run-name).", commands=(TRAIN,), panel=HOSTS)
    ] = ""
    master_addr: Annotated[
        str,
        Opt(
            "torchrun --master-addr for this group's store (default: this host's address toward the lighthouse).",
            commands=(TRAIN,),
            panel=HOSTS,
        ),
    ] = ""
    master_port: Annotated[
        int, Opt("torchrun --master-port (default: a free port).", commands=(TRAIN,), panel=HOSTS)
    ] = 0
    advertise_host: Annotated[
        str,
        Opt(
            "The name other groups reach this host by (default: this host's address toward the lighthouse).",
            commands=(TRAIN,),
            panel=HOSTS,
        ),
    ] = ""
    interface: Annotated[
        str,
        Opt(
            "Interface toward the other hosts (default: toward the lighthouse); sets GLOO/NCCL_SOCKET_IFNAME if unset.",
            commands=(TRAIN,),
            panel=HOSTS,
        ),
    ] = ""
    native_store: Annotated[
        str,
        Opt(
            "gloo-native/nccl2 across hosts: the bootstrap store HOST:PORT all groups reach; group 0's ftrun hosts it.",
            commands=(TRAIN,),
            panel=HOSTS,
            metavar="HOST:PORT",
        ),
    ] = ""  # "": every group here, the store on a free loopback port
    fork_agents: Annotated[
        bool,
        Opt(
            "Fork the groups' torchrun agents from one process that imported torch (Linux, CPU-only torch).",
            commands=(TRAIN,),
        ),
    ] = True
    start_gate: Annotated[
        str,
        Opt(
            "A file: the groups start (imports, model) at once and build their torchft Manager once it exists.",
            commands=(),
        ),
    ] = ""  # sweep --warm-start's next cell, parked while the current one trains (ftrun.worker.park)

    @property
    def groups_here(self) -> list[int]:
        """The replica groups this host launches."""
        return list(range(self.replicas)) if self.replica_group_id < 0 else [self.replica_group_id]

    def check_sizes(self, cfg: object, at: At) -> None:
        _at_least_one(at, self, "replicas", "nproc_per_replica")
        for key in ("replicas", "nproc_per_replica"):  # lists of groups and ranks are made from them
            if getattr(self, key) > MAX_REPLICAS:
                raise at.bad(key, getattr(self, key), f"must be at most {MAX_REPLICAS:,}")

    def check(self, cfg: object, at: At) -> None:
        if self.backend not in BACKENDS:
            raise at.bad("backend", self.backend, f"choose from {', '.join(BACKENDS)}")
        if not 1 <= self.min_replicas <= self.replicas:
            raise at.bad("min_replicas", self.min_replicas, f"must be between 1 and --replicas ({self.replicas})")

    def check_hosts(self, cfg: object, at: At) -> None:
        """The several-hosts rules (after the faults, as a user reads the flags)."""
        if self.replica_group_id != -1:
            if not 0 <= self.replica_group_id < self.replicas:
                raise at.bad(
                    "replica_group_id",
                    self.replica_group_id,
                    f"must be in 0..--num-replica-groups-1 ({self.replicas - 1})",
                )
            if not self.lighthouse:
                raise at.bad(
                    "replica_group_id",
                    self.replica_group_id,
                    "needs --lighthouse http://HOST:PORT (start one with `ftrun lighthouse`)",
                )
        if self.master_port and not 1 <= self.master_port <= 65535:
            raise at.bad("master_port", self.master_port, "must be a TCP port")
        if self.job_id and not _RUN_NAME_RE.fullmatch(self.job_id):
            raise at.bad("job_id", self.job_id, "use letters, digits, '.', '_' or '-'")
        self.check_native_store(at)

    def check_native_store(self, at: At) -> None:
        """``--native-store HOST:PORT``: only for a native group, and needed by one across hosts
        (a group there cannot know where replica group 0's ftrun hosts the store)."""
        native = self.backend in NATIVE_STORE_BACKENDS
        if not self.native_store:
            if native and self.replica_group_id >= 0:
                raise at.bad(
                    "backend",
                    self.backend,
                    "across hosts (--replica-group-id) needs --native-store HOST:PORT, the bootstrap store every "
                    "group reaches (replica group 0's ftrun hosts it; the same value on every host)",
                )
            return
        if not native:
            raise at.bad("native_store", self.native_store, f"only for --backend {' or '.join(NATIVE_STORE_BACKENDS)}")
        host, _, port = self.native_store.rpartition(":")
        if not host.strip("[]") or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise at.bad("native_store", self.native_store, "expected HOST:PORT (a TCP port 1-65535)")

    def check_lighthouse(self, at: At) -> None:
        if self.lighthouse and not re.fullmatch(r"https?://[^/:\s]+(:\d+)?/?", self.lighthouse):
            raise at.bad("lighthouse", self.lighthouse, "expected http://HOST:PORT")
