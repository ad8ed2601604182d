"""Hypothesis strategies for trace-shaped input (shared by the loader's and the streaming
reader's properties): any JSON value, and chrome traces built from torchft's, kineto's and
ftrun's span names with arbitrary fields."""

from __future__ import annotations

from pathlib import Path

from hypothesis import strategies as st

from ftrun.errors import BadInput
from ftrun.trace.load import load_trace
from ftrun.trace.spans import extract
from ftrun.trace.stream import TraceFile

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=25,
)
names = st.sampled_from(
    [
        "ProfilerStep#1",
        "ProfilerStep#x",
        "ftrun::step#3 manager_step=1",
        "torchft::local_sgd::prepare_sync",
        "torchft::local_sgd::perform_sync",
        "torchft::manager::allreduce",
        "c10d::allreduce_",
        "gloo:all_reduce",
        "torchft::local_sgd::restore_parameters",
        "aten::copy_",
        "ftrun::link::hold",
        "ncclDevKernel_AllReduce_x",
        "ncclKernel_SendRecv_x",
        "cudaLaunchKernel",
        "cudaStreamWaitEvent",
        "torchft::manager::should_commit",
        "torchft::manager::should_commit::current_stream::synchronize",
    ]
)
trace_events = st.fixed_dictionaries(
    {"name": names, "ph": st.sampled_from(["X", "i", "M"])},
    optional={
        "cat": st.sampled_from(
            ["user_annotation", "cpu_op", "gpu_user_annotation", "kernel", "cuda_runtime", "gpu_memcpy", ""]
        ),
        "ts": st.floats(allow_nan=False, allow_infinity=False) | st.integers(-10, 10**6),
        "dur": st.floats(allow_nan=False, allow_infinity=False) | st.integers(-10, 10**6),
        "tid": st.integers(0, 3) | st.text(max_size=3),
        "pid": st.integers(0, 3),
        "args": st.dictionaries(
            st.sampled_from(["Input Dims", "Input type", "External id", "correlation", "stream", "x"]),
            json_values | st.integers(0, 3),
            max_size=3,
        ),
    },
)
traces = st.fixed_dictionaries(
    {"traceEvents": st.lists(trace_events, max_size=12)}, optional={"distributedInfo": json_values}
)


def read_both_ways(p: Path) -> list:
    """(whole-file result, chunked result) of one trace file: TraceSpans or the BadInput line;
    the loader and the streaming reader must give the same."""
    out = []
    for trace in (lambda: load_trace(p), lambda: TraceFile(p)):
        try:
            out.append(extract(p, trace()))
        except BadInput as e:
            out.append(str(e))
    return out
