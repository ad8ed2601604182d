"""Everything ftrun relies on inside torchft: which release is installed, its profiler labels,
its process-group API and the private attributes of its live objects. A torchft upgrade
touches this file only, and nothing else in ftrun branches on torchft's version.
Torch-free (objects come in; torchft is imported only inside the functions that need it).

Releases (``installed()``, ``require_supported()``): two distributions install the same
import name ``torchft`` — ``torchft`` 0.2.x (PyPI) and ``torchft-nightly`` (checked:
2026.10.26). ftrun requires neither by name (either satisfies it); the command paths that
train check the installed one against ``SUPPORTED`` at start-up.

Process-group API (``pg_api``): 0.2.x configures a group with ``ProcessGroup.configure(store_addr,
replica_id, rank, world_size, ...)`` ("configure"); the nightly removed it for
``supports_reconfigure`` / ``set_rank_info`` / ``get_reconfigure_handle()`` /
``reconfigure(ReconfigureOptions)`` ("reconfigure"), exchanges the handles through the
lighthouse (the quorum RPC gains a ``reconfigure_handle`` argument, its result
``reconfigure_handles``) and refuses a group without ``supports_reconfigure``. ftrun's wrapper
(``ftrun.worker.link.LinkEmulator``) inherits torchft's ``ProcessGroupWrapper`` and so either
API; the quorum proxy (``after_each_quorum``) passes every argument through; ``connect()``
joins a group without a Manager on either API.

Labels, as versioned data (the one place that spells them): torchft emits these with
``torch.profiler.record_function``; ftrun's worker adds its own step annotation. Checked
against torchft 0.2.0 and torchft-nightly 2026.10.26 (``local_sgd.py`` byte-identical,
``manager.py``'s labels the same names) and torch 2.13. When a torchft release renames a
label, add a new ``LabelSet`` and keep the old one: traces written by older versions must
still be read.

Private attributes (the same in 0.2.0 and the nightly), read or wrapped only through the
functions at the end: ``DiLoCo._fragments`` (the ``_StreamingDiLoCoFragment`` objects, whose
``prepare_sync`` / ``perform_sync`` / ``wait`` / ``original_parameters`` the worker wraps and
reads), ``Manager._quorum_future`` (set once a quorum was asked for), ``Manager._quorum_id``,
``Manager._participating_replica_world_size`` (what ``num_participants`` returns: ``participants``),
``Manager._client._quorum`` (the RPC that returns each quorum), ``torchft._torchft.lighthouse_main``,
on the nightly ``ProcessGroup._handle_id()`` (``connect``), and the ``socket`` module torchft's
modules call ``socket.gethostname()`` on (``advertise_as``). And one module global replaced:
``torchft.manager.allreduce_quantized``, the quantized allreduce ``Manager.allreduce`` calls
(``wrap_quantized_allreduce``; ``quantized_site`` reads where both releases bind and call it).
"""

from __future__ import annotations

import json
import re
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ftrun.errors import BadInput
from ftrun.schedule import ReleaseBehaviour


