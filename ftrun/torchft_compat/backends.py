"""The process groups a torchft release offers (ftrun's ``--backend`` names) and why one cannot
run on the installed release and torch (torch-free)."""

from __future__ import annotations

from ftrun.torchft_compat.release import Release
from ftrun.torchft_compat.sources import package_source

TORCHFT_BACKENDS = ("gloo", "baby-gloo", "nccl", "baby-nccl")  # torchft's own groups, in every release
# the nightly's Manager also takes a native c10d group built with enable_reconfigure=True
# (``gloo-native``; torch with native reconfiguration) and torchcomms' group
# (``torchft.torchcomms.ProcessGroupTorchComms``, where torchcomms is installed)
RECONFIGURE_BACKENDS = ("gloo-native", "torchcomms")


def process_group_backends(rel: Release) -> tuple[str, ...]:
    """The ``--backend`` values the installed release offers (``ftrun sweep --preset pgs``)."""
    return TORCHFT_BACKENDS + (RECONFIGURE_BACKENDS if rel.pg_api == "reconfigure" else ())


def _torch_native_reconfigure() -> bool:
    """Whether the installed torch builds native groups with ``enable_reconfigure`` (read from
    its ``distributed_c10d.py``, not imported: torch-free)."""
    source = package_source("torch.distributed.distributed_c10d")
    return source is not None and "enable_reconfigure" in source


def backend_unavailable(backend: str, rel: Release) -> str | None:
    """Why ``--backend backend`` cannot run on this release and torch (one line), or None.
    Only the reconfigure-API groups are decided here; the rest is placement's (GPUs)."""
    if backend not in RECONFIGURE_BACKENDS:
        return None
    if rel.pg_api != "reconfigure":
        return (
            f"--backend {backend}: {rel.distribution or 'torchft'} {rel.version or ''} has no reconfigure API "
            "(its Manager takes torchft's own process groups only; torchft-nightly has it)"
        ).replace("  ", " ")
    if backend == "gloo-native" and not _torch_native_reconfigure():
        return (
            f"--backend gloo-native: torch {rel.torch} cannot reconfigure a native group "
            "(no enable_reconfigure in torch.distributed; torchft's shim says torch >= 2.14)"
        )
    if backend == "torchcomms":
        import importlib.util

        if importlib.util.find_spec("torchcomms") is None:
            return "--backend torchcomms: torchcomms is not installed (pip install torchcomms)"
    # torch and torchft offer it, but ftrun does not build it yet: a native group needs a
    # bootstrap store shared by every replica group (torchft's tests host one in the parent),
    # torchcomms a TorchComm per rank; neither is wired into ftrun's launcher
    return (
        f"--backend {backend}: offered by {rel.distribution} {rel.version} and torch {rel.torch}, "
        "but ftrun does not build it yet"
    )
