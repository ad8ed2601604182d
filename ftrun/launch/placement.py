"""Which GPU each rank of each replica group runs on. ``place`` is pure; ``host_devices`` asks the host.

Rules (R groups here, G ranks per group, D visible devices):

* D = 0 or a non-NCCL backend: nothing to place (Gloo on CPU).
* D >= R*G: every group gets its own G devices through ``CUDA_VISIBLE_DEVICES`` (torchft's
  example: group r sees only its GPUs), so no two groups time-share a GPU and kernel times
  measure the link, not turn-taking.
* G <= D < R*G: groups share devices. Group r sees G distinct devices, rotated so the groups
  spread over all D (``CUDA_VISIBLE_DEVICES``), and gets its own ``NCCL_HOSTID``, so NCCL
  accepts ranks of different groups on one device (torchft's example does the same).
* G > D: two ranks of one group would share a device, which NCCL refuses: ``BadInput``.

Inside a group, local rank g uses ``cuda:g`` of what the group sees (``worker/setup.py``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ftrun.errors import BadInput

NCCL_BACKENDS = ("auto", "nccl", "baby-nccl", "nccl2")


@dataclass(frozen=True)
class Placement:
    """``env``: per group, the variables to set; ``devices``: per (group, local rank), the host device id."""

    mode: str  # "cpu" | "own" | "shared"
    env: dict[int, dict[str, str]] = field(default_factory=dict)
    devices: dict[tuple[int, int], str] = field(default_factory=dict)


def place(device_ids: Sequence[str], groups: Sequence[int], nproc: int) -> Placement:
    """Place ``nproc`` ranks of each group in ``groups`` on ``device_ids`` (module rules)."""
    d, r = len(device_ids), len(groups)
    if d == 0:
        return Placement("cpu")
    if nproc > d:
        raise BadInput(
            f"--nproc-per-replica {nproc}: needs {nproc} GPUs per replica group (NCCL refuses two ranks "
            f"of one group on one device); this host has {d} visible"
        )
    mode = "own" if d >= r * nproc else "shared"
    env: dict[int, dict[str, str]] = {}
    devices: dict[tuple[int, int], str] = {}
    for i, g in enumerate(groups):
        mine = [device_ids[(i * nproc + k) % d] for k in range(nproc)]
        env[g] = {"CUDA_VISIBLE_DEVICES": ",".join(mine)}
        if mode == "shared":
            env[g]["NCCL_HOSTID"] = f"ftrun_replica{g}"
        for k, dev in enumerate(mine):
            devices[(g, k)] = dev
    return Placement(mode, env, devices)


def host_devices(environ: Mapping[str, str] | None = None) -> list[str]:
    """GPU ids this process may use: ``CUDA_VISIBLE_DEVICES`` when set, else ``nvidia-smi -L``.

    Torch-free (the parent never imports torch). No ``nvidia-smi`` or an error: no GPUs.
    """
    env = os.environ if environ is None else environ
    vis = env.get("CUDA_VISIBLE_DEVICES")
    if vis is not None:
        return [x.strip() for x in vis.split(",") if x.strip() and x.strip() != "-1"]
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(x for x in out.splitlines() if x.startswith("GPU "))]


def plan(backend: str, groups: Sequence[int], nproc: int, environ: Mapping[str, str] | None = None) -> Placement:
    """The placement for this launch (``BadInput`` when it cannot work). Gloo: always CPU."""
    if backend not in NCCL_BACKENDS:
        return Placement("cpu")
    devs = host_devices(environ)
    if not devs and backend != "auto":
        raise BadInput(f"--backend {backend}: no GPU visible on this host (CUDA_VISIBLE_DEVICES / nvidia-smi)")
    return place(devs, groups, nproc)


def check_quantize(quantize: bool, backend: str, placement: Placement, has_triton: bool | None = None) -> None:
    """``--quantize`` runs torchft's fp8 alltoall+allgather allreduce, which needs CUDA (NCCL) and
    triton; without them torchft silently falls back to a plain allreduce. ``BadInput`` then."""
    if not quantize:
        return
    if backend not in NCCL_BACKENDS or placement.mode == "cpu":
        raise BadInput(
            f"--quantize: needs CUDA and NCCL (torchft's quantized allreduce); this run is on CPU with {backend}"
        )
    if has_triton is None:
        import importlib.util

        has_triton = importlib.util.find_spec("triton") is not None
    if not has_triton:
        raise BadInput(
            "--quantize: needs triton (torchft's quantized allreduce); it is not installed in this environment"
        )


def threads_per_rank(ranks: int) -> int:
    """CPU threads each of ``ranks`` concurrent ranks gets: the cores this process may run on
    (its affinity: what Slurm or taskset gave it, else the host's) shared out, at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, cores // max(ranks, 1))
