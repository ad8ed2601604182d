"""The private attributes of live torchft objects ftrun reads or wraps (the same in 0.2.0 and the
nightly), only through these functions: ``DiLoCo._fragments`` (the ``_StreamingDiLoCoFragment``
objects, whose ``prepare_sync`` / ``perform_sync`` / ``wait`` / ``original_parameters`` the worker
wraps and reads), ``Manager._quorum_future`` (set once a quorum was asked for),
``Manager._quorum_id``, ``Manager._participating_replica_world_size`` (what ``num_participants``
returns: ``participants``), ``Manager._client._quorum`` (the RPC that returns each quorum: the proxy
of ``after_each_quorum`` passes every argument through) and ``Manager._pg``; and the
``original_exception`` that torchft's ``ExceptionWithTraceback`` (``Manager.errored()``) wraps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


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


def manager_error(manager: Any) -> BaseException | None:
    """The error that made ``manager`` vote against this step's commit, None when it had none:
    ``Manager.errored()`` (public in 0.2.0 and the nightly; set by ``report_error`` — a failed
    collective, the process group's own ``errored()`` checked in ``should_commit`` — and cleared by
    the next ``start_quorum``), unwrapped from torchft's ``ExceptionWithTraceback`` (whose
    ``str`` carries the whole traceback) to the exception it holds, ``original_exception``."""
    err = manager.errored()
    if err is None:
        return None
    inner = getattr(err, "original_exception", None)
    return inner if isinstance(inner, BaseException) else err


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
