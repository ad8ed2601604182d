"""The quantized allreduce sketched at its boundary (``ftrun.worker.sketch_quantized``), on CPU. No process.

Without triton torchft never takes its quantized path, so a fake stands in for torchft's
``allreduce_quantized``, with its signature and its structure: it quantizes each replica's tensor
per row to fp8 e4m3 (torch's float8_e4m3fn), sums the dequantized rows in fp32, re-quantizes the
sum, and a done-callback it registers on the Work's future dequantizes the result into the tensor
in place. torchft's own ``Manager.allreduce`` (the real function, on a stand-in manager) calls it,
zeroes a non-participant's tensor and chains its divide by the participants; the sketches' probe
hooks a stand-in DiLoCo fragment as the worker hooks torchft's; ``ftrun.check.numerics`` checks the
event records.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
import torchft.manager as tm  # noqa: E402
from torchft.process_group import ProcessGroup  # noqa: E402

from ftrun import layout, torchft_compat  # noqa: E402
from ftrun.check.numerics import QUANTIZED_NOT_CHECKED_PREFIX, check_numerics  # noqa: E402
from ftrun.check.numerics_core import Z  # noqa: E402
from ftrun.report.numerics_view import numerics_line  # noqa: E402
from ftrun.worker.fault_injection import Corruption  # noqa: E402
from ftrun.worker.sketch import NumericsProbe, SketchPG  # noqa: E402
from ftrun.worker.sketch_quantized import install  # noqa: E402
from sketch_fakes import FakeManager, round_records  # noqa: E402

FP8_MAX = 448.0
SHAPES = [(64, 96), (96,), (128, 40)]  # weights (rows scaled apart) and a bias


def fp8(x: torch.Tensor) -> torch.Tensor:
    """One per-row e4m3 round trip (quantize, dequantize), as torchft's kernels (1-D: a row per element)."""
    rows = x if x.dim() == 2 else x.unsqueeze(1)
    m = rows.abs().amax(dim=1, keepdim=True)
    scale = torch.where(m > 0, FP8_MAX / m, torch.ones_like(m))
    return ((rows * scale).to(torch.float8_e4m3fn).to(torch.float32) / scale).reshape(x.shape)


class Done(dist._Work):
    """A Work whose future is one object (as NCCL's), completed once every replica contributed."""

    def __init__(self) -> None:
        super().__init__()
        self.fut: torch.futures.Future = torch.futures.Future()

    def wait(self, timeout=None) -> bool:
        return True

    def get_future(self) -> torch.futures.Future:
        return self.fut


class FakeWorld:
    """torchft's quantized allreduce for ``world`` replicas in one process: call i of each replica
    meets call i of the others. ``corrupt(i, result)`` may change the reduced result (a broken collective)."""

    def __init__(self, world: int, corrupt=None) -> None:
        self.world = world
        self.calls: dict[int, int] = {}  # replica -> its calls so far
        self.pending: dict[int, list] = {}  # call index -> [(tensor, work)]
        self.corrupt = corrupt
        self.seen: list = []  # (tensors, opts, process_group, sync_stream) as called

    def allreduce_quantized(self, tensors, opts, process_group, sync_stream=None):
        self.seen.append((tensors, opts, process_group, sync_stream))
        replica = (process_group.parent if isinstance(process_group, SketchPG) else process_group).replica
        i = self.calls.get(replica, 0)
        self.calls[replica] = i + 1
        (t,) = tensors
        q = fp8(t)  # quantized now: the caller may change t afterwards
        work = Done()
        result: dict = {}

        def dequantize(fut) -> None:  # torchft registers this on the Work's future, in its own call
            t.copy_(result["sum"])

        work.fut.add_done_callback(dequantize)
        group = self.pending.setdefault(i, [])
        group.append((q, work, result))
        if len(group) == self.world:
            total = fp8(sum(g[0] for g in group))  # the fp32 sum of dequantized rows, re-quantized
            if self.corrupt is not None:
                total = self.corrupt(i, total)
            for _, w, res in group:
                res["sum"] = total
                w.fut.set_result([total])
        return work


