"""Sketch what torchft's DiLoCo averaged at every sync, so ``ftrun.check.numerics`` can check it.

Where torchft computes it (0.2.0 and nightly, ``local_sgd.py`` / ``manager.py``): at the send,
``_StreamingDiLoCoFragment.prepare_sync`` computes each parameter's pseudo-gradient
``original - current`` and calls ``Manager.allreduce`` per parameter (or per bucket);
``Manager.allreduce`` zeroes the tensor when the replica is not participating, runs the process
group's SUM, and chains a callback that divides by ``num_participants()``; at the sync,
``perform_sync`` waits, and after ``should_commit`` the outer optimizer steps on the average.
We hook exactly those places, never re-implementing them:

* ``SketchPG`` wraps the process group the Manager uses (torchft's ``ProcessGroupWrapper``
  extension point): the tensor handed to its ``allreduce`` is the **contribution** as the
  collective saw it; its result, before torchft's divide callback runs, is the **SUM**. On the
  CPU the SUM is read at the sync: the fragment's ``perform_sync`` (innermost hook, ``attach_sums``)
  first waits for the round's Works as torchft's own wait does first, and sketches every SUM at
  once, in place, before torchft's wait chains its divide (a Python Work wrapper per collective and
  a completion callback per tensor, each copying its tensor, cost ~0.45 ms per sync in the rank).
  Elsewhere (a GPU's streams, the quantized path's own done-callback) the SUM is sketched in a
  callback on the Work's future (``SketchedWork``).
  With ``--quantize`` torchft calls ``allreduce_quantized`` instead, which never calls it:
  ``ftrun.worker.sketch_quantized`` wraps that function and sketches through ``SketchPG.sketched``.
* each fragment's ``prepare_sync`` / ``perform_sync`` (instance attributes) name the round:
  fragment, manager step, quorum id, participants, whether this replica participates.
* the outer optimizers ftrun built get a step pre-hook (the **average** it steps on: ``p.grad``).
  The **globals** after the step are not sketched: the event log's ``fingerprint`` of every commit
  (``ftrun.worker.recorder``) already hashes them, exactly; a sketch of them was a fourth read
  of the fragment per sync for the same question.
* after a heal, the first send fingerprints every fragment's global parameters (``HealNumerics``),
  as the recorder does at a commit: the check compares them with the source's, bit for bit.

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
``ftrun.check.numerics.sketch_error`` states the error budget of that float32 stage for a sum of
``rows`` values per column in any order and of any signs (a gemv adds them one after another).
Cost per sync: one read of the fragment for each of the three sketches, plus the contribution's
norm. On the CPU the float32 stage of a float32 tensor is a BLAS gemv (``ones @ rows``: products
by 1 are exact, so it is a float32 sum read at memory speed, ~1.8x faster than torch's column
``sum`` here) and the contribution's norm a dot over the same rows right after, while they are
in cache — only when float32 matmuls are exact (``_gemv_exact``: TF32/bf16 matmul settings would
round the inputs) and more than one row (one row needs no addition). Otherwise (other dtypes,
other devices): the column ``sum`` in float32 and a separate norm pass.

A hook that fails never breaks training: the round is marked unsketched and the check says
"not checked" for it (logged once).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torchft.process_group import ProcessGroup
from torchft.utils import get_stream_context

from ftrun import layout
from ftrun.torchft_compat import SKETCH_WAIT, diloco_fragments, quorum_id
from ftrun.worker.pg_wrapper import KeptWrapper
from ftrun.worker.recorder import fingerprint

log = logging.getLogger(__name__)

K = layout.SKETCH_K  # projections per sketch
PERIOD = layout.SKETCH_PERIOD  # columns of W (prime: a fault must not hide in a short period)
STAGE = layout.SKETCH_STAGE  # float32 first-stage width (~131K): rows = ceil(numel / STAGE)
SEED = layout.SKETCH_SEED
BATCH = PERIOD * 64  # tensors smaller than this are held (copied when asked) and projected together: few ops
FUSE_ROWS = 2  # CPU: rows (of STAGE float32: 1 MiB) folded per gemv, their norm summed while in cache


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
        """(P·x restricted to elements offset.., as K float64; ||x||² as float32 when ``norm``; the
        float32 stage's rows, 0 when none ran), the tensors on x's device."""
        flat = x.detach().reshape(-1)
        n = flat.numel()
        rows = n // STAGE
        body = rows * STAGE
        sq = None
        if rows > 1 and _gemv_exact(flat):  # float32 on the CPU: gemv, the norm fused (module docstring)
            m = flat[:body].view(rows, STAGE)
            folded32 = torch.zeros(STAGE, dtype=torch.float32)
            step = FUSE_ROWS if norm else rows
            if norm:
                sq = torch.zeros((), dtype=torch.float32)
            for r in range(0, rows, step):
                block = m[r : r + step]
                folded32.addmv_(block.t(), self.ones(block.shape[0]))  # Σ over the block's rows, float32
                if norm and sq is not None:
                    sq += torch.dot(block.reshape(-1), block.reshape(-1))  # the rows just read, from cache
            if norm and sq is not None and n > body:
                sq += torch.dot(flat[body:], flat[body:])
            folded = folded32.to(torch.float64)
            if n > body:
                folded[: n - body] += flat[body:].to(torch.float64)
        elif body:  # float32 over rows of STAGE columns, then float64
            folded = flat[:body].view(-1, STAGE).sum(0, dtype=torch.float32).to(torch.float64)
            if n > body:
                folded[: n - body] += flat[body:].to(torch.float64)
        else:  # a small tensor: float64 directly, padded to whole rows of PERIOD
            folded = torch.zeros(-(-max(n, 1) // PERIOD) * PERIOD, dtype=torch.float64, device=flat.device)
            folded[:n] = flat
        if folded.numel() > PERIOD:
            folded = folded.view(-1, PERIOD).sum(0)
        if norm and sq is None:
            sq = torch.linalg.vector_norm(flat, dtype=torch.float32) ** 2 if n else torch.zeros((), device=flat.device)
        return self.w(flat.device, offset) @ folded, sq, rows

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


class Round:
    """One fragment's round, from its send to its sync, on this rank."""

    def __init__(
        self,
        projector: Projector,
        fragment: int,
        manager_step: int,
        qid: int | None,
        participants: int,
        participating: bool,
        sync_step: int | None,
        path: str,
    ) -> None:
        self.fragment, self.manager_step, self.quorum_id = fragment, manager_step, qid
        self.participants, self.participating, self.sync_step, self.path = participants, participating, sync_step, path
        self.world: int | None = None
        self.contribution = Builder(projector)
        self.sum = Builder(projector, norm=False)  # the check bounds ||SUM|| by Σ||contribution||
        # CPU plain path: (tensor, offset, index, Work) per collective, the SUM sketched at the sync
        self.held: list[tuple[torch.Tensor, int, int, dist._Work]] = []
        self.sum_sketch: layout.Sketch | None = None  # the held collectives' SUM (``NumericsProbe.sums_first``)
        self.average: layout.Sketch | None = None
        self.issued = 0
        self.done = 0
        self.broken = False
        self.sent = False  # its send part is in the event log
        self.device = "cpu"  # of the tensors handed to the collective
        self.unsketched: str | None = None  # why its collective could not be sketched (the quantized path)
        self.outer: Any = None  # its ``sketch_outer.OuterParts`` (set by ``NumericsProbe``)

    def part(self, phase: str, **sketches: Any) -> layout.RoundNumerics:
        return layout.RoundNumerics(
            phase=phase,
            fragment=self.fragment,
            manager_step=self.manager_step,
            quorum_id=self.quorum_id,
            sync_step=self.sync_step,
            participants=self.participants,
            participating=self.participating,
            world=self.world,
            path=self.path,
            collectives=self.issued,
            unsketched=None if self.issued else self.unsketched,
            **sketches,
        )


class SketchedWork(dist._Work):
    """The process group's Work, whose future completes after ``on_done`` sketched the SUM (and
    before torchft's divide callback, which the Manager chains on this future).

    The chain is built only when someone asks for the future, as torchft's Manager does after
    ``wait()``: asking earlier changes torchft's behaviour (0.2.0's Baby process groups reply to
    a future request issued before the op completes with a late-bound op id and then hang)."""

    def __init__(self, work: dist._Work, on_done: Callable[[], None]) -> None:
        super().__init__()
        self._work = work
        self._on_done = on_done
        self._future: torch.futures.Future[Any] | None = None
        self._lock = threading.Lock()

    def wait(self, timeout: Any = None) -> bool:
        ok = self._work.wait() if timeout is None else self._work.wait(timeout)
        if self._future is not None:
            self._future.wait()
        return True if ok is None else ok

    def block_current_stream(self, timeout: Any = None) -> None:
        self._work.block_current_stream()

    def get_future(self) -> torch.futures.Future[Any]:
        with self._lock:
            if self._future is None:
                on_done = self._on_done

                def done(fut: torch.futures.Future[Any]) -> Any:
                    value = fut.value()  # the real collective's error, if any, propagates
                    on_done()
                    return value

                self._future = self._work.get_future().then(done)
            return self._future


class SketchPG(KeptWrapper):
    """``Manager(pg=SketchPG(pg, probe))``: sketches each SUM allreduce issued during a send; torchft's
    quantized allreduce, called with this group, is sketched through ``sketched`` too
    (``ftrun.worker.sketch_quantized``)."""

    def __init__(self, pg: ProcessGroup, probe: NumericsProbe) -> None:
        super().__init__(pg)
        self._probe = probe

    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> dist._Work:
        if getattr(opts, "reduceOp", None) != dist.ReduceOp.SUM:
            return super().allreduce(tensors, opts)
        path = self._probe.plain_path
        if len(tensors) == 1 and tensors[0].device.type == "cpu":
            return self.held(tensors[0], lambda: KeptWrapper.allreduce(self, tensors, opts), path)
        return self.sketched(tensors, lambda: KeptWrapper.allreduce(self, tensors, opts), path)

    def _contribute(self, t: torch.Tensor, path: str) -> tuple[Round, int, int] | None:
        """Sketch ``t``, about to be handed to the round's next collective (the contribution); the
        round, ``t``'s offset in the fragment and the collective's index. None: no round is sketched."""
        r = self._probe.round
        if r is None or r.broken:
            return None
        try:
            if r.world is None:
                r.world = int(self._inner.size())
                r.device = t.device.type
            r.path = path
            self._probe.corruption.before_issue(t, r.sync_step)  # --corrupt-sync sign: what the collective sees
            offset, index = r.contribution.add(t), r.issued
            r.issued += 1
            self._probe.corruption.at_issue(t, r.sync_step, r.fragment, index)
        except Exception:
            self._probe.failed(r, "contribution")
            return None
        return r, offset, index

    def held(self, t: torch.Tensor, issue: Callable[[], dist._Work], path: str) -> dist._Work:
        """Run ``issue()``, the collective of CPU tensor ``t``, sketching ``t`` as handed to it; its
        Work is returned as it is and kept in the round, whose SUM ``NumericsProbe.sums_first``
        sketches at the sync."""
        placed = self._contribute(t, path)
        work = issue()
        if placed is not None:
            r, offset, index = placed
            r.held.append((t, offset, index, work))
        return work

    def sketched(
        self, tensors: list[torch.Tensor], issue: Callable[[], dist._Work], path: str, stream: Any = None
    ) -> dist._Work:
        """Run ``issue()``, the collective of one tensor of the round being sent, sketching the tensor
        as handed to it (the contribution) and, once the Work completed, its result (the SUM, before
        torchft's divide callback, on ``stream`` when given: where the collective writes the result).
        ``path``: which torchft path this collective is (the round's ``path``)."""
        placed = self._contribute(tensors[0], path) if len(tensors) == 1 else None
        if placed is None:
            return issue()
        t = tensors[0]
        probe = self._probe
        r, offset, index = placed

        def on_done() -> None:
            try:
                with get_stream_context(stream):
                    probe.corruption.before_sum(t, r.sync_step, r.fragment, index)
                    r.sum.at(t, offset)
                    probe.corruption.after_sum(t, r.sync_step, r.participants)
                r.done += 1
            except Exception:  # the SUM is lost (r.done stays short), the contribution stands
                probe.failed(r, "sum", whole=False)

        return SketchedWork(issue(), on_done)


class NumericsProbe:
    """Per rank: builds each round's sketches from the hooks above; ``take()`` hands the step's
    ``RoundNumerics`` (and a ``HealNumerics``) to the event-log recorder."""

    def __init__(self, corruption: Any, fragment_sync_delay: int, quantize: bool, bucketize: bool) -> None:
        self.projector = Projector()
        self.corruption = corruption
        self.tau = fragment_sync_delay
        # the path a round took, as its hooks saw it: ``plain_path`` when the process group's
        # allreduce ran (also a --quantize round torchft ran without its quantized path), "quantized"
        # when torchft's quantized allreduce did (``ftrun.worker.sketch_quantized``)
        self.plain_path = "bucketized" if bucketize else "per-param"
        self.path = "quantized" if quantize else self.plain_path
        self.quantized_unsketched: str | None = None  # why the quantized allreduce is not sketched (set by install)
        self.round: Round | None = None  # the send being issued
        self.pending: dict[int, Round] = {}  # fragment -> its round in flight
        self.step = 0  # the training step now running (set by the loop)
        self.out: list[layout.RoundNumerics] = []
        self.heal_out: layout.HealNumerics | None = None
        self._warned = False
        from ftrun.worker.sketch_outer import OuterSketcher  # (it builds on this module's Builder)

        self.outer = OuterSketcher(self.projector, corruption)

    def failed(self, r: Round, where: str, whole: bool = True) -> None:
        r.broken = r.broken or whole
        if not self._warned:
            self._warned = True
            log.exception("sketch of fragment %d (%s) failed; its rounds are not checked", r.fragment, where)

    def attach(self, diloco: Any, manager: Any, outer: list[torch.optim.Optimizer], heal: Any) -> None:
        frags = diloco_fragments(diloco)
        for f, frag in enumerate(frags):
            frag.prepare_sync = self._send(f, frags, frag.prepare_sync, manager, heal)
            frag.perform_sync = self._sync(f, frag, frag.perform_sync)
            if hasattr(frag, "save_parameters"):  # (torchft's fragments have it; a test's may not)
                frag.save_parameters = self._save(f, frag.save_parameters)
            outer[f].register_step_pre_hook(self._before_outer(f))
            outer[f].register_step_post_hook(self._after_outer(f))

    def _send(self, f: int, frags: list[Any], fn: Callable[[], None], manager: Any, heal: Any) -> Callable[[], None]:
        def prepare_sync() -> None:
            if getattr(heal, "healed_from_step", None) is not None and self.heal_out is None:
                self._fingerprint_heal(frags, manager.current_step())
            # start_quorum ran just before (DiLoCo's post-hook): the round's quorum is known
            r = Round(
                self.projector,
                f,
                manager.current_step(),
                quorum_id(manager),
                manager.num_participants(),
                bool(manager.is_participating()),
                self.step + self.tau,
                self.path,
            )
            r.unsketched = self.quantized_unsketched if self.path == "quantized" else None
            r.outer = self.outer.parts()
            try:
                self.outer.at_send(frags[f], r.outer)
            except Exception:
                self.failed(r, "original/local", whole=False)
            self.round = r
            try:
                fn()
            finally:
                self.round = None
            self.pending[f] = r
            on_cpu = r.device == "cpu"
            # on a GPU, materialising now would wait for the collectives queued behind the
            # sketches on DiLoCo's stream: the send's part is written at the sync instead
            if on_cpu:
                self._emit_send(r)

        return prepare_sync

    def _emit_send(self, r: Round) -> None:
        if not r.broken and not r.sent:
            r.sent = True
            o = r.outer
            self.out.append(
                r.part(
                    "send",
                    contribution=r.contribution.sketch(),
                    original=o.original if o is not None else None,
                    local=o.local if o is not None else None,
                )
            )

    def _fingerprint_heal(self, frags: list[Any], manager_step: int) -> None:
        try:
            self.heal_out = layout.HealNumerics(manager_step, [fingerprint(f.original_parameters) for f in frags])
        except Exception:
            log.exception("fingerprint of the healed parameters failed")

    def attach_sums(self, diloco: Any) -> None:
        """Hook each fragment's ``perform_sync`` innermost, before anything else wraps it (the event
        log's timings, which count the SUMs' sketch as part of the sync's wait, as it is)."""
        for f, frag in enumerate(diloco_fragments(diloco)):
            frag.perform_sync = self.sums_first(f, frag.perform_sync)

    def sums_first(self, f: int, fn: Callable[[], bool]) -> Callable[[], bool]:
        """``perform_sync`` that first sketches the SUMs of fragment ``f``'s held collectives.

        Its wait for them (``_wait_held``) is no earlier than torchft's own: ``perform_sync``'s
        first statement waits for every Work of the round, and only the SUMs' sketch runs between
        this wait and it, so the training thread blocks for the same collectives at the same
        moment; only the span differs. Hence ``SKETCH_WAIT`` around it: the trace analysis counts it as exposed
        with the rest of the sync's wait (``ftrun.check.comm``), as the event log always did. The
        alternative, sketching each SUM in its collective's completion path (``SketchedWork``, as
        on a GPU), needs a Work wrapper and a callback per tensor (~0.45 ms a sync on the CPU) for
        no change in when the thread blocks: the span is the simpler correct fix."""

        def perform_sync() -> bool:
            r = self.pending.get(f)
            if r is not None and r.held:
                with torch.profiler.record_function(SKETCH_WAIT):
                    held = self._wait_held(r)
                if held is not None:
                    self._sketch_held(r, held)
            return fn()

        return perform_sync

    def _wait_held(self, r: Round) -> list[tuple[torch.Tensor, int, int, dist._Work]] | None:
        """Wait for each held Work (what torchft's wait calls first: a collective that failed raises
        there, and again in torchft's wait, which handles it); None when one failed (no SUM: ``done``
        stays short)."""
        held, r.held = r.held, []
        try:
            for _, _, _, work in held:
                work.wait()
        except Exception:
            return None
        return held

    def _sketch_held(self, r: Round, held: list[tuple[torch.Tensor, int, int, dist._Work]]) -> None:
        """Sketch the waited-for SUMs in place, in one Builder, before torchft's wait chains its divide."""
        try:
            b = Builder(self.projector, norm=False, copy=False)  # sketched below, before anything changes them
            for t, offset, index, _ in held:
                self.corruption.before_sum(t, r.sync_step, r.fragment, index)
                b.at(t, offset)
            r.sum_sketch = b.sketch(r.contribution.numel)
            for t, _, _, _ in held:
                self.corruption.after_sum(t, r.sync_step, r.participants)
            r.done += len(held)
        except Exception:  # the SUM is lost (r.done stays short), the contribution stands
            self.failed(r, "sum", whole=False)

    def _sync(self, f: int, frag: Any, fn: Callable[[], bool]) -> Callable[[], bool]:
        def perform_sync() -> bool:
            r0 = self.pending.get(f)
            if r0 is not None and r0.outer is not None and not r0.broken:
                try:
                    self.outer.before_sync(frag, r0.outer, r0.sync_step)
                except Exception:
                    self.failed(r0, "local at the sync", whole=False)
            ok = fn()
            r = self.pending.pop(f, None)
            step = None
            if r is not None and r.outer is not None:
                try:
                    step = self.outer.after_sync(frag, r.outer, ok)
                except Exception:
                    self.failed(r, "merged", whole=False)
            if r is not None:
                self._emit_send(r)
                if not r.broken:
                    complete = r.issued > 0 and r.done == r.issued
                    if complete and r.sum_sketch is None:
                        r.sum_sketch = r.sum.sketch(r.contribution.numel)
                    self.out.append(
                        r.part(
                            "sync",
                            sum=r.sum_sketch if complete else None,
                            average=r.average if ok else None,
                            outer=step,
                        )
                    )
            return ok

        return perform_sync

    def _params(self, opt: torch.optim.Optimizer) -> list[torch.Tensor]:
        return [p for g in opt.param_groups for p in g["params"]]

    def _before_outer(self, f: int) -> Callable[..., None]:
        def hook(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
            r = self.pending.get(f)
            if r is None or r.broken:
                return
            try:
                grads = [p.grad for p in self._params(opt) if p.grad is not None]
                self.corruption.before_outer_step(grads, r.sync_step)
                # its tolerance uses the SUM's norm; sketched at once, before the step changes p.grad
                b = Builder(self.projector, norm=False, copy=False)
                for g in grads:
                    b.add(g)
                r.average = b.sketch()
            except Exception:
                self.failed(r, "average")
            if r.outer is not None:
                try:
                    self.outer.before_step(opt, r.outer, r.sync_step)
                except Exception:
                    self.failed(r, "outer step", whole=False)

        return hook

    def _save(self, f: int, fn: Callable[[], None]) -> Callable[[], None]:
        """torchft's ``save_parameters`` of fragment ``f``, skipped by ``--corrupt-sync R@S:stale``."""

        def save_parameters() -> None:
            r = self.pending.get(f)
            if r is not None and self.corruption.skip_save(r.sync_step):
                return
            fn()

        return save_parameters

    def _after_outer(self, f: int) -> Callable[..., None]:
        def hook(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
            r = self.pending.get(f)
            if r is None or r.broken or r.outer is None:
                return
            try:
                self.outer.after_step(opt, r.outer)
            except Exception:
                self.failed(r, "outer step", whole=False)

        return hook

    def take(self) -> tuple[list[layout.RoundNumerics], layout.HealNumerics | None]:
        out, heal = self.out, self.heal_out
        self.out, self.heal_out = [], None
        return out, heal