@dataclass(frozen=True)
class LabelSet:
    torchft: str
    # Send: fragment.prepare_sync(), one manager.allreduce per parameter (or bucket) under it.
    prepare_sync: str
    allreduce: str
    allreduce_callback: str
    # Sync: fragment.perform_sync(): work.wait()s, wait, restore, should_commit, outer step.
    perform_sync: str
    wait: str
    restore_parameters: str
    save_parameters: str
    should_commit: str
    should_commit_prefix: str  # the recovery/current-stream synchronize children vary in spelling
    wait_quorum: str
    async_quorum: str
    pg_configure: str
    # The collective itself: c10d op on the calling thread, backend spans on comm threads.
    c10d_allreduce: tuple[str, ...]
    backend_allreduce: tuple[str, ...]
    nccl_kernel_prefixes: tuple[str, ...]
    # Quantized allreduce (torchft.collectives.allreduce_quantized, CUDA + triton): one
    # manager.allreduce = an alltoall (NCCL runs it as send/recv) then an allgather.
    c10d_quantized: tuple[str, ...] = ("c10d::alltoall_base_", "c10d::allgather_into_tensor_coalesced_")
    # Any NCCL kernel (both namings: ncclDevKernel_Op_... since NCCL 2.19, ncclKernel_Op_... before).
    nccl_kernel_any: tuple[str, ...] = ("ncclDevKernel_", "ncclKernel_")
    # CUDA runtime/driver calls read from host threads: kernel launches (name prefixes: kineto
    # writes e.g. cudaLaunchKernel, cudaLaunchKernelExC_v11060, cuLaunchKernelEx), stream waits.
    cuda_launch: tuple[str, ...] = ("cudaLaunchKernel", "cuLaunchKernel")
    # A CUDA graph replay: every kernel of the graph carries the replay call's correlation.
    cuda_graph_launch: tuple[str, ...] = ("cudaGraphLaunch", "cuGraphLaunch")
    # torch's host spans around an NCCL launch: c10d::<op>_ > record_param_comms > nccl:<op>.
    c10d_prefix: str = "c10d::"
    nccl_host_prefix: str = "nccl:"
    param_comms: str = "record_param_comms"
    # torchft's NCCL/Gloo group names: ``torchft_quorum_{quorum}_rank_{rank in the replica group}``
    # (0.2; only set for a nonzero group rank), ``torchft_{uuid}_rank_{rank}`` (nightly).
    torchft_pg_name: re.Pattern[str] = re.compile(r"^torchft_(?:quorum_\d+|[0-9A-Fa-f-]{8,})_rank_(?P<rank>\d+)$")
    cuda_stream_wait: tuple[str, ...] = ("cudaStreamWaitEvent",)
    cuda_sync: tuple[str, ...] = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
    # the heal: the source stages its state, the healer fetches it (torchft's quorum thread)
    send_checkpoint: str = "torchft::manager::_checkpoint_transport::send_checkpoint"
    recv_checkpoint: str = "torchft::manager::_checkpoint_transport::recv_checkpoint"
    # the quorum RPC to the lighthouse inside _async_quorum: ends when the lighthouse answered
    client_quorum: str = "torchft::manager::_client::_quorum"


TORCHFT_0_2 = LabelSet(
    torchft="0.2",
    prepare_sync="torchft::local_sgd::prepare_sync",
    allreduce="torchft::manager::allreduce",
    allreduce_callback="torchft::manager::allreduce::callback",
    perform_sync="torchft::local_sgd::perform_sync",
    wait="torchft::local_sgd::wait",
    restore_parameters="torchft::local_sgd::restore_parameters",
    save_parameters="torchft::local_sgd::save_parameters",
    should_commit="torchft::manager::should_commit",
    should_commit_prefix="torchft::manager::should_commit::",
    wait_quorum="torchft::manager::wait_quorum",
    async_quorum="torchft::manager::_async_quorum",
    pg_configure="torchft::manager::_pg::configure",
    c10d_allreduce=("c10d::allreduce_", "c10d::allreduce_coalesced_"),
    backend_allreduce=("gloo:all_reduce", "nccl:all_reduce", "gloo:allreduce", "ftrun::link::hold"),
    nccl_kernel_prefixes=("ncclDevKernel_AllReduce", "ncclKernel_AllReduce"),
)

LABELS = TORCHFT_0_2

# ftrun's own annotations (written by ftrun.worker).
PROFILER_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
# torch.optim's own span around every ``optimizer.step()`` (``Optimizer.step#SGD.step``): the inner
# steps and, inside ``perform_sync`` after ``should_commit``, the outer optimizer's step of a commit
OPTIMIZER_STEP_PREFIX = "Optimizer.step#"
FTRUN_STEP_PREFIX = "ftrun::step"
FTRUN_STEP_RE = re.compile(r"^ftrun::step#(\d+) manager_step=(\d+)$")
LINK_HOLD = "ftrun::link::hold"
# the numeric check waiting for a fragment's collectives right before torchft's ``perform_sync``
# (``ftrun.worker.sketch.NumericsProbe.sums_first``): the training thread blocked on the sync's
# data, outside torchft's span; ``ftrun.check.comm`` counts it as exposed
SKETCH_WAIT = "ftrun::sketch::wait"
# the emulated link holding a control RPC (see ftrun.linkcost): not data, never a collective
LINK_CONTROL_QUORUM = "ftrun::link::control::quorum"
# the emulated link holding a heal's checkpoint transfer (``ftrun.worker.lifecycle``): not a collective
LINK_HEAL = "ftrun::link::heal"


def ftrun_step_label(step: int, manager_step: int) -> str:
    """Name of the span that wraps training step ``step`` (manager step at the step's start)."""
    return f"{FTRUN_STEP_PREFIX}#{step} manager_step={manager_step}"