class Peer(ProcessGroup):
    """The group under ``SketchPG``: only its size and the replica it stands for are used."""

    def __init__(self, replica: int, world: int) -> None:
        super().__init__(0, world)
        self.replica, self._world = replica, world

    def size(self) -> int:
        return self._world


class Fragment:
    """A stand-in for torchft's ``_StreamingDiLoCoFragment``: send = one Manager.allreduce per
    pseudo-gradient, sync = wait, step the outer optimizer on the averages."""

    def __init__(self, manager: FakeManager, grads: list, outer, params: list, bucketize: bool = False) -> None:
        self.manager, self.grads, self.outer, self.params = manager, grads, outer, params
        self.bucketize = bucketize
        self.works: list = []
        self.original_parameters = {}

    def prepare_sync(self) -> None:
        if not self.bucketize:
            self.works = [self.manager.allreduce(g) for g in self.grads]
            return
        # torchft's _bucketize_and_allreduce (one bucket): pack, allreduce, unpack in a callback
        flat = torch.cat([g.reshape(-1) for g in self.grads])
        work = self.manager.allreduce(flat)

        def unpack(fut):
            offset = 0
            for g in self.grads:
                g.copy_(flat[offset : offset + g.numel()].view_as(g))
                offset += g.numel()
            return []

        work.get_future().then(unpack)
        self.works = [work]

    def perform_sync(self) -> bool:
        for w in self.works:
            w.wait()
        for p, g in zip(self.params, self.grads, strict=True):
            p.grad = g.clone()
        self.outer.step()
        return True


class DiLoCo:
    def __init__(self, fragment: Fragment) -> None:
        self._fragments = [fragment]


@pytest.fixture
def quantized_torchft(monkeypatch):
    """torchft.manager as with triton; returns (make_world, install-for-a-probe)."""
    monkeypatch.setattr(tm, "IS_TRITON_AVAILABLE", True)
    monkeypatch.setattr(torch.accelerator, "current_stream", lambda *a: None)  # CPU: torchft passes it on

    def world(n: int, corrupt=None) -> FakeWorld:
        w = FakeWorld(n, corrupt)

        # the function torchft.manager calls, with torchft's signature (the adapter checks it)
        def allreduce_quantized(tensors, opts, process_group, sync_stream=None):
            return w.allreduce_quantized(tensors, opts, process_group, sync_stream)

        monkeypatch.setattr(tm, "allreduce_quantized", allreduce_quantized, raising=False)
        return w

    return world


def contributions(seed: int, replicas: int) -> list[list]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(replicas):
        out.append(
            [
                torch.randn(s, generator=g) * (1 + torch.arange(s[0]).reshape(-1, *[1] * (len(s) - 1)) / 8)
                for s in SHAPES
            ]
        )
    return out


def run_round(world_size: int, participating: list[bool], tmp_path, seed=0, faults=(), bucketize=False):
    """One quantized round of every replica through the hooks; returns the check's input (event records)."""
    n = sum(participating)
    grads = contributions(seed, world_size)
    handed = [[g.clone() if participating[r] else torch.zeros_like(g) for g in gs] for r, gs in enumerate(grads)]
    reps = []
    for r in range(world_size):
        probe = NumericsProbe(Corruption(list(faults), r, 0, tmp_path), 0, quantize=True, bucketize=False)
        pg = SketchPG(Peer(r, world_size), probe)
        why = install(probe)
        man = FakeManager(pg, n, participating[r], quantize=True)
        params = [torch.nn.Parameter(torch.zeros(s)) for s in SHAPES]
        outer = torch.optim.SGD(params, lr=1.0)
        frag = Fragment(man, grads[r], outer, params, bucketize)
        probe.attach(DiLoCo(frag), man, [outer], heal=None)
        probe.step = 10
        reps.append((probe, frag, man, why))
    for _, frag, _, _ in reps:  # every replica sends (the last completes the collectives) ...
        frag.prepare_sync()
    logs = {}
    for r, (probe, frag, man, _) in enumerate(reps):  # ... then each syncs
        sent, _ = probe.take()
        assert frag.perform_sync() is True and not man.errors
        synced, _ = probe.take()
        logs[(r, 0)] = round_records(sent, synced, n)
    return logs, reps, handed


