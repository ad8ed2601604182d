"""Checks before ``ftrun train`` starts anything: what would fail in every worker anyway is
refused here with its cause (``BadInput``, one line). Torch-free.

* a built-in model whose parameters alone (``ftrun.model_desc``, once per rank on this host), or
  one batch's token ids and logits, exceed this host's memory;
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
from ftrun.model_desc import architecture


def has_cuda_device() -> bool:
    """Whether this host has a GPU ftrun may use: the same rule as the placement
    (``ftrun.launch.placement.host_devices``), so "auto" never resolves differently from it."""
    from ftrun.launch.placement import host_devices

    return bool(host_devices())


def host_memory_bytes() -> int | None:
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def batch_bytes(cfg: RunConfig) -> int:
    """One step's token ids (int64 ``[B, T]``) and fp32 logits ``[B, T, V]``, which every model
    (built-in or a user's, by the factory contract) holds at once: a lower bound on a step."""
    return cfg.data.batch_size * cfg.data.seq_len * (8 + 4 * cfg.model.vocab)


def check_memory(cfg: RunConfig) -> None:
    """Refuse a run whose parameters (built-in models; a user's is sized once built, in
    ``ftrun.model_spec.check``) or one batch's ids and logits alone exceed this host's memory."""
    total = host_memory_bytes()
    if not total:
        return
    ranks = len(cfg.hosts.groups_here) * cfg.hosts.nproc_per_replica
    have = f"for {ranks} rank(s) on this host, which has {total / 2**30:.1f} GiB of memory"
    arch = architecture(cfg.resolved())
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
    from ftrun.torchft_compat import backend_unavailable, installed

    why = backend_unavailable(cfg.hosts.backend, installed())
    if why:
        raise BadInput(why)


def preflight(cfg: RunConfig, environ: dict | None = None) -> Network:
    """Every check above, in order; returns how the other hosts reach this host's groups."""
    from ftrun.launch.network import resolve

    check_backend(cfg)
    check_memory(cfg)
    check_lighthouse(cfg)
    return resolve(cfg, os.environ if environ is None else environ)


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