# --- which torchft is installed (torch-free: package metadata and source text) -------------

DISTRIBUTIONS = ("torchft", "torchft-nightly")
# distribution -> (lowest version, first version not supported; None = no upper bound).
# torchft 0.2.x: the release ftrun was built on. torchft-nightly: from the first nightly
# checked (2026.10.26, reconfigure API); later nightlies are accepted (the adapter picks the API
# by what the installed torchft has, not by its version) and earlier ones refused (not checked).
SUPPORTED: dict[str, tuple[tuple[int, ...], tuple[int, ...] | None]] = {
    "torchft": ((0, 2, 0), (0, 3)),
    "torchft-nightly": ((2026, 10, 26), None),
}
_SOURCE_LIMIT = 4 << 20  # bytes of torchft/process_group.py read to tell its API (80 kB today)


@dataclass(frozen=True)
class Release:
    """The installed torchft: ``distribution`` (``torchft`` | ``torchft-nightly``; None = none
    installed; several, space-separated, when more than one claims the files), its ``version``,
    its process-group API ``pg_api`` (``configure`` | ``reconfigure``; None = unknown) and torch's
    version (None = not installed)."""

    distribution: str | None
    version: str | None
    pg_api: str | None
    torch: str | None

    def describe(self) -> str:
        """``torchft-nightly 2026.10.26 (process groups: reconfigure), torch 2.13.0+cpu``."""
        ft = f"{self.distribution} {self.version}" if self.distribution else "torchft not installed"
        api = f" (process groups: {self.pg_api})" if self.pg_api else ""
        return f"{ft}{api}, torch {self.torch or 'not installed'}"

    def to_json(self) -> dict[str, str | None]:
        """What run dirs and reports record (manifest/meta ``versions``, sweep, compare)."""
        return {
            "torch": self.torch,
            "torchft": self.version,
            "torchft_distribution": self.distribution,
            "torchft_pg_api": self.pg_api,
        }


def _version_tuple(text: str) -> tuple[int, ...]:
    """``0.2.0`` -> (0, 2, 0); ``2026.10.26`` -> (2026, 10, 26); stops at the first non-number
    part (``0.2.1.dev3`` -> (0, 2, 1))."""
    out = []
    for part in text.split("."):
        m = re.match(r"\d+", part)
        if not m:
            break
        out.append(int(m[0]))
        if m.end() != len(part):
            break
    return tuple(out)


def pg_api_of_source(source: str) -> str | None:
    """The process-group API a ``torchft/process_group.py`` defines: ``reconfigure`` (the
    nightly's ``supports_reconfigure``/``reconfigure``), ``configure`` (0.2.x), else None."""
    if re.search(r"def supports_reconfigure\(", source) and re.search(r"def reconfigure\(", source):
        return "reconfigure"
    if re.search(r"def configure\(", source):
        return "configure"
    return None


def _pg_api_installed() -> str | None:
    """Read (not import: importing torchft imports torch) the installed process_group.py."""
    import importlib.util
    from pathlib import Path

    try:
        spec = importlib.util.find_spec("torchft")
    except (ImportError, ValueError):
        return None
    for loc in (spec.submodule_search_locations or []) if spec else []:
        path = Path(loc) / "process_group.py"
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                return pg_api_of_source(f.read(_SOURCE_LIMIT))
        except OSError:
            continue
    return None


def installed() -> Release:
    """The installed torchft and torch, from package metadata; torch-free."""
    from importlib import metadata

    found = []
    for dist in DISTRIBUTIONS:
        try:
            found.append((dist, metadata.version(dist)))
        except metadata.PackageNotFoundError:
            pass
    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = None
    if not found:
        return Release(None, None, None, torch)
    return Release(" ".join(d for d, _ in found), " ".join(v for _, v in found), _pg_api_installed(), torch)


def versions(torch_version: str | None = None) -> dict[str, str | None]:
    """What ran, as run dirs and reports record it (``versions``): python, ftrun, torch
    (``torch_version`` when the caller imported torch, else its metadata) and the torchft release
    (``Release.to_json``)."""
    import platform

    from ftrun import __version__

    found = installed().to_json()
    if torch_version is not None:
        found["torch"] = torch_version
    return {"python": platform.python_version(), "ftrun": __version__, **found}


