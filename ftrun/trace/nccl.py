"""What a trace states about one NCCL collective: its kind, size, element type and group. Torch-free.

Sources, most trusted first (``CommInfo.source`` says which one gave the kind):

1. the kernel's own args (kineto since 2024 copies them from the CPU op): ``Collective name``,
   ``In msg nelems``, ``Out msg nelems``, ``dtype``, ``Group size``, ``Process Group Name``;
2. the ``record_param_comms`` cpu_op around the launch (same keys, written by ProcessGroupNCCL);
3. the names of the host spans around the launch: ``nccl:<op>`` (user_annotation), then
   ``c10d::<op>_`` (cpu_op);
4. last resort, the kernel name — only a specialised kernel (``ncclDevKernel_AllReduce_…``,
   ``ncclKernel_AllGather_…``) names its op. NCCL runs what it has no specialised kernel for in
   a generic one (``ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t`` under ``nccl:all_reduce`` on
   real A100 traces, ``ncclDevKernel_Generic`` since NCCL 2.19): such a name says nothing, so
   a SendRecv kernel is never read as an alltoall (nor anything else).

Kinds are spelled one way (``KINDS``) whatever the source wrote: ``allreduce``,
``_allgather_base``, ``nccl:all_gather_into_tensor_coalesced`` and ``c10d::allgather_`` all
normalise to ``allgather``.
"""

from __future__ import annotations

import re

import msgspec

KINDS = (
    "allreduce",
    "allgather",
    "reduce_scatter",
    "alltoall",
    "broadcast",
    "reduce",
    "send",
    "recv",
    "barrier",
    "gather",
    "scatter",
)
_BY_KEY = {k.replace("_", ""): k for k in KINDS} | {"alltoallv": "alltoall"}
_SUFFIXES = ("coalesced", "base", "oop", "intotensor", "tensor")
# Specialised kernels name their op (either naming); SendRecv / Generic / anything else: None.
_KERNEL_OPS = {
    "AllReduce": "allreduce",
    "AllGather": "allgather",
    "ReduceScatter": "reduce_scatter",
    "Broadcast": "broadcast",
    "Reduce": "reduce",
}

# Bytes per element, by the spellings torch writes: ``Input type`` ("float", "c10::BFloat16")
# and ``dtype`` of record_param_comms / kernel args ("Float", "BFloat16"). Compared lower-cased.
DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "double": 8,
    "float64": 8,
    "half": 2,
    "c10::half": 2,
    "float16": 2,
    "bfloat16": 2,
    "c10::bfloat16": 2,
    "int": 4,
    "int32": 4,
    "long": 8,
    "long int": 8,
    "int64": 8,
    "short": 2,
    "int16": 2,
    "char": 1,
    "int8": 1,
    "byte": 1,
    "uint8": 1,
    "bool": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "c10::float8_e4m3fn": 1,
    "c10::float8_e5m2": 1,
}


def itemsize(dtype: str | None) -> int | None:
    return DTYPE_BYTES.get(dtype.lower()) if dtype else None


def normalise(name: str) -> str | None:
    """``nccl:_all_gather_base`` / ``c10d::allreduce_`` / ``allreduce_coalesced`` -> a ``KINDS`` entry."""
    s = name.lower()
    for p in ("nccl:", "c10d::", "gloo:"):
        if s.startswith(p):
            s = s[len(p) :]
    s = s.split(" ", 1)[0]  # "nccl:send 0->1"
    key = re.sub(r"[^a-z]", "", s)
    changed = True
    while changed and key not in _BY_KEY:
        changed = False
        for suf in _SUFFIXES:
            if key.endswith(suf) and len(key) > len(suf):
                key, changed = key[: -len(suf)], True
    return _BY_KEY.get(key)


def kernel_op(name: str, prefixes: tuple[str, ...]) -> str | None:
    """The op word of an NCCL kernel name: ``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` /
    ``ncclKernel_AllReduce_RING_LL_Sum_float`` -> ``AllReduce`` (``SendRecv``, ``Generic``, ...)."""
    for p in prefixes:
        if name.startswith(p):
            rest = name[len(p) :]
            return rest.split("_", 1)[0].split("(", 1)[0] or None
    return None


def kind_from_kernel_name(name: str, prefixes: tuple[str, ...]) -> str | None:
    """Last resort: the kind a specialised kernel's name states; None for generic kernels."""
    op = kernel_op(name, prefixes)
    return _KERNEL_OPS.get(op) if op else None


class CommInfo(msgspec.Struct, frozen=True, gc=False):
    """What one source states. ``kind``: a ``KINDS`` entry or None (the source does not say)."""

    kind: str | None
    source: str  # "kernel args" | "record_param_comms" | "nccl:<op>" | "c10d::<op>_" | "kernel name" | "none"
    in_nelems: int | None = None
    out_nelems: int | None = None
    dtype: str | None = None
    group_size: int | None = None
    pg_name: str | None = None

    @property
    def itemsize(self) -> int | None:
        return itemsize(self.dtype)


UNKNOWN = CommInfo(None, "none")


def _int(v: object) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if v >= 0 else None
    if isinstance(v, str) and v.strip().isdigit():
        return int(v)
    return None


def _str(v: object) -> str | None:
    if isinstance(v, str) and v:
        return v
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    return None


def from_args(args: dict, source: str) -> CommInfo | None:
    """The collective ``args`` (kernel or record_param_comms) state; None without ``Collective name``."""
    name = _str(args.get("Collective name"))
    if name is None:
        return None
    return CommInfo(
        normalise(name),
        source,
        _int(args.get("In msg nelems")),
        _int(args.get("Out msg nelems")),
        _str(args.get("dtype")),
        _int(args.get("Group size")),
        _str(args.get("Process Group Name")),
    )


def merge(first: CommInfo, more: CommInfo) -> CommInfo:
    """``first`` with the fields it lacks taken from ``more`` (kind and source stay ``first``'s when it has a kind)."""
    if first.kind is None and more.kind is not None:
        first, more = more, first
    return CommInfo(
        first.kind,
        first.source,
        first.in_nelems if first.in_nelems is not None else more.in_nelems,
        first.out_nelems if first.out_nelems is not None else more.out_nelems,
        first.dtype or more.dtype,
        first.group_size if first.group_size is not None else more.group_size,
        first.pg_name or more.pg_name,
    )


def group_rank(pg_name: str | None, pattern: re.Pattern[str]) -> int | None:
    """The rank inside its replica group that a torchft process-group name states (``pattern``:
    ``LabelSet.torchft_pg_name``), else None."""
    if not pg_name:
        return None
    m = pattern.match(pg_name)
    return int(m["rank"]) if m else None
