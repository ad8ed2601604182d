"""The projections of ``ftrun.worker.sketch``: ``Projector`` (the fixed ±1 matrix W and the
projection of a tensor at its offset in a flattened fragment) and ``Builder`` (one fragment's sketch
from its tensors, on any thread).

A sketch (``layout.Sketch``) of a flattened fragment x is k = ``K`` projections P·x with
P[j, i] = W[j, i mod PERIOD], W a fixed ±1 matrix drawn from ``SEED`` (the same on every
replica), and ||x||₂. Linear, so P·avg = (Σ P·contribution) / participants up to rounding. It
is computed on the tensors' device, at each tensor's offset in the fragment. A tensor of ``BATCH``
elements or more is projected alone: first summed in float32 over rows of ``STAGE`` columns (a
multiple of PERIOD: few rows for any tensor), then in float64 to PERIOD columns and projected in
float64. The smaller ones (a default-model fragment is only those) are held, copied where the
collective changes them in place later, and projected together at ``sketch``: one ``cat`` lays them
out with zero pads putting each element at its column (on the CPU in their own dtype, into a reused
buffer: half the bytes of a float64 layout, which matters after a training step has left the caches
cold: 3.42 -> 3.08 ms for the four sketches a round then had there, paired median of 60), then one column
sum accumulated in float64, one product by W, one norm — a few ops whatever their number, every
element summed in float64 (no float32 stage: ``rows`` 0).
``ftrun.check.numerics_core.sketch_error`` states the error budget of that float32 stage for a sum of
``rows`` values per column in any order and of any signs (a gemv adds them one after another).
Cost per sync: one read of the fragment for each of the three sketches, plus the contribution's
norm. On the CPU the float32 stage of a float32 tensor is a BLAS gemv (``ones @ rows``: products
by 1 are exact, so it is a float32 sum read at memory speed, ~1.8x faster than torch's column
``sum`` here) into a reused per-thread buffer, read once more in float64 straight to PERIOD columns
(no float64 copy of the STAGE-wide sum, no fresh zeroed buffer per tensor), and a norm a dot over
each block of ``FUSE_ROWS`` rows right after its gemv, while they are in cache — only when float32
matmuls are exact (``_gemv_exact``: TF32/bf16 matmul settings would round the inputs) and more
than one row (one row needs no addition). Otherwise (other dtypes,
other devices): the column ``sum`` in float32 and a separate norm pass.
"""

from __future__ import annotations

import threading

import torch

from ftrun import layout

K = layout.SKETCH_K  # projections per sketch
PERIOD = layout.SKETCH_PERIOD  # columns of W (prime: a fault must not hide in a short period)
STAGE = layout.SKETCH_STAGE  # float32 first-stage width (~131K): rows = ceil(numel / STAGE)
SEED = layout.SKETCH_SEED
BATCH = PERIOD * 64  # tensors smaller than this are held (copied when asked) and projected together: few ops
# CPU: rows (of STAGE float32: 2 MiB) folded per gemv, their norm summed while in cache: blocks that
# stay in the last-level cache for the dot, few enough calls (bench_numerics.py --sketch-cost)
FUSE_ROWS = 4