def describe_versions(versions: dict[str, Any] | None) -> str | None:
    """``Release.describe()`` of a recorded ``versions`` dict; None when it names no torchft
    (a run dir of an earlier ftrun may have only ``torchft``: the distribution is then unknown)."""
    if not versions or not versions.get("torchft"):
        return None
    rel = Release(
        versions.get("torchft_distribution") or "torchft",
        versions["torchft"],
        versions.get("torchft_pg_api"),
        versions.get("torch"),
    )
    return rel.describe()


# --- the process groups a release offers (ftrun's --backend names) -------------------------

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
    import importlib.util
    from pathlib import Path

    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return False
    for loc in (spec.submodule_search_locations or []) if spec else []:
        try:
            with open(Path(loc) / "distributed" / "distributed_c10d.py", encoding="utf-8", errors="replace") as f:
                return "enable_reconfigure" in f.read(_SOURCE_LIMIT)
        except OSError:
            continue
    return False


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


def baby_pg_fails_commits(rel: Release) -> bool:
    """Whether this release's Baby process groups fail every commit: torchft 0.2.x's
    ``_ManagedWork`` callback late-binding bug (upstream PR #355), fixed in the nightly
    (torchft-notes "Known torchft 0.2.0 defects"). Reports use it to say why; tests, what to expect."""
    return rel.distribution == "torchft"


# What each release does after a failed ``should_commit`` (``ftrun.schedule.rounds``). Read in
# both releases' ``local_sgd.py`` (byte-identical: the fragment is ``current_step() % F`` at the
# send and at the sync; no retry logic) and ``manager.py`` (``start_quorum`` -> ``_async_quorum``:
# ``heal`` when the group's step is not the quorum's ``max_step``, then ``load_state_dict`` sets
# the step and, the quorum being synchronous, the state is applied before ``prepare_sync``;
# ``should_commit`` adds 1 to the step only on True). The heal is the same in both; they differ in
# the Baby process groups' commits (the ``_ManagedWork`` defect, ``baby_pg_fails_commits``).
TORCHFT_0_2_COMMITS = ReleaseBehaviour("torchft 0.2", heals_behind_groups=True, baby_pg_commits_fail=True)
TORCHFT_NIGHTLY_COMMITS = ReleaseBehaviour("torchft-nightly", heals_behind_groups=True, baby_pg_commits_fail=False)


def release_behaviour(distribution: str | None) -> ReleaseBehaviour:
    """The failed-commit behaviour of the release named ``distribution`` (a manifest's
    ``torchft_distribution``; None or unknown: 0.2's, whose heal the nightly shares)."""
    return TORCHFT_NIGHTLY_COMMITS if distribution == "torchft-nightly" else TORCHFT_0_2_COMMITS


def unsupported(rel: Release) -> str | None:
    """Why ftrun cannot run on ``rel`` (one line), or None when it is supported."""
    hint = (
        "install torchft 0.2.x (pip install 'torchft>=0.2.0,<0.3') "
        "or torchft-nightly (FTRUN_TORCHFT=nightly bash scripts/setup.sh)"
    )
    if rel.distribution is None:
        return f"torchft is not installed: {hint}"
    if " " in rel.distribution:
        return (
            f"torchft: both {rel.distribution.replace(' ', ' and ')} are installed ({rel.version}) and share the "
            "same files; uninstall both and install one of them (pip install --force-reinstall DIST)"
        )
    low, high = SUPPORTED[rel.distribution]
    v = _version_tuple(rel.version or "")
    supported = "0.2.x" if rel.distribution == "torchft" else f">= {'.'.join(map(str, low))}"
    if not v or v < low or (high is not None and v >= high):
        return (
            f"{rel.distribution} {rel.version} is not supported (ftrun supports {rel.distribution} {supported}); {hint}"
        )
    if rel.pg_api is None:
        import importlib.util

        if importlib.util.find_spec("torchft") is None:
            return (
                f"{rel.distribution} {rel.version} is installed but has no torchft package files (removed, e.g. by "
                f"uninstalling the other distribution); reinstall it: pip install --force-reinstall {rel.distribution}"
            )
        return f"{rel.distribution} {rel.version}: its process groups have neither configure nor reconfigure; {hint}"
    return None


def require_supported() -> Release:
    """The installed release, or ``BadInput`` (one line, exit 2) naming it when unsupported."""
    rel = installed()
    why = unsupported(rel)
    if why:
        raise BadInput(why)
    return rel


# --- process groups: either API ---------------------------------------------------------