def test_a_quantized_round_is_sketched_at_the_boundary_and_checked_with_the_fp8_budget(quantized_torchft, tmp_path):
    w = quantized_torchft(3)
    logs, reps, handed = run_round(3, [True, True, False], tmp_path)
    assert all(why is None for *_, why in reps)
    # torchft's Manager called the wrapped function with its own arguments: SUM, the SketchPG
    assert len(w.seen) == 3 * len(SHAPES)
    assert all(isinstance(pg, SketchPG) and opts == dist.ReduceOp.SUM for _, opts, pg, _ in w.seen)
    send = logs[(2, 0)][0].numerics[0]
    assert send.path == "quantized" and send.collectives == len(SHAPES) and send.unsketched is None
    assert send.contribution.norm == 0.0  # the non-participant contributed zeros, as the Manager handed them
    out = check_numerics(logs, sketches_on=True)
    assert out.status == "checked" and not out.problems, out.record()
    assert out.checked == 1 and out.quantized_checked == 1 and out.replica_syncs_checked == 3
    assert out.paths == ["quantized"]
    # the SUM check ran with the fp8 budget, and the fp8 error is a visible share of it
    le = out.largest_error
    assert le.check == "quantized SUM = sum of contributions (fp8)", le
    assert 1.0 / (Z * Z) < le.ratio < 1.0, le
    # the average the outer optimizer stepped on is the dequantized SUM / 2 participants, exactly
    exact = [fp8(sum(fp8(g[i]) for g in handed)) / 2 for i in range(len(SHAPES))]
    for p, e in zip(reps[0][1].params, exact, strict=True):
        assert torch.equal(p.grad, e)
    line = numerics_line(out.record())
    assert "; 1 quantized sync(s) checked (SUM within the fp8 e4m3 budget)" in line, line
    # the plain rule would not hold: the rounding is fp8's, not fp32's
    for recs in logs.values():
        for rec in recs:
            for part in rec.numerics:
                part.path = "per-param"
    plain = check_numerics(logs, sketches_on=True)
    assert plain.problems and plain.problems[0].check == "sum"


def test_a_corrupted_quantized_result_is_caught(quantized_torchft, tmp_path):
    # the collective's result broken (negated): beyond the fp8 budget, which is about the SUM's own size
    # (a 1.5x or one element's change would hide in it; the divide after it is checked exactly)
    quantized_torchft(2, corrupt=lambda i, total: -total)
    logs, *_ = run_round(2, [True, True], tmp_path, seed=1)
    out = check_numerics(logs, sketches_on=True)
    assert out.problems and {p.check for p in out.problems} == {"sum"}, out.texts()
    assert "the process group's SUM is not the sum of the contributions" in out.problems[0].text


def test_a_wrong_divide_on_a_quantized_round_is_caught_exactly(quantized_torchft, tmp_path):
    # --corrupt-allreduce 1@10:wrong-count on the quantized path: the divide is checked to the dtype
    quantized_torchft(2)
    fault = layout.FaultSpec(1, 10, "corrupt", kind="wrong-count")
    logs, *_ = run_round(2, [True, True], tmp_path, seed=2, faults=[fault])
    out = check_numerics(logs, sketches_on=True)
    assert [p.replica for p in out.problems] == [1], out.texts()
    assert out.problems[0].cause.startswith("divided by participants + 1 = 3 instead of 2")