class Projector:
    """W (K x PERIOD, ±1, float64) on each device it is asked for; projects one tensor at an offset."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(SEED)
        self._cpu = torch.randint(0, 2, (K, PERIOD), generator=g, dtype=torch.float64) * 2 - 1
        self._by_device: dict[tuple[torch.device, int], torch.Tensor] = {}
        self._zeros: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}
        self._ones = torch.ones(64, dtype=torch.float32)
        self._lock = threading.Lock()
        self._local = threading.local()

    def w(self, device: torch.device, shift: int = 0) -> torch.Tensor:
        """W with its columns rolled by ``shift`` (W_s @ x = W @ roll(x, shift)), on ``device``."""
        key = (device, shift % PERIOD)
        with self._lock:
            if key not in self._by_device:
                self._by_device[key] = torch.roll(self._cpu, -key[1], dims=1).contiguous().to(device)
            return self._by_device[key]

    def zeros(self, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """PERIOD zeros of ``dtype`` on ``device`` (read only: the pads of ``project_many``)."""
        key = (dtype, device)
        with self._lock:
            if key not in self._zeros:
                self._zeros[key] = torch.zeros(PERIOD, dtype=dtype, device=device)
            return self._zeros[key]

    def ones(self, rows: int) -> torch.Tensor:
        """A float32 CPU vector of ``rows`` ones (the gemv's x)."""
        with self._lock:
            if self._ones.numel() < rows:
                self._ones = torch.ones(max(rows, 2 * self._ones.numel()), dtype=torch.float32)
            return self._ones[:rows]

    def project(self, x: torch.Tensor, offset: int, norm: bool = True) -> tuple[torch.Tensor, torch.Tensor | None, int]:
        """(P·x restricted to elements offset.., as K float64; ||x||² when ``norm``; the float32
        stage's rows, 0 when none ran), the tensors on x's device."""
        flat = x.detach().reshape(-1)
        n = flat.numel()
        rows = n // STAGE
        body = rows * STAGE
        if rows > 1 and _gemv_exact(flat):  # float32 on the CPU: gemv, the norm fused (module docstring)
            folded, sq = self._gemv_fold(flat[:body].view(rows, STAGE), norm)
        elif body:  # float32 over rows of STAGE columns, then float64 to PERIOD columns
            folded = (
                flat[:body].view(-1, STAGE).sum(0, dtype=torch.float32).view(-1, PERIOD).sum(0, dtype=torch.float64)
            )
            sq = None
        else:  # a small tensor: float64 directly, padded to whole rows of PERIOD
            folded = torch.zeros(-(-max(n, 1) // PERIOD) * PERIOD, dtype=torch.float64, device=flat.device)
            folded[:n] = flat
            folded = folded.view(-1, PERIOD).sum(0)
            sq = None
        if body and n > body:  # the tail (< STAGE elements, from column 0: body is whole rows) in float64
            tail = flat[body:]
            whole = tail.numel() // PERIOD * PERIOD
            if whole:
                folded += tail[:whole].view(-1, PERIOD).sum(0, dtype=torch.float64)
            folded[: tail.numel() - whole] += tail[whole:]
            if norm and sq is not None:
                sq = sq + torch.dot(tail, tail).to(torch.float64)
        if norm and sq is None:
            sq = torch.linalg.vector_norm(flat, dtype=torch.float32) ** 2 if n else torch.zeros((), device=flat.device)
        return self.w(flat.device, offset) @ folded, sq, rows

    def _gemv_fold(self, m: torch.Tensor, norm: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(the columns of ``m`` (rows x STAGE, float32, CPU) summed in float32 by gemv, then in
        float64 to PERIOD columns; Σ m² when ``norm``, each block's dot right after its gemv read it).
        The float32 sum goes to this thread's scratch, the first block's gemv writing it (no zero
        fill, no fresh buffer whose pages fault in); the float64 fold reads it to PERIOD columns."""
        rows = m.shape[0]
        acc = self._scratch(torch.float32, STAGE)
        step = FUSE_ROWS if norm else rows
        ones = self.ones(step)
        flat = m.reshape(-1)
        size = step * STAGE
        dots: list[torch.Tensor] = []
        for r in range(0, rows, step):
            block = m[r : r + step]
            if r:  # Σ over the block's rows, float32
                acc.addmv_(block.t(), ones[: block.shape[0]])
            else:
                torch.mv(block.t(), ones[: block.shape[0]], out=acc)
            if norm:
                part = flat[r * STAGE : r * STAGE + size]
                dots.append(torch.dot(part, part))  # the rows just read, from cache
        folded = acc.view(-1, PERIOD).sum(0, dtype=torch.float64)
        return folded, (torch.stack(dots).sum(dtype=torch.float64) if norm else None)

    def _scratch(self, dtype: torch.dtype, n: int) -> torch.Tensor:
        """n elements of a CPU buffer of ``dtype`` owned by the calling thread (reused: free once the
        caller's results, which never alias it, are computed)."""
        bufs: dict[torch.dtype, torch.Tensor] = self._local.__dict__.setdefault("bufs", {})
        buf = bufs.get(dtype)
        if buf is None or buf.numel() < n:
            buf = bufs[dtype] = torch.empty(n, dtype=dtype)
        return buf[:n]

    def project_many(
        self, items: list[tuple[int, torch.Tensor]], norm: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None, int]:
        """``project`` of several tensors of one dtype and device at their offsets, summed, in a few
        ops whatever their number: one ``cat`` lays them out with zero pads so that each element sits
        at its column (offset mod PERIOD), then one column sum accumulated in float64 (each element
        converted exactly, then added in float64), one product by W and one float64 norm. No float32
        stage (rows 0): every element is summed in float64. On the CPU, tensors that follow each other
        (each offset the previous one's end: a fragment's tensors as ``Builder.add`` places them) are
        laid out by torch's own flatten (``_flatten_dense_tensors``, the C++ loop DDP's buckets use)
        and projected with W rolled by the first offset: no Python op per tensor (after a training step,
        the four sketches a round then had -0.10 to -0.12 ms, paired medians of 60)."""
        items = sorted(items, key=lambda p: p[0])
        if items[0][1].device.type == "cpu" and _flatten is not None and _follow(items):
            return self._project_run(items, norm)
        zeros = self.zeros(items[0][1].dtype, items[0][1].device)
        pieces: list[torch.Tensor] = []
        pos = 0  # position in the laid-out vector; its column is pos mod PERIOD
        for offset, t in items:
            if t.numel() == 0:
                continue
            pad = (offset - pos) % PERIOD
            if pad:
                pieces.append(zeros[:pad])
            pieces.append(t.reshape(-1))
            pos += pad + t.numel()
        if pos % PERIOD:
            pieces.append(zeros[: -pos % PERIOD])
            pos += -pos % PERIOD
        if not pieces:
            return torch.zeros(K, dtype=torch.float64, device=zeros.device), torch.zeros((), device=zeros.device), 0
        if zeros.device.type == "cpu":  # into this thread's scratch: a fresh buffer costs its page faults
            laid = torch.cat(pieces, out=self._scratch(zeros.dtype, pos))
            folded = laid.view(-1, PERIOD).sum(0, dtype=torch.float64)
            sq = torch.linalg.vector_norm(laid, dtype=torch.float64) ** 2 if norm else None
        else:
            laid = torch.cat(pieces).to(torch.float64)
            folded = laid.view(-1, PERIOD).sum(0)
            sq = torch.dot(laid, laid) if norm else None
        return self.w(laid.device) @ folded, sq, 0

    def _project_run(
        self, items: list[tuple[int, torch.Tensor]], norm: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None, int]:
        """``project_many`` of CPU tensors that follow each other from ``items[0]``'s offset: their
        elements laid out in one flatten, folded to PERIOD columns in float64 (whole rows, then the
        last partial row added to its columns), projected by W rolled by the first offset."""
        flat = _flatten([t for _, t in items])
        n = flat.numel()
        body = n // PERIOD * PERIOD
        if body:
            folded = flat[:body].view(-1, PERIOD).sum(0, dtype=torch.float64)
        else:
            folded = torch.zeros(PERIOD, dtype=torch.float64)
        if n > body:
            folded[: n - body] += flat[body:]
        sq = torch.linalg.vector_norm(flat, dtype=torch.float64) ** 2 if norm else None
        return self.w(flat.device, items[0][0]) @ folded, sq, 0


try:  # torch's flatten of dense tensors into one 1-D buffer (in C++: each tensor's contiguous view, one cat)
    from torch._utils import _flatten_dense_tensors as _flatten
except ImportError:  # a torch without it: the general layout of ``project_many``
    _flatten = None  # type: ignore[assignment]


def _follow(items: list[tuple[int, torch.Tensor]]) -> bool:
    """Whether ``items`` (sorted by offset) follow each other: each offset the previous one's end."""
    end = items[0][0]
    for offset, t in items:
        if offset != end:
            return False
        end += t.numel()
    return end > items[0][0]


def _gemv_exact(x: torch.Tensor) -> bool:
    """Whether the float32 stage may be a CPU gemv: x float32 on the CPU, and float32 matmuls are
    exact (neither the legacy setting nor oneDNN's allows a lower-precision matmul)."""
    if x.dtype != torch.float32 or x.device.type != "cpu":
        return False
    try:
        legacy = torch.get_float32_matmul_precision()
    except RuntimeError:  # legacy and new settings mixed: torch itself will not say; do not guess
        return False
    onednn = getattr(getattr(torch.backends.mkldnn, "matmul", None), "fp32_precision", "none")
    return legacy == "highest" and onednn in ("none", "ieee")


class Builder:
    """The pieces of one flattened fragment's sketch; ``at(x, offset)`` may run on any thread.

    ``copy``: small tensors are copied at ``at`` (the collective and torchft's divide change them in
    place before ``sketch``); ``copy=False`` holds them as they are, for a caller that calls
    ``sketch`` before anything changes them (the outer step's pre-hook, the held SUMs)."""

    def __init__(self, projector: Projector, norm: bool = True, copy: bool = True) -> None:
        self.projector = projector
        self.norm = norm  # measure ||x|| too (one more pass over the data)
        self.copy = copy
        self.parts: list[tuple[torch.Tensor, torch.Tensor | None, int]] = []
        self.small: list[tuple[int, torch.Tensor]] = []  # (offset, flat x or its copy), projected by ``sketch``
        self.numel = 0  # elements placed so far (the next offset, for ``add``)
        self.dtype = ""

    def add(self, x: torch.Tensor) -> int:
        """Project ``x`` at the next offset; returns that offset."""
        offset = self.numel
        self.numel += x.numel()
        self.at(x, offset)
        return offset

    def at(self, x: torch.Tensor, offset: int) -> None:
        """Sketch ``x`` as it is now (a small one is copied when ``copy``, else held until
        ``sketch``). list.append: safe across threads."""
        self.dtype = self.dtype or str(x.dtype).removeprefix("torch.")
        if x.numel() < BATCH:
            # as it is (detached only when it needs it): an op per tensor, right after a training step, is not free
            held = x.detach() if x.requires_grad else x
            self.small.append((offset, held.clone() if self.copy else held))
        else:
            self.parts.append(self.projector.project(x, offset, self.norm))

    def _project_small(self) -> None:
        """Project the small tensors, those of one dtype and device all at once (``project_many``)."""
        groups: dict[tuple[torch.dtype, torch.device], list[tuple[int, torch.Tensor]]] = {}
        for offset, t in self.small:
            groups.setdefault((t.dtype, t.device), []).append((offset, t))
        self.small = []
        for items in groups.values():
            self.parts.append(self.projector.project_many(items, self.norm))

    def sketch(self, numel: int | None = None) -> layout.Sketch:
        """Materialise (one device-to-host copy)."""
        self._project_small()
        if not self.parts:
            return layout.Sketch([0.0] * K, 0.0 if self.norm else None, numel or 0, self.dtype or "float32", 0)
        if len(self.parts) == 1:  # (a default-model fragment: its small tensors' one part)
            part, sq, _ = self.parts[0]
            proj = part.cpu().tolist()
            norm = float(sq.to(torch.float64).sqrt()) if self.norm and sq is not None else None
        else:
            proj = torch.stack([p for p, _, _ in self.parts]).sum(0).cpu().tolist()
            norm = (
                float(torch.stack([s.to(torch.float64) for _, s, _ in self.parts if s is not None]).sum().sqrt())
                if self.norm
                else None
            )
        rows = max(r for _, _, r in self.parts)
        return layout.Sketch(proj, norm, self.numel if numel is None else numel, self.dtype, rows)
