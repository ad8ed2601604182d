"""Build one rank: who it is, its device, model and optimizers, and its torchft Manager.

Environment (set by ftrun's launcher, as torchft's examples use): ``REPLICA_GROUP_ID``,
``NUM_REPLICA_GROUPS``, ``TORCHFT_LIGHTHOUSE``, ``FTRUN_RESTART`` (incarnation of the group,
0 = first); torchrun adds ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
``MASTER_PORT`` (the group's own store, which the Manager uses too).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TypedDict

import torch
import torchft

from ftrun import layout
from ftrun.config import NATIVE_STORE_BACKENDS, RunConfig
from ftrun.link_spec import Link
from ftrun.model_spec import ModelSpec
from ftrun.parent_death import set_parent_death_signal
from ftrun.torchft_compat import RECONFIGURE_BACKENDS, backend_unavailable, installed
from ftrun.worker.data import Batches
from ftrun.worker.fragments import Fragment
from ftrun.worker.lifecycle import Lifecycle
from ftrun.worker.models import build_fragments, build_model


def die_with_parent() -> None:
    """SIGKILL this rank if its launcher dies, even if the launcher was SIGKILLed."""
    set_parent_death_signal(signal.SIGKILL)
    if os.getppid() == 1:
        os._exit(1)


@dataclass(frozen=True)
class RankEnv:
    replica: int
    restart: int
    rank: int
    group_size: int
    local_rank: int

    @classmethod
    def from_environ(cls) -> RankEnv:
        e = os.environ
        return cls(
            int(e[layout.ENV_REPLICA]),
            int(e.get(layout.ENV_RESTART, 0)),
            int(e.get("RANK", 0)),
            int(e.get("WORLD_SIZE", 1)),
            int(e.get("LOCAL_RANK", 0)),
        )


def pick_device(backend: str, local_rank: int) -> tuple[str, torch.device]:
    """``auto`` = NCCL when CUDA is available, else Gloo. NCCL: local rank g uses ``cuda:g`` of
    the devices its group sees (the launcher sets ``CUDA_VISIBLE_DEVICES`` per group,
    ``ftrun.launch.placement``); modulo the count only when run without that placement."""
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend in ("nccl", "baby-nccl", "nccl2"):
        device = torch.device("cuda", local_rank % max(torch.cuda.device_count(), 1))
        torch.cuda.set_device(device)
        return backend, device
    return backend, torch.device("cpu")


def device_label(device: torch.device, environ: dict | None = None) -> str:
    """``cuda:0 (GPU 3)`` — the device and, when ``CUDA_VISIBLE_DEVICES`` maps it, the host's GPU id."""
    if device.type != "cuda":
        return str(device)
    vis = [
        x.strip()
        for x in (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES", "").split(",")
        if x.strip()
    ]
    idx = device.index or 0
    return f"{device} (GPU {vis[idx]})" if idx < len(vis) else str(device)


@dataclass
class Training:
    model: torch.nn.Module
    fragments: list[Fragment]
    train_model: torch.nn.Module  # the model, or its DDP wrapper when the group has several ranks
    data: Batches
    inner: torch.optim.Optimizer
    outer: list[torch.optim.Optimizer]


def make_model(spec: ModelSpec, device: torch.device) -> torch.nn.Module:
    """The run's model (built-in or ``--model MODULE:FACTORY``) with its seeded weights (the same on every rank)."""
    torch.manual_seed(spec.seed)
    return build_model(spec).to(device)


def make_data(cfg: RunConfig, stream: int) -> Batches:
    return Batches(cfg.data.data, cfg.model.vocab, cfg.data.seq_len, cfg.data.batch_size, cfg.data.seed, stream)


FUSED_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)  # torch's fused AdamW's