def pg_api(pg: Any) -> str:
    """``reconfigure`` or ``configure``: what a live torchft process group offers."""
    return "reconfigure" if getattr(pg, "supports_reconfigure", False) else "configure"


def connect(pg: Any, store_addr: str, rank: int, world_size: int, timeout: timedelta = timedelta(seconds=60)) -> None:
    """Make ``pg`` rank ``rank`` of a group of ``world_size`` that meets on the TCPStore at
    ``store_addr`` (``host:port/prefix``, one prefix per group), without a Manager.

    "configure": ``pg.configure(store_addr, "0", rank, world_size)``. "reconfigure": the
    exchange of torchft's ``reconfigure_with_store``, except that each handle names the given
    store: torchft's own ``get_reconfigure_handle()`` starts a store on this host's name (every
    interface), and ftrun's tests bind loopback only."""
    if pg_api(pg) == "configure":
        pg.configure(store_addr, "0", rank, world_size)
        return
    from torchft.process_group import ReconfigureOptions, create_store_client

    host_port = store_addr.partition("/")[0]
    store = create_store_client(store_addr, timeout)
    store.set(f"handle/{rank}", json.dumps({"id": pg._handle_id(), "store": host_port, "global_rank": rank}))
    if rank == 0:
        import secrets  # (here: hashlib and random stay out of the torch-free commands' imports)

        store.set("uuid", str(secrets.randbits(63)))
    keys = ["uuid", *(f"handle/{r}" for r in range(world_size))]
    store.wait(keys, timeout)
    uuid, *handles = store.multi_get(keys)
    opts = ReconfigureOptions()
    opts.uuid = int(uuid)
    opts.handles = [h.decode("utf-8") for h in handles]
    opts.timeout = timeout
    pg.reconfigure(opts).wait()


# --- private attributes of live torchft objects ----------------------------------------------


def diloco_fragments(diloco: Any) -> list[Any]:
    """The fragments of a ``torchft.local_sgd.DiLoCo``, in fragment-id order."""
    return list(diloco._fragments)


# A fragment's tensors and merge weight (0.2.0 and the nightly: ``original_parameters`` is a dict
# filled in ``named_parameters`` order, ``_model_fragment`` the module, ``_fragment_update_alpha``
# the lerp weight of ``_merge_parameters``; a release without the attribute has no merge: None).
def fragment_originals(frag: Any) -> list[Any]:
    """The fragment's saved global parameters (torchft's ``original_parameters``), in parameter order."""
    return list(frag.original_parameters.values())


def fragment_params(frag: Any) -> list[Any]:
    """The fragment's current parameters (local tensors), in parameter order."""
    return [p.to_local() if hasattr(p, "to_local") else p.data for p in frag._model_fragment.parameters()]


def fragment_alpha(frag: Any) -> float | None:
    alpha = getattr(frag, "_fragment_update_alpha", None)
    return None if alpha is None else float(alpha)


def set_fragment_alpha(frag: Any, alpha: float) -> None:
    frag._fragment_update_alpha = alpha


@dataclass(frozen=True)
class DiLoCoParts:
    """What a script handed torchft's ``DiLoCo``, read back from the object (``ftrun launch``'s
    hook attaches to a script's own DiLoCo): its Manager (``_manager``), inner optimizer
    (``_local_optimizer``), each fragment's outer optimizer (``_outer_optimizer``: one object
    when the script passed one for all), ``fragment_sync_delay`` (``_fragment_sync_delay``) and
    the fragments' public ``should_quantize`` / ``use_bucketization`` (the latter also set by
    torchft's ``TORCHFT_USE_BUCKETIZATION``). The same attributes in 0.2.0 and the nightly."""

    manager: Any
    inner: Any
    outer: list[Any]
    fragment_sync_delay: int
    quantize: bool
    bucketize: bool


def diloco_parts(diloco: Any) -> DiLoCoParts:
    frags = diloco_fragments(diloco)
    return DiLoCoParts(
        diloco._manager,
        diloco._local_optimizer,
        [f._outer_optimizer for f in frags],
        int(diloco._fragment_sync_delay),
        any(bool(getattr(f, "should_quantize", False)) for f in frags),
        any(bool(getattr(f, "use_bucketization", False)) for f in frags),
    )


