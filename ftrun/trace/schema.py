"""The typed view of a chrome trace that ftrun decodes: only the fields the checks read.

Two stages keep time and memory low: the trace is decoded with ``traceEvents`` as raw JSON
slices (``msgspec.Raw``: no per-field objects), then ``trace_events`` decodes into ``TraceEvent`` only
the events whose name a regex over the raw slice selects (a few percent of a trace).
``msgspec`` skips every other key while parsing, so nothing else is materialised. ``args``
keeps three keys: ``"Input Dims"`` / ``"Input type"`` (present with ``record_shapes=True``; left
undecoded as ``msgspec.Raw`` and parsed only for the few events that need them) and
``"External id"`` (links GPU kernels to CPU ops), ``"correlation"`` (links a kernel to its
``cuda_runtime`` / ``cuda_driver`` launch), ``"stream"`` / ``"device"`` (where a kernel ran);
``args_dict`` decodes every key for the few events that need the rest (a collective's
``Collective name``, ``In msg nelems``, ...). ``args`` itself stays raw until ``args_of``
decodes it for the few events that need it: most events never pay for their args. ``pid``/``tid``
may be ints or strings.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any, Literal

import msgspec

EMPTY = msgspec.Raw()

# kineto's event categories (``cat``). Host-side spans: record_function annotations, aten/c10d
# ops, Python frames (with_stack). Device side: kernels; the CUDA runtime/driver calls on host
# threads that launched them (``correlation`` = the kernel's; a graph replay's kernels all carry
# the ``cudaGraphLaunch``'s); and ``gpu_user_annotation``: kineto's device copy of the innermost
# user annotation open at a launch only (pid = device, tid = stream, args only ``External id``):
# under torchft's spans the NCCL stream's copy is ``nccl:all_reduce``, and a ``ProfilerStep#k``
# enclosing other annotations usually has none.
# Compared lower-cased: kineto before torch 1.9 wrote Operator / Runtime / Kernel.
CPU_CATS = frozenset({"user_annotation", "cpu_op", "python_function", "operator", ""})
GPU_ANNOTATION = "gpu_user_annotation"
KERNEL = "kernel"
LAUNCH_CATS = frozenset(
    {"cuda_runtime", "cuda_driver", "runtime"}
)  # NCCL 2.27 launches via the driver (cuLaunchKernelEx)


class Args(msgspec.Struct, gc=False):
    external_id: int | None = msgspec.field(default=None, name="External id")  # (kineto's key order)
    device: int | None = None
    stream: int | None = None
    correlation: int | None = None
    input_type: msgspec.Raw = msgspec.field(default=EMPTY, name="Input type")
    input_dims: msgspec.Raw = msgspec.field(default=EMPTY, name="Input Dims")


class TraceEvent(msgspec.Struct, gc=False, omit_defaults=True):
    # in the order kineto writes the keys: msgspec matches each key against the next field first
    # (omit_defaults: an event re-encoded, ftrun.trace.stream's child, has no empty "args" value)
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = 0.0
    dur: float = 0.0
    args: msgspec.Raw = EMPTY  # decode with ``args_of`` (only the events that need it)


# The values kineto writes for ``ph`` (the Trace Event Format's phases) and ``cat``. Decoding a
# known value as a Literal returns the one interned str instead of building a new one per event.
_PH = Literal["X", "i", "I", "s", "f", "t", "M", "B", "E", "b", "e", "n", "C", "P", "O", "N", "D", "R", "(", ")", ""]
_CAT = Literal[
    "cpu_op", "user_annotation", "python_function", "kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime",
    "cuda_driver", "gpu_user_annotation", "ac2g", "fwdbwd", "Trace", "cpu_instant_event", "overhead",
    "external_correlation", "cuda_sync", "cuda_profiler_range", "collective_comm", "xpu_runtime", "xpu_driver",
    "privateuse1_runtime", "privateuse1_driver", "mtia_runtime", "Kernel", "Memcpy", "Memset", "Runtime",
    "Operator", "",
]  # fmt: skip


class KnownEvent(TraceEvent, gc=False, omit_defaults=True):
    """A ``TraceEvent`` whose ``ph`` and ``cat`` are values kineto writes: the same event, decoded
    ~15% faster. An event with another value does not decode as one (``ValidationError``): the
    reader then decodes its chunk as ``TraceEvent``."""

    ph: _PH = ""
    cat: _CAT = ""


class DistributedInfo(msgspec.Struct):
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None


class ChromeTrace(msgspec.Struct):
    """``traceEvents`` stay raw JSON slices; ``events`` decodes the ones a filter keeps.

    The run-identity keys (``ftrun.check.provenance``): ``baseTimeNanoseconds`` (kineto: unix
    time of the trace's clock origin; ``ts`` are microseconds from it), ``trace_id`` (one per
    file), ``deviceProperties`` (the GPUs)."""

    traceEvents: list[msgspec.Raw]
    distributedInfo: DistributedInfo | None = None
    # lenient types: a writer's odd value here never makes the trace unreadable
    baseTimeNanoseconds: int | float | str | None = None
    trace_id: str | int | None = None
    deviceProperties: msgspec.Raw = EMPTY


DECODER = msgspec.json.Decoder(ChromeTrace)
EVENT = msgspec.json.Decoder(TraceEvent)


def name_filter(names: Iterable[str], prefixes: Iterable[str], cats: Iterable[str] = ()) -> re.Pattern[bytes]:
    """A bytes regex that finds events whose ``"name"`` is one of ``names`` or starts with a
    prefix, or whose ``"cat"`` is one of ``cats`` (any case)."""
    exact = "|".join(re.escape(n) + '"' for n in sorted(names))
    pre = "|".join(re.escape(p) for p in sorted(prefixes))
    alts = ['"name"\\s*:\\s*"(?:' + "|".join(x for x in (exact, pre) if x) + ")"]
    cat = "|".join(re.escape(c) for c in sorted(cats))
    if cat:
        alts.append('"cat"\\s*:\\s*"(?i:' + cat + ')"')
    return re.compile("|".join(alts).encode())


def trace_events(trace: ChromeTrace, keep: re.Pattern[bytes]) -> Iterator[TraceEvent]:
    """Decode only the events that ``keep`` finds (``ValidationError`` on a malformed one)."""
    search = keep.search
    decode = EVENT.decode
    for raw in trace.traceEvents:
        if search(raw):
            yield decode(raw)


_ANY = msgspec.json.Decoder(Any)
_ARGS = msgspec.json.Decoder(Args)
NO_ARGS = Args()


def args_of(e: TraceEvent) -> Args:
    """The event's ``args`` with only the kept keys (``NO_ARGS`` when absent or malformed)."""
    if not e.args:
        return NO_ARGS
    try:
        return _ARGS.decode(e.args)
    except msgspec.DecodeError:  # ValidationError is a DecodeError
        return NO_ARGS


def args_dict(e: TraceEvent) -> dict:
    """All of the event's ``args`` as a dict (empty when absent or malformed): for the few
    events whose other keys matter (NCCL kernels, ``record_param_comms``)."""
    got = raw_json(e.args)
    return got if isinstance(got, dict) else {}


def raw_json(raw: msgspec.Raw) -> Any:
    """Decode a deferred ``args`` value (absent or bad JSON gives ``None``)."""
    if not raw:
        return None
    try:
        return _ANY.decode(raw)
    except msgspec.DecodeError:
        return None
