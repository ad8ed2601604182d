"""Launch the torchft lighthouse and one elastic-launcher job per replica group.

Lighthouse: torchft's own ``lighthouse_main`` (the ``torchft_lighthouse`` binary) in a child,
bound to loopback on a free port. Replica group r: ``python -m ftrun.worker.agent
--standalone --nproc-per-node G -m ftrun.worker.main SPEC`` (torch's ``torch.distributed.run``,
its ranks forked from it once it imported what a rank imports, ending at once when it
succeeded) — torchrun's standalone rendezvous
picks the group's own free master port — with the env torchft's examples use. Across hosts,
``--master-addr ADDR --master-port P`` instead, ADDR being the address other hosts reach this
one at (``ftrun.launch.network``), plus that network's ``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ftrun import layout
from ftrun.launch.lighthouse import lighthouse_argv
from ftrun.launch.procs import Proc, spawn
from ftrun.launch.zygote import fork_agent


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class Lighthouse:
    proc: subprocess.Popen
    url: str
    log: Path
    detection: layout.DetectionBound | None = None  # the timeouts it runs with (the manifest's ``detection``)


def start_lighthouse(
    run_dir: Path,
    min_replicas: int,
    host: str = "127.0.0.1",
    port: int = 0,
    join_timeout_ms: int = 10000,
    quorum_tick_ms: int = 100,
    heartbeat_timeout_ms: int = 5000,
) -> Lighthouse:
    port = port or free_port(host)
    log_path = run_dir / layout.LOGS / "lighthouse.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    argv = lighthouse_argv(f"{host}:{port}", min_replicas, join_timeout_ms, quorum_tick_ms, heartbeat_timeout_ms)
    with log_path.open("wb") as log:
        proc = spawn(argv, dict(os.environ), log)
    return Lighthouse(
        proc,
        f"http://{host}:{port}",
        log_path,
        layout.DetectionBound(heartbeat_timeout_ms, join_timeout_ms, quorum_tick_ms),
    )


@dataclass
class Group:
    replica: int
    argv: list[str]
    env: dict[str, str]
    log: Path
    proc: Proc | None = None  # a spawned launcher, or one forked by a zygote (ftrun.launch.zygote)
    restarts: int = 0
    exit_codes: list[int] = field(default_factory=list)
    log_offset: int = 0  # where the current incarnation's output starts in ``log``
    cwd: Path | None = None  # working directory (``ftrun launch``: ``groups/replica{r}/``)
    fork: bool = True  # its agent forked by this process's zygote, where there is one (``--no-fork-agents``: never)

    @property
    def process(self) -> Proc:
        """The current incarnation's process, once ``start`` ran (the supervisor's loops run after it)."""
        assert self.proc is not None, f"replica group {self.replica} was never started"
        return self.proc

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        if self.cwd is not None:
            self.cwd.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self.log_offset = log.tell()
            # forked by the training's (or its sweep's, its compare's) pre-imported zygote, when it can
            forked = fork_agent(self.argv, self.env, self.log, self.cwd) if self.fork else None
            self.proc = forked if forked is not None else spawn(self.argv, self.env, log, cwd=self.cwd)


def group_env(
    replica: int,
    replicas: int,
    lighthouse_url: str,
    threads: int,
    backend: str = "auto",
    placement_env: dict[str, str] | None = None,
    base: dict[str, str] | None = None,
) -> dict[str, str]:
    """The caller's environment (``base``, default ``os.environ``) plus what torchft's examples
    read: ``REPLICA_GROUP_ID``, ``NUM_REPLICA_GROUPS``, ``TORCHFT_LIGHTHOUSE``; ftrun's incarnation
    (``FTRUN_RESTART`` = 0: a first launch); and the group's
    devices (``placement_env``) or, without a placement, an ``NCCL_HOSTID`` per group for NCCL."""
    env = dict(os.environ if base is None else base)
    env.update(
        REPLICA_GROUP_ID=str(replica),
        NUM_REPLICA_GROUPS=str(replicas),
        TORCHFT_LIGHTHOUSE=lighthouse_url,
        PYTHONUNBUFFERED="1",
    )
    # a fresh group's incarnation is 0 whatever the caller's environment holds (a relaunch sets
    # its own: ftrun.launch.policy); an inherited one would make every rank a relaunched group's
    env[layout.ENV_RESTART] = "0"
    env.setdefault("OMP_NUM_THREADS", str(threads))  # the caller's setting wins
    if placement_env is not None:
        env.pop("NCCL_HOSTID", None)
        env.update(placement_env)
    elif backend in ("auto", "nccl", "baby-nccl"):
        # several groups on one GPU host: NCCL must not see two ranks of one "host" on one device
        env["NCCL_HOSTID"] = f"ftrun_replica{replica}"
    return env


TORCHRUN = "torch.distributed.run"
# ``ftrun train``'s groups: torch's agent, ending without the interpreter's teardown once it succeeded
FAST_EXIT_TORCHRUN = "ftrun.worker.agent"


# how often torch elastic's agent looks at its ranks (torchrun's default: 0.1 s): a rank's exit
# reaches the supervisor, and a run its result, that much sooner (a short run's last ~0.05 s on
# average), for a waitpid per rank each time
MONITOR_INTERVAL_S = 0.02


def torchrun_argv(nproc: int, master: tuple[str, int] | None = None, module: str = TORCHRUN) -> list[str]:
    """``python -m torch.distributed.run`` (or ``module``, which runs it: ``FAST_EXIT_TORCHRUN``)
    for one group of ``nproc`` ranks, no elastic restarts (ftrun relaunches the whole group);
    standalone rendezvous unless ``master`` is given."""
    argv = [
        sys.executable,
        "-m",
        module,
        "--nnodes",
        "1",
        "--nproc-per-node",
        str(nproc),
        "--max-restarts",
        "0",
        "--monitor-interval",
        str(MONITOR_INTERVAL_S),
    ]
    if master is None:
        argv.append("--standalone")
    else:
        argv += ["--master-addr", master[0], "--master-port", str(master[1])]
    return argv


def make_group(
    run_dir: Path,
    spec_path: Path,
    replica: int,
    replicas: int,
    nproc: int,
    lighthouse_url: str,
    backend: str,
    threads: int,
    master: tuple[str, int] | None = None,
    placement_env: dict[str, str] | None = None,
    network_env: dict[str, str] | None = None,
    fork: bool = True,
) -> Group:
    """``placement_env``: the group's ``CUDA_VISIBLE_DEVICES`` / ``NCCL_HOSTID`` from
    ``ftrun.launch.placement.plan`` (None: the old rule, an ``NCCL_HOSTID`` per group);
    ``network_env``: the interface variables of ``layout.Network.env``; ``fork``: ``Group.fork``."""
    env = group_env(replica, replicas, lighthouse_url, threads, backend, placement_env)
    env.update(network_env or {})
    env["OMP_NUM_THREADS"] = str(threads)
    argv = torchrun_argv(nproc, master, FAST_EXIT_TORCHRUN) + ["-m", "ftrun.worker.main", str(spec_path)]
    return Group(replica, argv, env, layout.group_log(run_dir, replica), fork=fork)
