"""The process groups a torchft release offers (ftrun's ``--backend`` names) and why one cannot
run on the installed release and torch (torch-free).

The availability table is one pure function, ``availability(backend, facts)``, of what decides it
(``BackendFacts``: the torchft release, whether torch reconfigures native groups or has
``ProcessGroupNCCL2``, and the torchcomms package); ``installed_facts`` reads those facts from the
installed packages without importing them. GPUs are not decided here (placement's).
"""

from __future__ import annotations

from dataclasses import dataclass

from ftrun.torchft_compat.release import Release
from ftrun.torchft_compat.sources import package_dirs, package_source

TORCHFT_BACKENDS = ("gloo", "baby-gloo", "nccl", "baby-nccl")  # torchft's own groups, in every release
# the nightly's Manager also takes a native c10d group built with enable_reconfigure=True
# (``gloo-native``; torch with native reconfiguration) and torchcomms' group
# (``torchft.torchcomms.ProcessGroupTorchComms``, where torchcomms is installed)
RECONFIGURE_BACKENDS = ("gloo-native", "torchcomms")
# a row of the table only: torch >= 2.14's native reconfigurable NCCL group (``nccl2``), which the
# nightly's Manager accepts too; not a ``--backend`` (CUDA only, never run by ftrun's tests)
TABLE_BACKENDS = (*TORCHFT_BACKENDS, *RECONFIGURE_BACKENDS, "nccl2")

# the torchcomms package: not installed, the registry's placeholder (its __init__ raises
# ImportError: torchcomms 0.0.1), or a build
TORCHCOMMS_STATES = ("missing", "placeholder", "installed")


@dataclass(frozen=True)
class BackendFacts:
    """What the availability of a process group depends on."""

    release: Release
    native_reconfigure: bool  # torch builds native groups with ``enable_reconfigure`` (torch >= 2.14)
    nccl2: bool  # torch has ``ProcessGroupNCCL2`` (torch >= 2.14 built with NCCL)
    torchcomms: str  # one of TORCHCOMMS_STATES
    torchcomms_version: str | None = None


def process_group_backends(rel: Release) -> tuple[str, ...]:
    """The ``--backend`` values the installed release offers (``ftrun sweep --preset pgs``)."""
    return TORCHFT_BACKENDS + (RECONFIGURE_BACKENDS if rel.pg_api == "reconfigure" else ())


def availability(backend: str, facts: BackendFacts) -> str | None:
    """Why process group ``backend`` (one of ``TABLE_BACKENDS``) cannot run with ``facts`` (one
    line), or None when it can (torchft's own four: always; their GPUs are placement's)."""
    rel = facts.release
    if backend not in RECONFIGURE_BACKENDS and backend != "nccl2":
        return None
    if rel.pg_api != "reconfigure":
        name = "nccl2" if backend == "nccl2" else f"--backend {backend}"  # nccl2: a row, not a --backend
        return (
            f"{name}: {rel.distribution or 'torchft'} {rel.version or ''} has no reconfigure API "
            "(its Manager takes torchft's own process groups only; torchft-nightly has it)"
        ).replace("  ", " ")
    if backend == "gloo-native":
        if not facts.native_reconfigure:
            return (
                f"--backend gloo-native: torch {rel.torch} cannot reconfigure a native group "
                "(no enable_reconfigure in torch.distributed; torchft's shim says torch >= 2.14)"
            )
        return None
    if backend == "nccl2":
        if not facts.nccl2:
            return f"nccl2: torch {rel.torch} has no ProcessGroupNCCL2 (torch >= 2.14 built with NCCL)"
        return "nccl2: a native NCCL group (CUDA GPUs); ftrun does not build it (not a --backend)"
    if facts.torchcomms == "missing":
        return (
            "--backend torchcomms: torchcomms is not installed (the registry's torchcomms 0.0.1 is a placeholder "
            "whose import raises ImportError; torchcomms comes from its own builds)"
        )
    if facts.torchcomms == "placeholder":
        return (
            f"--backend torchcomms: the installed torchcomms {facts.torchcomms_version or ''} is the registry's "
            "placeholder (its import raises ImportError); install a torchcomms build"
        ).replace("  ", " ")
    # a torchcomms build: torchft wraps a TorchComm per rank, which ftrun's launcher does not make
    return (
        f"--backend torchcomms: offered by {rel.distribution} {rel.version} and torch {rel.torch}, "
        "but ftrun does not build it yet"
    )


def _torch_native_reconfigure() -> bool:
    """Whether the installed torch builds native groups with ``enable_reconfigure`` (read from
    its ``distributed_c10d.py``, not imported: torch-free)."""
    source = package_source("torch.distributed.distributed_c10d")
    return source is not None and "enable_reconfigure" in source


def _torch_nccl2() -> bool:
    """Whether the installed torch's ``distributed_c10d.py`` names ``ProcessGroupNCCL2`` (torch-free)."""
    source = package_source("torch.distributed.distributed_c10d")
    return source is not None and "ProcessGroupNCCL2" in source


def torchcomms_state_of_source(init_source: str | None) -> str:
    """``missing`` (no package), ``placeholder`` (its ``__init__.py`` raises ImportError: the
    registry's torchcomms 0.0.1) or ``installed``."""
    if init_source is None:
        return "missing"
    first = [ln.strip() for ln in init_source.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    return "placeholder" if first and first[0].startswith("raise ImportError") else "installed"


def _torchcomms_state() -> tuple[str, str | None]:
    from importlib import metadata

    if not package_dirs("torchcomms"):
        return "missing", None
    try:
        version: str | None = metadata.version("torchcomms")
    except metadata.PackageNotFoundError:
        version = None
    return torchcomms_state_of_source(package_source("torchcomms.__init__") or ""), version


def installed_facts(rel: Release) -> BackendFacts:
    """``BackendFacts`` of ``rel`` and the installed torch and torchcomms (read, not imported)."""
    state, version = _torchcomms_state()
    return BackendFacts(rel, _torch_native_reconfigure(), _torch_nccl2(), state, version)


def backend_unavailable(backend: str, rel: Release) -> str | None:
    """Why ``--backend backend`` cannot run on this release and the installed torch (one line),
    or None (``availability`` of the installed facts)."""
    if backend not in RECONFIGURE_BACKENDS:
        return None
    return availability(backend, installed_facts(rel))