def make_inner(model: torch.nn.Module, cfg: RunConfig) -> torch.optim.Optimizer:
    """The inner optimizer: AdamW, torch's fused implementation where every parameter allows it
    (on CPU or CUDA, in a dtype it takes), else its default. The same update; fused, a step is one
    op instead of ~20 per parameter: less time per step, and a profiled step records a third
    fewer events, which its profiler's stop and the trace's export take time in proportion to
    (a short run waits on them at its end)."""
    params = list(model.parameters())
    fused = all(p.device.type in ("cpu", "cuda") and p.dtype in FUSED_DTYPES for p in params)
    return torch.optim.AdamW(params, lr=cfg.optimizer.inner_lr, fused=fused or None)


def train_step(
    model: torch.nn.Module, inner: torch.optim.Optimizer, data: Batches, device: torch.device
) -> torch.Tensor:
    """One inner step: next batch, forward, cross-entropy, backward, ``inner.step()``. Returns the loss."""
    import torch.nn.functional as F

    inputs, targets = data.next()
    inputs, targets = inputs.to(device), targets.to(device)
    inner.zero_grad()
    loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
    loss.backward()
    inner.step()
    return loss


def data_stream(env: RankEnv) -> int:
    """The rank's data stream: its own per group and rank; a restarted group draws fresh data."""
    return env.replica * env.group_size + env.rank + 1000 * env.restart


def build_training(cfg: RunConfig, env: RankEnv, device: torch.device) -> Training:
    """Same seeded weights on every rank; AdamW inside; Nesterov SGD per fragment outside."""
    spec = cfg.model_spec()
    model = make_model(spec, device)
    fragments = build_fragments(model, spec)  # a user's model was checked by the parent before launch
    train_model: torch.nn.Module = model
    if env.group_size > 1:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        dist.init_process_group(
            "nccl" if device.type == "cuda" else "gloo", timeout=timedelta(seconds=cfg.timeouts.timeout_s)
        )
        train_model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    data = make_data(cfg, data_stream(env))
    inner = make_inner(model, cfg)
    outer: list[torch.optim.Optimizer] = [
        torch.optim.SGD(
            f.parameters(),
            lr=cfg.optimizer.outer_lr,
            momentum=cfg.optimizer.outer_momentum,
            nesterov=cfg.optimizer.outer_momentum > 0,
        )
        for f in fragments
    ]
    return Training(model, fragments, train_model, data, inner, outer)


class HealSnapshot(TypedDict):
    """What torchft's checkpoint transport sends a healing replica (torch's state-dict protocol:
    tensors and plain values by name, pickled): the model's and the inner optimizer's own state
    dicts (torch's types) and the peer's training step."""

    model: dict[str, torch.Tensor]
    inner: dict[str, object]
    train_step: int


@dataclass
class HealState:
    """What a healing replica receives from a live peer (torchft's checkpoint transport).

    The peer's training step comes along, so a restarted group rejoins the run's numbering.
    """

    training: Training
    step: int = 0
    healed_from_step: int | None = field(default=None)

    def state_dict(self) -> HealSnapshot:
        t = self.training
        return {"model": t.model.state_dict(), "inner": t.inner.state_dict(), "train_step": self.step}

    def load_state_dict(self, sd: HealSnapshot) -> None:
        self.training.model.load_state_dict(sd["model"])
        self.training.inner.load_state_dict(sd["inner"])
        self.healed_from_step = int(sd["train_step"])


