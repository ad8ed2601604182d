"""The bootstrap store of ``--backend gloo-native``, hosted where every replica group reaches it.

torch's native reconfigurable Gloo group (``ftrun.worker.native_pg``) needs one ``TCPStore`` that
all replica groups share for the life of the run (each quorum's communicator is made on it: a
group on a store of its own waits there for peers that never come), so it cannot live in a
replica group that a fault kills. An ftrun process that starts groups runs it in a child
(``native_store_entry.py``: torch's own store server, which listens on every interface whatever
host it is given; this process does not import torch), started before the groups and stopped after
them like the lighthouse; the spec records the address the ranks connect to (``Spec.native_store``).

* every group on this host: this ftrun hosts it on a free loopback port (or ``--native-store``'s).
* across hosts (``--replica-group-id``): ``--native-store HOST:PORT``, the same on every host;
  replica group 0's ftrun hosts it on PORT, the others' ranks connect to HOST:PORT (their store
  clients wait for it up to the run's timeout, so group 0 may start later). ``check`` refuses,
  before anything starts, what cannot work: HOST a loopback address while the lighthouse is on
  another host, HOST not resolving here, resolving to loopback on a group that does not host it
  (a stock ``/etc/hosts`` maps the host's own name there: fine on group 0's host only), or PORT
  taken on the hosting host.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ftrun import layout
from ftrun.config import NATIVE_STORE_BACKENDS, RunConfig
from ftrun.errors import BadInput
from ftrun.launch.procs import spawn

NATIVE_STORE_ENTRY = str(Path(__file__).with_name("native_store_entry.py"))


@dataclass
class NativeStore:
    proc: subprocess.Popen | None  # the store child, None where another group's ftrun hosts it
    address: str  # host:port, what the spec hands the ranks
    log: Path | None


def hosts_it(cfg: RunConfig) -> bool:
    """Whether this ftrun hosts the run's bootstrap store: it starts every group, or replica group 0."""
    return cfg.hosts.backend in NATIVE_STORE_BACKENDS and cfg.hosts.replica_group_id in (-1, 0)


def _split(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    return host.strip("[]"), int(port)


def check(cfg: RunConfig, network: layout.Network) -> None:
    """``BadInput`` (one line) when ``--native-store`` cannot work from this host (module rules);
    nothing to check without it (the store is then this ftrun's, on a free loopback port)."""
    if cfg.hosts.backend not in NATIVE_STORE_BACKENDS or not cfg.hosts.native_store:
        return
    from ftrun.launch.network import is_loopback

    flag = f"--native-store {cfg.hosts.native_store}"
    host, port = _split(cfg.hosts.native_store)
    if network.scope == "hosts" and is_loopback(host):
        raise BadInput(
            f"{flag}: loopback, but the lighthouse {cfg.hosts.lighthouse} is not; the other hosts' groups "
            "could not reach the store (give the name or address of replica group 0's host)"
        )
    try:
        address = str(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][4][0])
    except socket.gaierror as e:
        raise BadInput(f"{flag}: {host} does not resolve on this host ({e.strerror})") from None
    if not hosts_it(cfg):
        if network.scope == "hosts" and is_loopback(address):
            raise BadInput(
                f"{flag}: {host} resolves to loopback ({address}) on this host, but replica group 0's ftrun "
                "hosts the store on its own host; give a name or address of that host that resolves to it here"
            )
        return
    with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("", port))  # where torch's store server listens: every interface
        except OSError as e:
            raise BadInput(f"{flag}: port {port} cannot be listened on here ({e.strerror})") from None


def open_native_store(run_dir: Path, cfg: RunConfig, free_port: int) -> NativeStore:
    """The run's bootstrap store as this ftrun's ranks reach it: started here (``hosts_it``; on
    ``--native-store``'s port, else ``free_port`` on loopback; output in ``logs/native_store.log``),
    else only its address. The ranks' store clients wait for it to accept."""
    address = cfg.hosts.native_store or f"127.0.0.1:{free_port}"
    if not hosts_it(cfg):
        return NativeStore(None, address, None)
    log_path = run_dir / layout.LOGS / "native_store.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        proc = spawn([sys.executable, NATIVE_STORE_ENTRY, address], dict(os.environ), log)
    return NativeStore(proc, address, log_path)
