"""torchft's quantized allreduce (``--quantize``): where it is bound and called, read from the
installed source (``quantized_site``), and the one module global ftrun replaces
(``wrap_quantized_allreduce``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ftrun.torchft_compat.sources import torchft_source

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
    return quantized_site_of_source(torchft_source(QUANTIZED_MODULE), torchft_source(QUANTIZED_SOURCE))


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
