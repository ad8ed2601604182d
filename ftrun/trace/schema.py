"""The typed view of a chrome trace that ftrun decodes: only the fields the checks read.

Two stages keep time and memory low: the trace is decoded with ``traceEvents`` as raw JSON
slices (``msgspec.Raw``: no per-field objects), then ``trace_events`` decodes into ``TraceEvent`` only
the events whose name a regex over the raw slice selects (a few percent of a trace).
``msgspec`` skips every other key while parsing, so nothing else is materialised. ``args``
keeps three keys: ``"Input Dims"`` / ``"Input type"`` (present with ``record_shapes=True``; left
undecoded as ``msgspec.Raw`` and parsed only for the few events that need them) and
``"External id"`` (links GPU kernels to CPU ops), ``"correlation"`` (links a kernel to its
``cuda_runtime`` launch), ``"stream"`` / ``"device"`` (where a kernel ran). ``args`` itself stays raw until ``args_of``
decodes it for the few events that need it: most events never pay for their args. ``pid``/``tid``
may be ints or strings.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Iterator, Optional, Union

import msgspec


EMPTY = msgspec.Raw()

# kineto's event categories (``cat``). Host-side spans: record_function annotations, aten/c10d
# ops, Python frames (with_stack). Device side: the copy kineto makes of every record_function
# span on each CUDA stream it touched (pid = device, tid = stream), kernels, and the CUDA runtime
# calls on host threads that launched them (``correlation`` = the kernel's).
# Compared lower-cased: kineto before torch 1.9 wrote Operator / Runtime / Kernel.
CPU_CATS = frozenset({"user_annotation", "cpu_op", "python_function", "operator", ""})
GPU_ANNOTATION = "gpu_user_annotation"
KERNEL = "kernel"
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver", "runtime"})  # NCCL >= 2.19 launches via the driver


class Args(msgspec.Struct, gc=False):
    input_dims: msgspec.Raw = msgspec.field(default=EMPTY, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=EMPTY, name="Input type")
    external_id: Optional[int] = msgspec.field(default=None, name="External id")
    correlation: Optional[int] = None
    stream: Optional[int] = None
    device: Optional[int] = None


class TraceEvent(msgspec.Struct, gc=False):
    name: str = ""
    ph: str = ""
    ts: float = 0.0
    dur: float = 0.0
    tid: Union[int, str] = 0
    pid: Union[int, str] = 0
    cat: str = ""
    args: msgspec.Raw = EMPTY  # decode with ``args_of`` (only the events that need it)


class DistributedInfo(msgspec.Struct):
    rank: Optional[int] = None
    world_size: Optional[int] = None
    backend: Optional[str] = None


class ChromeTrace(msgspec.Struct):
    """``traceEvents`` stay raw JSON slices; ``events`` decodes the ones a filter keeps.

    The run-identity keys (``ftrun.check.provenance``): ``baseTimeNanoseconds`` (kineto: unix
    time of the trace's clock origin; ``ts`` are microseconds from it), ``trace_id`` (one per
    file), ``deviceProperties`` (the GPUs)."""

    traceEvents: list[msgspec.Raw]
    distributedInfo: Optional[DistributedInfo] = None
    # lenient types: a writer's odd value here never makes the trace unreadable
    baseTimeNanoseconds: Union[int, float, str, None] = None
    trace_id: Union[str, int, None] = None
    deviceProperties: msgspec.Raw = EMPTY


DECODER = msgspec.json.Decoder(ChromeTrace)
EVENT = msgspec.json.Decoder(TraceEvent)


def name_filter(names: Iterable[str], prefixes: Iterable[str]) -> re.Pattern[bytes]:
    """A bytes regex that finds events whose ``"name"`` is one of ``names`` or starts with a prefix."""
    exact = "|".join(re.escape(n) + '"' for n in sorted(names))
    pre = "|".join(re.escape(p) for p in sorted(prefixes))
    return re.compile(('"name"\\s*:\\s*"(?:' + "|".join(x for x in (exact, pre) if x) + ")").encode())


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


def raw_json(raw: msgspec.Raw) -> Any:
    """Decode a deferred ``args`` value (absent or bad JSON gives ``None``)."""
    if not raw:
        return None
    try:
        return _ANY.decode(raw)
    except msgspec.DecodeError:
        return None
