"""Checks before ``ftrun train`` starts anything: what would fail in every worker anyway is
refused here with its cause (``BadInput``, one line). Torch-free.

* a built-in model whose parameters alone (``ftrun.model_desc``, once per rank on this host), or
  one batch's token ids and logits, exceed this host's memory;
* more replica groups than this host's available memory holds, each costing at least its
  processes' torch import (``PROCESS_BYTES``; once for the zygote where a zygote forks them)
  beside its parameters and batch;
* ``--lighthouse URL`` that does not accept a connection within ``--quorum-timeout``;
* a ``--backend`` the installed torchft or torch does not offer (``ftrun.torchft_compat``).
* across hosts, an address or interface the other hosts could not reach this group at
  (``ftrun.launch.network.resolve``, whose result ``preflight`` returns).
(A backend this host cannot run is refused by ``ftrun.launch.placement``.) Each check only
refuses what cannot work; anything it cannot tell is left to the run.
"""

from __future__ import annotations

import os
import time

from ftrun.config import RunConfig
from ftrun.errors import BadInput
from ftrun.layout import Network


def has_cuda_device() -> bool:
    """Whether this host has a GPU ftrun may use: the same rule as the placement
    (``ftrun.launch.placement.host_devices``), so "auto" never resolves differently from it."""
    from ftrun.launch.placement import host_devices

    return bool(host_devices())


# What one process of a replica group (its torchrun agent, or one of its workers started fresh)
# holds before any model: torch and torchft imported and their runtime started. A constant measured
# once per torch version, not at run time: a 1-rank group (agent + worker) of the default model held
# 0.56 GiB PSS with torch 2.13 (CPU) and torchft 0.2; importing torch and torchft alone is
# 0.21 GiB PSS. Half the group's figure per process, so the estimate stays a lower bound.
# Where ftrun's ranks are forked from their agent (``ftrun.worker.agent.fork_safe``) they share its
# pages: a parked 1-rank group held 0.34 GiB PSS, so only the agent is counted (a lower bound still).
PROCESS_BYTES = int(0.28 * 2**30)
MEASURED_WITH = "torch 2.13, torchft 0.2"


def _meminfo(key: str) -> int | None:
    try:
        for line in open("/proc/meminfo"):
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def host_memory_bytes() -> int | None:
    """This host's memory (``MemTotal``), or None where it cannot be read."""
    return _meminfo("MemTotal")


def available_memory_bytes() -> int | None:
    """Memory new processes can have now without swapping (``MemAvailable``), or None."""
    return _meminfo("MemAvailable")


def batch_bytes(cfg: RunConfig) -> int:
    """One step's token ids (int64 ``[B, T]``) and fp32 logits ``[B, T, V]``, which every model
    (built-in or a user's, by the factory contract) holds at once: a lower bound on a step."""
    return cfg.data.batch_size * cfg.data.seq_len * (8 + 4 * cfg.model.vocab)


def fresh_workers(cfg: RunConfig) -> int:
    """The workers of one group that start as fresh interpreters: all of them, unless this host's
    agents fork them (``ftrun.worker.agent.fork_safe``: Linux and a torch without CUDA/ROCm)."""
    from ftrun.worker.agent import fork_safe  # torch-free: reads the installed files

    return 0 if fork_safe() else cfg.hosts.nproc_per_replica


def fresh_agents(cfg: RunConfig) -> int:
    """1 when a group's agent starts as a fresh interpreter; 0 where a zygote forks it
    (``ftrun.launch.zygote``: ``--fork-agents`` and ``fork_safe``; the training's own zygote or
    its sweep's or compare's), sharing the runtime the zygote holds."""
    from ftrun.worker.agent import fork_safe  # torch-free: reads the installed files

    return 0 if cfg.hosts.fork_agents and fork_safe() else 1


def zygote_bytes(cfg: RunConfig) -> int:
    """What this training adds once for its own zygote (``PROCESS_BYTES``): 0 where it uses a
    sweep's or compare's (``ENV_ZYGOTE`` set) or agents are not forked."""
    from ftrun.launch.zygote import ENV_ZYGOTE

    return PROCESS_BYTES if fresh_agents(cfg) == 0 and not os.environ.get(ENV_ZYGOTE) else 0


def group_bytes(cfg: RunConfig) -> int:
    """A lower bound on one replica group's footprint on this host: its torchrun agent unless a
    zygote forks it, and each worker it starts fresh (``PROCESS_BYTES`` each; a forked worker
    shares its agent's), and per worker a built-in model's parameters and one batch."""
    arch = cfg.model_spec().architecture
    per_rank = batch_bytes(cfg) + (arch.param_bytes() if arch is not None else 0)
    return (fresh_agents(cfg) + fresh_workers(cfg)) * PROCESS_BYTES + cfg.hosts.nproc_per_replica * per_rank


def _workers_text(cfg: RunConfig) -> str:
    n, fresh = cfg.hosts.nproc_per_replica, fresh_workers(cfg)
    return f"{n} worker(s)" if fresh == n else f"{n} worker(s) forked from it (counted in the agent's)"