def with_manager_pg(args: tuple, kwargs: dict, wrap: Callable[[Any], Any]) -> tuple[tuple, dict]:
    """The arguments of a ``Manager(...)`` call with its process group replaced by ``wrap(pg)``:
    ``pg`` is the first parameter after ``self`` in 0.2.x and the nightly, given by position or name."""
    if "pg" in kwargs:
        return args, {**kwargs, "pg": wrap(kwargs["pg"])}
    if args:
        return (wrap(args[0]), *args[1:]), kwargs
    return args, kwargs  # no group given: torchft raises its own error


# the logger of torchft's ``local_sgd.py`` (its ``Preparing/Syncing fragment=N`` lines, INFO)
LOCAL_SGD_LOGGER = "torchft.local_sgd"


def has_quorum(manager: Any) -> bool:
    """Whether ``manager`` has asked for a quorum yet (before that, ``num_participants`` raises)."""
    return manager._quorum_future is not None


def participants(manager: Any) -> int | None:
    """``manager.num_participants()`` of the current quorum, None before the first. Once the
    quorum's future is done its count is read directly: ``num_participants`` goes through
    ``wait_quorum``, which torchft wraps in ``record_function`` (a profiler op on every call even
    with no profiler running: ~0.04 ms, a call per step in the worker's event log). Otherwise, or
    when the quorum failed, torchft's own call (which waits, or raises its error)."""
    fut = manager._quorum_future
    if fut is None:
        return None
    n = getattr(manager, "_participating_replica_world_size", None)
    if fut.done() and fut.exception() is None and isinstance(n, int) and n >= 0:
        return n
    return manager.num_participants()


def quorum_id(manager: Any) -> int | None:
    """The id of ``manager``'s current quorum (None before the first)."""
    return getattr(manager, "_quorum_id", None)


class _QuorumClient:
    """A transparent proxy for torchft's ``ManagerClient``: ``after(result)`` runs after each quorum
    RPC. Every argument passes through as given (the nightly adds ``reconfigure_handle``)."""

    def __init__(self, client: Any, after: Callable[[Any], None]) -> None:
        self._client = client
        self._after = after

    def _quorum(self, *args: Any, **kwargs: Any) -> Any:
        result = self._client._quorum(*args, **kwargs)
        self._after(result)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def after_each_quorum(manager: Any, after: Callable[[Any], None]) -> None:
    """Call ``after(quorum_result)`` after every quorum RPC of ``manager`` (on torchft's quorum
    thread). ``quorum_result``: torchft's ``QuorumResult`` (``quorum_id``, ``replica_ids``,
    ``replica_rank``, ``max_step``, ``heal``, ``recover_src_replica_rank``)."""
    manager._client = _QuorumClient(manager._client, after)


def manager_process_group(manager: Any) -> Any:
    """The process group ``manager`` runs its collectives on (torchft keeps it as ``_pg``, 0.2.x
    and the nightly): ftrun's wrapper stack, outermost first."""
    return getattr(manager, "_pg", None)


def configure_method(pg: Any) -> str:
    """The name of the call torchft's Manager makes on ``pg`` at every quorum change:
    ``configure`` (0.2.x) or ``reconfigure`` (the nightly, whose groups ``supports_reconfigure``)."""
    return "reconfigure" if hasattr(pg, "supports_reconfigure") and hasattr(pg, "reconfigure") else "configure"


def configure_quorum_id(args: tuple, kwargs: dict) -> int | None:
    """The quorum id of a ``ProcessGroup.configure`` call as torchft 0.2.0 makes it:
    ``configure(store_addr, replica_id, rank, world_size, quorum_id, group_rank, ...)``."""
    q = kwargs.get("quorum_id", args[4] if len(args) > 4 else None)
    return q if isinstance(q, int) else None


class _AdvertisingSocket(types.ModuleType):
    """The ``socket`` module, except that ``gethostname()`` returns the host given."""

    def __init__(self, host: str) -> None:
        super().__init__("socket")
        self._host = host

    def gethostname(self) -> str:
        return self._host

    def __getattr__(self, name: str) -> Any:
        import socket

        return getattr(socket, name)


def advertise_as(host: str) -> list[str]:
    """Make torchft hand ``host`` to the other replica groups wherever it would hand them
    ``socket.gethostname()``: 0.2.0 and nightly's checkpoint server (``HTTPTransport.address``,
    the healing source), nightly's process-group rendezvous store (``get_reconfigure_handle``),
    its parameter server. A host name is often unknown to the other hosts or resolves to loopback
    (a stock ``/etc/hosts``). Only torchft's own modules see the change, not this process's
    ``socket``. The Manager's advertised name is its ``hostname`` argument (passed explicitly).
    Returns the modules changed."""
    import socket

    import torchft  # noqa: F401  (loads its modules)
    import torchft.checkpointing.http_transport  # noqa: F401
    import torchft.process_group  # noqa: F401

    proxy = _AdvertisingSocket(host)
    changed = []
    for name, mod in list(sys.modules.items()):
        if (name == "torchft" or name.startswith("torchft.")) and getattr(mod, "socket", None) is socket:
            setattr(mod, "socket", proxy)  # noqa: B010 (a module's attribute mypy cannot know)
            changed.append(name)
    return changed


