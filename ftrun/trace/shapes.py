"""Tensor shapes and element sizes from a trace event's recorded arguments (``Input Dims``,
``Input type``), as span extraction (``ftrun.trace.spans``) reads them. Torch-free."""

from __future__ import annotations

import functools

import msgspec

from ftrun.trace import nccl
from ftrun.trace.schema import TraceEvent, args_of, raw_json
from ftrun.trace.span_types import Shape


def shapes(value: object) -> tuple[Shape, ...] | None:
    """Tensor shapes from an ``Input Dims`` value: a flat or nested list of int lists."""
    out: list[Shape] = []

    def walk(v: object, depth: int) -> bool:
        if depth > 4 or not isinstance(v, list):
            return False
        if all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            if v:
                out.append(tuple(v))
            return True
        return all(walk(x, depth + 1) for x in v)

    return tuple(out) if walk(value, 0) and out else None


@functools.lru_cache(maxsize=1 << 14)
def dims_shapes(dims: bytes) -> tuple[Shape, ...] | None:
    """``shapes`` of an ``Input Dims`` value in its raw JSON: a run's collectives repeat the
    same few, so each is decoded and walked once."""
    return shapes(raw_json(msgspec.Raw(dims)))


def first_shape(value: object) -> Shape | None:
    """The first argument's shape (``self`` of ``aten::copy_``)."""
    if isinstance(value, list) and value and isinstance(value[0], list):
        if all(isinstance(x, int) and not isinstance(x, bool) for x in value[0]):
            return tuple(value[0])
    return None


def itemsize(e: TraceEvent) -> int | None:
    """The element size of the first input's dtype (``Input type``), None when not recorded."""
    types = raw_json(args_of(e).input_type)
    if isinstance(types, list) and types and isinstance(types[0], str):
        return nccl.itemsize(types[0])
    return None