def _group_text(cfg: RunConfig, zygote: int) -> str:
    """What a group's estimate counts, in words (``group_bytes``; ``zygote``: ``zygote_bytes``)."""
    gib = 2**30
    per_process = f"{PROCESS_BYTES / gib:.2f} GiB"
    if fresh_agents(cfg):
        return (
            f"a torchrun agent and {_workers_text(cfg)} importing torch, {per_process} apiece as measured with "
            f"{MEASURED_WITH}, plus parameters and one batch per worker"
        )
    own = f"; plus {per_process} once for the zygote that imports torch for them" if zygote else ""
    return (
        f"parameters and one batch per worker: its agent and workers are forked from a zygote and share "
        f"its runtime ({per_process} as measured with {MEASURED_WITH}){own}"
    )


def check_groups_fit(cfg: RunConfig) -> None:
    """Refuse more replica groups on this host than its available memory holds (``group_bytes``
    each, plus ``zygote_bytes`` once), naming the numbers and the most groups that fit; what it
    cannot read is left to the run."""
    available = available_memory_bytes()
    groups = len(cfg.hosts.groups_here)
    each, zygote = group_bytes(cfg), zygote_bytes(cfg)
    if available is None or groups * each + zygote <= available:
        return
    gib = 2**30
    raise BadInput(
        f"--replicas {cfg.hosts.replicas}: {groups} replica group(s) on this host need at least "
        f"{(groups * each + zygote) / gib:.1f} GiB ({each / gib:.2f} GiB each: {_group_text(cfg, zygote)}), but "
        f"{available / gib:.1f} GiB is available; at most {max(0, available - zygote) // each} group(s) fit"
    )


def check_memory(cfg: RunConfig) -> None:
    """Refuse a run whose parameters (built-in models; a user's is sized once built, in
    ``ftrun.model_spec.check``) or one batch's ids and logits alone exceed this host's memory,
    or whose replica groups together exceed its available memory (``check_groups_fit``)."""
    total = host_memory_bytes()
    if not total:
        return
    ranks = len(cfg.hosts.groups_here) * cfg.hosts.nproc_per_replica
    have = f"for {ranks} rank(s) on this host, which has {total / 2**30:.1f} GiB of memory"
    arch = cfg.model_spec().architecture
    if arch is not None:
        need = arch.param_bytes() * ranks  # parameters only: a lower bound on what a run needs
        if need > total:
            raise BadInput(
                f"--width {arch.width} --blocks {arch.blocks}: the model's parameters alone need "
                f"{need / 2**30:.1f} GiB {have}"
            )
    need = batch_bytes(cfg) * ranks
    if need > total:
        raise BadInput(
            f"--batch-size {cfg.data.batch_size} --seq-len {cfg.data.seq_len}: one batch's token ids and logits "
            f"(vocab {cfg.model.vocab}) alone need {need / 2**30:.3g} GiB {have}"
        )
    check_groups_fit(cfg)


def check_lighthouse(cfg: RunConfig) -> None:
    """``--lighthouse``: a TCP connection within ``--quorum-timeout`` (retried: it may be starting)."""
    from ftrun.launch.lighthouse import unreachable

    if not cfg.hosts.lighthouse:
        return
    deadline = time.monotonic() + cfg.timeouts.quorum_timeout_s
    while True:
        cause = unreachable(cfg.hosts.lighthouse, max(0.5, min(5.0, deadline - time.monotonic())))
        if cause is None:
            return
        if time.monotonic() >= deadline:
            raise BadInput(
                f"--lighthouse {cfg.hosts.lighthouse}: no answer within "
                f"--quorum-timeout {cfg.timeouts.quorum_timeout_s:g} s ({cause})"
            )
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def check_backend(cfg: RunConfig) -> None:
    """A process group the installed torchft or torch does not offer (``ftrun.torchft_compat``)."""
    from ftrun.launch.placement import host_devices
    from ftrun.torchft_compat import backend_unavailable, installed

    cuda = cfg.hosts.backend == "nccl2" and bool(host_devices())  # (nvidia-smi: only when it decides)
    why = backend_unavailable(cfg.hosts.backend, installed(), cuda=cuda)
    if why:
        raise BadInput(why)


def preflight(cfg: RunConfig, environ: dict | None = None) -> Network:
    """Every check above, in order; returns how the other hosts reach this host's groups."""
    from ftrun.launch import native_store
    from ftrun.launch.network import resolve

    check_backend(cfg)
    check_memory(cfg)
    check_lighthouse(cfg)
    network = resolve(cfg, os.environ if environ is None else environ)
    native_store.check(cfg, network)
    return network


def why_unavailable(cfg: RunConfig) -> str | None:
    """Why this host cannot run ``cfg`` (the same checks ``ftrun train`` makes before it starts
    anything: placement (backend), quantize, memory), or None. For ``ftrun sweep``'s cells."""
    from ftrun.launch.placement import check_quantize, plan

    try:
        check_backend(cfg)
        placement = plan(cfg.hosts.backend, cfg.hosts.groups_here, cfg.hosts.nproc_per_replica)
        check_quantize(cfg.optimizer.quantize, cfg.hosts.backend, placement)
        check_memory(cfg)
    except BadInput as e:
        return str(e)
    return None