def test_without_the_expected_signature_the_rounds_stay_not_checked_saying_why_once(monkeypatch, tmp_path):
    monkeypatch.setattr(tm, "IS_TRITON_AVAILABLE", True)
    monkeypatch.setattr(tm, "allreduce_quantized", lambda tensors, pg, opts: None, raising=False)
    probe = NumericsProbe(Corruption([], 0, 0, tmp_path), 0, quantize=True, bucketize=False)
    why = install(probe)
    assert why and "takes (tensors, pg, opts), not (tensors, opts, process_group, sync_stream)" in why
    assert tm.allreduce_quantized.__code__.co_varnames[:3] == ("tensors", "pg", "opts")  # left as it was
    # what the rank records: a quantized round with no contribution, and why
    head = dict(fragment=0, manager_step=3, quorum_id=7, sync_step=10, participants=2, participating=True)
    empty = layout.Sketch([0.0] * layout.SKETCH_K, 0.0, 0, "float32")
    avg = layout.Sketch([1.0] * layout.SKETCH_K, None, 100, "float32")
    base = dict(manager_step=3, participants=2, quorum_id=7, loss=0.0, step_time_s=0.0, restart=0, fingerprint=None)
    logs = {}
    for r in range(2):
        send = layout.RoundNumerics("send", path="quantized", unsketched=why, contribution=empty, **head)
        sync = layout.RoundNumerics("sync", path="quantized", unsketched=why, average=avg, **head)
        logs[(r, 0)] = [
            layout.EventRecord(
                step=10, manager_step_after=3, sent=0, synced=None, commit=None, t=1.0, numerics=[send], **base
            ),
            layout.EventRecord(
                step=10, manager_step_after=4, sent=None, synced=0, commit=True, t=2.0, numerics=[sync], **base
            ),
        ]
    out = check_numerics(logs, sketches_on=True)
    assert out.status == "not checked" and out.why.startswith(QUANTIZED_NOT_CHECKED_PREFIX) and why in out.why
    line = numerics_line(out.record())
    assert line.count(QUANTIZED_NOT_CHECKED_PREFIX) == 1 and " ok" not in line


def test_the_wrapper_passes_other_callers_through_untouched(quantized_torchft, tmp_path):
    w = quantized_torchft(1)
    assert torchft_compat.wrap_quantized_allreduce(lambda f: f) == torchft_compat.QuantizedWrap(True, True, None)
    probe = NumericsProbe(Corruption([], 0, 0, tmp_path), 0, quantize=True, bucketize=False)
    assert install(probe) is None
    wrapped = tm.allreduce_quantized
    assert install(probe) is None and tm.allreduce_quantized is wrapped  # idempotent: wrapped once
    t = torch.ones(4, 4)
    work = wrapped([t], dist.ReduceOp.SUM, Peer(0, 1), None)  # not a SketchPG (--no-sketches): torchft's own Work
    assert isinstance(work, Done) and w.seen[-1][2].replica == 0


def test_the_real_torchft_here_has_no_quantized_path_and_says_so():
    # this machine has no triton: torchft.manager never bound the name, and the adapter says why
    if tm.IS_TRITON_AVAILABLE:
        pytest.skip("triton imports here: torchft takes its quantized path")
    assert not hasattr(tm, torchft_compat.QUANTIZED_NAME)
    done = torchft_compat.wrap_quantized_allreduce(lambda f: f)
    assert not done.taken and not done.wrapped and "IS_TRITON_AVAILABLE is false" in done.why
    probe = NumericsProbe(Corruption([], 0, 0, None), 0, quantize=True, bucketize=False)
    assert install(probe) is None and probe.quantized_unsketched is None  # plain rounds: sketched by SketchPG


def test_a_bucketized_quantized_round_is_checked_too(quantized_torchft, tmp_path):
    w = quantized_torchft(2)
    logs, reps, handed = run_round(2, [True, True], tmp_path, seed=4, bucketize=True)
    assert len(w.seen) == 2 and w.seen[0][0][0].dim() == 1  # one flat bucket per replica
    out = check_numerics(logs, sketches_on=True)
    assert out.status == "checked" and not out.problems and out.quantized_checked == 1, out.record()
    exact = fp8(torch.cat([fp8(torch.cat([g.reshape(-1) for g in h])) for h in handed]).view(2, -1).sum(0)) / 2
    got = torch.cat([p.grad.reshape(-1) for p in reps[1][1].params])
    assert torch.equal(got, exact)