def make_process_group(backend: str, timeout: timedelta, link: Link | None, numerics: Any = None, native: Any = None):
    """torchft's reconfigurable process group, wrapped in the emulated link when asked, and
    outermost (what the Manager sees) in the sketches of ``ftrun.worker.sketch`` (``numerics``:
    its ``NumericsProbe``, None with ``--no-sketches``; with ``--quantize`` torchft's quantized
    allreduce is wrapped too, ``ftrun.worker.sketch_quantized``). ``gloo-native``, ``nccl2``: torch's
    own reconfigurable Gloo or NCCL group met at ``native`` (``ftrun.worker.native_pg.NativeSite``)."""
    if backend in NATIVE_STORE_BACKENDS and native is not None:
        from ftrun.worker.native_pg import native_group

        pg = native_group(native, timeout, backend)
    elif backend == "nccl":
        pg = torchft.ProcessGroupNCCL(timeout=timeout)
    elif backend == "baby-nccl":
        pg = torchft.ProcessGroupBabyNCCL(timeout=timeout)
    elif (
        backend == "baby-gloo"
    ):  # collectives in a subprocess; torchft 0.2.x fails its commits, the nightly not (torchft-notes)
        from torchft.process_group import ProcessGroupBabyGloo

        pg = ProcessGroupBabyGloo(timeout=timeout)
    elif backend in RECONFIGURE_BACKENDS:  # refused by the parent's preflight; never silently Gloo
        why = backend_unavailable(backend, installed(), cuda=torch.cuda.is_available())
        raise RuntimeError(why or f"--backend {backend}: the spec names no bootstrap store (native_store)")
    else:
        pg = torchft.ProcessGroupGloo(timeout=timeout)
    if link:
        from ftrun.worker.link import LinkEmulator

        pg = LinkEmulator(pg, link)
    if numerics is not None:
        from ftrun.worker.sketch import SketchPG

        pg = SketchPG(pg, numerics)
        if numerics.path == "quantized":  # torchft's quantized allreduce bypasses pg.allreduce
            from ftrun.worker.sketch_quantized import install

            install(numerics)
    return pg


def make_manager(
    spec: layout.Spec,
    cfg: RunConfig,
    env: RankEnv,
    backend: str,
    heal: HealState,
    life: Lifecycle,
    numerics: Any = None,
) -> torchft.Manager:
    """``use_async_quorum=False`` (DiLoCo requires it); ``init_sync=False`` (seeded weights).
    ``life`` logs every process-group configure and checkpoint transfer (``ftrun.worker.lifecycle``);
    with ``--link`` a heal's transfer is held by the link's cost (``linkcost``: a ``recv``)."""
    from torchft.checkpointing import HTTPTransport

    from ftrun.worker.lifecycle import TimedTransport

    timeout = timedelta(seconds=cfg.timeouts.timeout_s)
    if spec.network is not None and spec.network.scope == "hosts":
        from ftrun.torchft_compat import advertise_as

        advertise_as(spec.hostname)  # torchft's own gethostname() uses: what the other hosts reach
    native = None
    if backend in NATIVE_STORE_BACKENDS and spec.native_store:
        from ftrun.worker.native_pg import NativeSite

        native = NativeSite(spec.native_store, env.replica, cfg.hosts.replicas, env.rank)
    pg = make_process_group(backend, timeout, spec.link, numerics, native)
    life.time_configure(pg)
    cost = None
    if (link := spec.link) is not None:
        cost = lambda nbytes: link.collective_s("recv", nbytes, 2)  # noqa: E731
    # the transport torchft's Manager builds by default, timed
    transport = TimedTransport(HTTPTransport(timeout=timeout, num_chunks=0), life, cost)
    return torchft.Manager(
        pg=pg,
        checkpoint_transport=transport,
        min_replica_size=cfg.hosts.min_replicas,
        load_state_dict=heal.load_state_dict,
        state_dict=heal.state_dict,
        replica_id=f"{spec.job_id}_replica{env.replica}",
        timeout=timeout,
        quorum_timeout=timedelta(seconds=spec.quorum_timeout_s),
        use_async_quorum=False,
        init_sync=False,
        hostname=spec.hostname,
    )


def start_line(run_dir: Path, spec: layout.Spec, worker: str, timeout_s: float = 300.0) -> None:
    """Wait until every rank of a local job has its Manager up, so the first quorum has everyone.

    Only when all groups share this run dir (``start_barrier`` = number of ranks).
    """
    n = spec.start_barrier
    if not n:
        return
    ready = run_dir / layout.READY
    ready.mkdir(exist_ok=True)
    (ready / worker).touch()
    deadline = time.monotonic() + timeout_s
    while len(list(ready.iterdir())) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"start line: only {len(list(ready.iterdir()))} of {n} ranks ready after {timeout_s}s")
        time.sleep(0.05)
