"""glibc's malloc thresholds for a training rank on CPU: fixed, so a step's tensors reuse heap memory.

glibc serves an allocation of at least ``M_MMAP_THRESHOLD`` bytes with its own ``mmap`` and
returns it with ``munmap`` when freed; the threshold starts at 128 KiB and only moves up as such
blocks are freed, and the heap's free top is given back to the kernel above ``M_TRIM_THRESHOLD``.
A CPU training step allocates and frees the same activations and gradients (hundreds of KiB to
MiB each) every step, so with the defaults a part of them is mapped, page-faulted in and unmapped
again each step. With both thresholds fixed (``MMAP_THRESHOLD``, ``TRIM_THRESHOLD``) they are
reused from the heap: ``scripts/bench_bare_knobs.py --knobs malloc`` measured the bare torchft loop
of the default model 3-4% faster in CPU per step. Blocks above the threshold (a large model's
parameters) are still mapped; the cost is free heap kept: up to ``TRIM_THRESHOLD`` at the heap's
top, and freed chunks inside it that later allocations do not fit exactly. That is a rank's RSS
creeping over its first steps: glibc's statistics (``scripts/bench_worker_memory.py``, mallinfo2
beside RSS) show the bytes held flat while the heap grows by its free chunks, then levelling off:
the allocator's retention, not a leak; ftrun does not trim it.
Not glibc (musl, macOS): nothing is changed.
"""

from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD = -1  # mallopt's parameter numbers (glibc's malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's largest (HEAP_MAX_SIZE / 2 on 64-bit)
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # what glibc's own adjustment sets beside a threshold
USER_TUNABLES = ("glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold")
USER_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def fix_malloc_thresholds() -> bool:
    """Fix glibc's mmap and trim thresholds for this process (module docstring); True when set.
    A threshold the user set (``GLIBC_TUNABLES``, ``MALLOC_MMAP_THRESHOLD_``) is not overridden."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if any(t in tunables for t in USER_TUNABLES) or any(v in os.environ for v in USER_VARIABLES):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