def lighthouse_main() -> int:
    """torchft's lighthouse entry point (the ``torchft_lighthouse`` binary); parses ``sys.argv``."""
    return native_module().lighthouse_main()


NATIVE = "torchft._torchft"  # torchft's Rust extension: the lighthouse, the Manager's server and clients
_native: list[types.ModuleType] = []


def native_module() -> types.ModuleType:
    """torchft's native extension, loaded from its file without running ``torchft/__init__.py``:
    that imports torch and the Manager (measured: ~4 s of CPU on this project's 2-core machines,
    per lighthouse start), and the extension links no part of torch (``ldd``: libc, libgcc, libm).
    The same module either way; where its file is not found (another layout), the plain import."""
    import importlib
    import importlib.machinery
    import importlib.util
    from pathlib import Path

    if NATIVE in sys.modules:  # torchft imported already: its own
        return sys.modules[NATIVE]
    if _native:  # (a pyo3 extension is initialised once per process)
        return _native[0]
    for loc in _torchft_dirs():
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = Path(loc) / f"_torchft{suffix}"
            if path.is_file():
                loader = importlib.machinery.ExtensionFileLoader(NATIVE, str(path))
                mod = importlib.util.module_from_spec(importlib.machinery.ModuleSpec(NATIVE, loader, origin=str(path)))
                loader.exec_module(mod)
                _native.append(mod)  # not in sys.modules: a later ``import torchft`` loads its package as usual
                return mod
    return importlib.import_module(NATIVE)


# --- the quantized allreduce (--quantize) ----------------------------------------------------
#
# torchft 0.2.0 and torchft-nightly 2026.10.26 alike: ``torchft/manager.py`` imports it in a
# ``try`` (``import triton`` then ``from torchft.collectives import allreduce_quantized``; on
# ImportError ``IS_TRITON_AVAILABLE = False`` and the name is never bound), and
# ``Manager.allreduce`` calls the module global ``allreduce_quantized([tensor], pg_reduce_op,
# self._pg, torch.accelerator.current_stream())`` when ``should_quantize and IS_TRITON_AVAILABLE``.
# The function quantizes ``tensors`` and, once the Work it returns completes, a done-callback it
# registered on that Work's future dequantizes the reduced result into ``tensors`` in place (on
# ``sync_stream``); the Manager then chains its divide by the participants on the same future.
QUANTIZED_MODULE = "torchft.manager"  # where the name the Manager calls is bound
QUANTIZED_NAME = "allreduce_quantized"
QUANTIZED_SOURCE = "torchft.collectives"  # where torchft defines it
QUANTIZED_PARAMS = ("tensors", "opts", "process_group", "sync_stream")


@dataclass(frozen=True)
class QuantizedSite:
    """What the installed torchft's source says about its quantized allreduce (torch-free: read,
    not imported; importing torchft.collectives needs triton). ``why``: why ftrun cannot sketch it
    (None: the call and the signature are the expected ones)."""

    called: bool  # Manager.allreduce calls the module global QUANTIZED_NAME with 4 positional args
    imported_from: str | None  # the module manager.py imports QUANTIZED_NAME from
    params: tuple[str, ...] | None  # its parameters in QUANTIZED_SOURCE
    why: str | None


