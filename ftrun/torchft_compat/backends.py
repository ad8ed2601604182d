"""The process groups a torchft release offers (ftrun's ``--backend`` names) and why one cannot
run on the installed release and torch (torch-free).

The availability table is one pure function, ``availability(backend, facts)``, of what decides it
(``BackendFacts``: the torchft release, whether torch reconfigures native groups or has
``ProcessGroupNCCL2``, the torchcomms package, and whether CUDA GPUs are visible); ``installed_facts``
reads the packages' facts without importing them, the caller says whether there are GPUs (the
launcher asks the host, a rank asks torch). torchft's own NCCL groups' GPUs are placement's.
"""

from __future__ import annotations

from dataclasses import dataclass

from ftrun.torchft_compat.release import Release
from ftrun.torchft_compat.sources import package_dirs, package_source

TORCHFT_BACKENDS = ("gloo", "baby-gloo", "nccl", "baby-nccl")  # torchft's own groups, in every release
# the nightly's Manager also takes a native c10d group built with enable_reconfigure=True
# (``gloo-native``: torch with native reconfiguration; ``nccl2``: torch >= 2.14's
# ``ProcessGroupNCCL2``, on CUDA GPUs) and torchcomms' group (``torchft.torchcomms.ProcessGroupTorchComms``,
# where a torchcomms build is installed; ftrun does not build it yet)
RECONFIGURE_BACKENDS = ("gloo-native", "nccl2", "torchcomms")
TABLE_BACKENDS = (*TORCHFT_BACKENDS, *RECONFIGURE_BACKENDS)

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
    cuda: bool = False  # CUDA GPUs visible (nccl2 runs on them)


def process_group_backends(rel: Release) -> tuple[str, ...]:
    """The ``--backend`` values the installed release offers (``ftrun sweep --preset pgs``)."""
    return TORCHFT_BACKENDS + (RECONFIGURE_BACKENDS if rel.pg_api == "reconfigure" else ())


def availability(backend: str, facts: BackendFacts) -> str | None:
    """Why process group ``backend`` (one of ``TABLE_BACKENDS``) cannot run with ``facts`` (one
    line naming what is missing), or None when it can (torchft's own four: always; their GPUs
    are placement's)."""
    rel = facts.release
    if backend not in RECONFIGURE_BACKENDS:
        return None
    if rel.pg_api != "reconfigure":
        return (
            f"--backend {backend}: {rel.distribution or 'torchft'} {rel.version or ''} has no reconfigure API "
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
            return f"--backend nccl2: torch {rel.torch} has no ProcessGroupNCCL2 (torch >= 2.14 built with NCCL)"
        if not facts.cuda:
            return "--backend nccl2: no CUDA GPU visible on this host (torch's native NCCL group runs on GPUs)"
        return None
    return _torchcomms(facts)


def _torchcomms(facts: BackendFacts) -> str:
    """torchcomms' row on a release with the reconfigure API: what is missing, whatever the GPUs."""
    rel = facts.release
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


def installed_facts(rel: Release, cuda: bool = False) -> BackendFacts:
    """``BackendFacts`` of ``rel`` and the installed torch and torchcomms (read, not imported);
    ``cuda``: whether the caller sees CUDA GPUs."""
    state, version = _torchcomms_state()
    return BackendFacts(rel, _torch_native_reconfigure(), _torch_nccl2(), state, version, cuda)


def backend_unavailable(backend: str, rel: Release, cuda: bool = False) -> str | None:
    """Why ``--backend backend`` cannot run on this release, the installed torch and, for
    ``nccl2``, ``cuda`` (whether the caller sees CUDA GPUs) (one line), or None (``availability``
    of the installed facts)."""
    if backend not in RECONFIGURE_BACKENDS:
        return None
    return availability(backend, installed_facts(rel, cuda))