def _torchft_dirs() -> list[str]:
    """Where the installed ``torchft`` package's files are, found without importing it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("torchft")
    except (ImportError, ValueError):
        return []
    return list(spec.submodule_search_locations or []) if spec else []


def _torchft_source(module: str) -> str | None:
    from pathlib import Path

    rel = Path(*module.split(".")[1:]).with_suffix(".py")
    for loc in _torchft_dirs():
        try:
            with open(Path(loc) / rel, encoding="utf-8", errors="replace") as f:
                return f.read(_SOURCE_LIMIT)
        except OSError:
            continue
    return None


def quantized_site_of_source(manager_src: str | None, collectives_src: str | None) -> QuantizedSite:
    """``QuantizedSite`` of a ``torchft/manager.py`` and ``torchft/collectives.py`` (their text)."""
    import ast

    def parse(src: str | None) -> ast.Module | None:
        try:
            return ast.parse(src) if src is not None else None
        except SyntaxError:
            return None

    man, col = parse(manager_src), parse(collectives_src)
    imported_from, called, params = None, False, None
    for node in ast.walk(man) if man else ():
        if isinstance(node, ast.ImportFrom) and any(a.name == QUANTIZED_NAME and a.asname is None for a in node.names):
            imported_from = node.module
        if isinstance(node, ast.ClassDef) and node.name == "Manager":
            for fn in node.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == "allreduce":
                    called = called or any(
                        isinstance(c, ast.Call)
                        and isinstance(c.func, ast.Name)
                        and c.func.id == QUANTIZED_NAME
                        and len(c.args) == len(QUANTIZED_PARAMS)
                        and not c.keywords
                        for c in ast.walk(fn)
                    )
    for node in col.body if col else ():
        if isinstance(node, ast.FunctionDef) and node.name == QUANTIZED_NAME:
            params = tuple(a.arg for a in node.args.posonlyargs + node.args.args)
    why = None
    if manager_src is None:
        why = "torchft/manager.py not found"
    elif not called:
        why = f"torchft's Manager.allreduce makes no call {QUANTIZED_NAME}(tensors, opts, process_group, sync_stream)"
    elif imported_from != QUANTIZED_SOURCE:
        why = f"torchft/manager.py does not import {QUANTIZED_NAME} from {QUANTIZED_SOURCE}"
    elif params is None:
        why = f"{QUANTIZED_SOURCE} defines no {QUANTIZED_NAME}"
    elif params[: len(QUANTIZED_PARAMS)] != QUANTIZED_PARAMS:
        why = f"{QUANTIZED_SOURCE}.{QUANTIZED_NAME} takes ({', '.join(params)}), not ({', '.join(QUANTIZED_PARAMS)})"
    return QuantizedSite(called, imported_from, params, why)


def quantized_site() -> QuantizedSite:
    """``QuantizedSite`` of the installed torchft."""
    return quantized_site_of_source(_torchft_source(QUANTIZED_MODULE), _torchft_source(QUANTIZED_SOURCE))


@dataclass(frozen=True)
class QuantizedWrap:
    """What ``wrap_quantized_allreduce`` did: ``taken``: whether torchft takes its quantized path in
    this process (triton imported in torchft.manager); ``wrapped``: whether ``Manager.allreduce`` now
    calls the wrapper; ``why``: why not (one line), None when wrapped."""

    taken: bool
    wrapped: bool
    why: str | None


def wrap_quantized_allreduce(wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> QuantizedWrap:
    """Make ``Manager.allreduce`` call ``wrap(torchft's allreduce_quantized)`` instead of it, in
    this process (idempotent), unless the quantized path is off here (triton did not import in
    torchft.manager: torchft then runs the plain allreduce) or the installed torchft does not call
    or define it as expected."""
    import inspect

    import torchft.manager as m

    if not getattr(m, "IS_TRITON_AVAILABLE", False) or not hasattr(m, QUANTIZED_NAME):
        return QuantizedWrap(
            False,
            False,
            f"torchft's quantized path is off here ({QUANTIZED_MODULE}.IS_TRITON_AVAILABLE is false: triton did "
            "not import), torchft runs the plain allreduce",
        )
    site = quantized_site()
    if site.why:
        return QuantizedWrap(True, False, f"quantized allreduce not sketched: {site.why}")
    fn = getattr(m, QUANTIZED_NAME)
    if getattr(fn, "_ftrun_wrapped", False):
        return QuantizedWrap(True, True, None)
    try:
        params = tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = ()
    if params[: len(QUANTIZED_PARAMS)] != QUANTIZED_PARAMS:
        return QuantizedWrap(
            True,
            False,
            f"quantized allreduce not sketched: {QUANTIZED_MODULE}.{QUANTIZED_NAME} takes ({', '.join(params)}), "
            f"not ({', '.join(QUANTIZED_PARAMS)})",
        )
    wrapped = wrap(fn)
    wrapped._ftrun_wrapped = True  # type: ignore[attr-defined]
    setattr(m, QUANTIZED_NAME, wrapped)
    return QuantizedWrap(True, True, None)
