"""The plain path's SUM on the CPU, sketched at the sync before torchft's divide (``ftrun.worker.sketch``:
``SketchPG.held``, ``NumericsProbe.sums_first``). No process.

torchft's own ``Manager.allreduce`` (the real function, on a stand-in manager) issues each pseudo-
gradient's collective on the ``SketchPG`` and wraps its Work in torchft's ``_ManagedWork``, whose
wait chains the divide by the participants; a fake group sums the replicas' tensors in place (call
i of each replica meets call i of the others). A stand-in DiLoCo fragment sends and syncs as
torchft's does; ``ftrun.check.numerics`` checks the event records.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
from torchft.process_group import ProcessGroup  # noqa: E402

from ftrun import layout  # noqa: E402
from ftrun.check.numerics import check_numerics  # noqa: E402
from ftrun.worker.fault_injection import Corruption  # noqa: E402
from ftrun.worker.sketch import NumericsProbe, SketchPG  # noqa: E402
from sketch_fakes import FakeManager, round_records  # noqa: E402

SHAPES = [(64, 96), (96,), (128, 40)]


class Summed(dist._Work):
    """A Work completed once every replica's tensor of its call is summed in place; ``fail``: its wait raises."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fail = fail
        self.waits = 0

    def wait(self, timeout=None) -> bool:
        self.waits += 1
        if self.fail:
            raise RuntimeError("peer gone")
        return True

    def get_future(self) -> torch.futures.Future:
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result([])
        return fut


class World:
    def __init__(self, n: int, fail_call: int | None = None) -> None:
        self.n, self.fail_call = n, fail_call
        self.pending: dict[int, list] = {}
        self.calls: dict[int, int] = {}
        self.works: list[Summed] = []


class Peer(ProcessGroup):
    """The group under ``SketchPG``: a SUM allreduce of the world's replicas, in process."""

    def __init__(self, world: World, replica: int) -> None:
        super().__init__(0, world.n)
        self.world, self.replica = world, replica

    def size(self) -> int:
        return self.world.n

    def allreduce(self, tensors, opts):
        w = self.world
        i = w.calls.get(self.replica, 0)
        w.calls[self.replica] = i + 1
        work = Summed(fail=self.replica == 0 and i == w.fail_call)
        w.works.append(work)
        group = w.pending.setdefault(i, [])
        group.append(tensors[0])
        if len(group) == w.n:
            total = sum(t.clone() for t in group)
            for t in group:
                t.copy_(total)
        return work


class Fragment:
    """torchft's ``_StreamingDiLoCoFragment`` in small: send = one Manager.allreduce per pseudo-gradient,
    sync = wait each Work, step the outer optimizer on the averages."""

    def __init__(self, manager: FakeManager, grads: list, outer, params: list) -> None:
        self.manager, self.grads, self.outer, self.params = manager, grads, outer, params
        self.works: list = []

    def prepare_sync(self) -> None:
        self.works = [self.manager.allreduce(g) for g in self.grads]

    def perform_sync(self) -> bool:
        for w in self.works:
            w.wait()
        for p, g in zip(self.params, self.grads, strict=True):
            p.grad = g
        self.outer.step()
        return True


class DiLoCo:
    def __init__(self, fragment: Fragment) -> None:
        self._fragments = [fragment]


def run_round(tmp_path, n=2, faults=(), fail_call=None):
    world = World(n, fail_call)
    g = torch.Generator().manual_seed(0)
    reps = []
    for r in range(n):
        probe = NumericsProbe(Corruption(list(faults), r, 0, tmp_path), 0, quantize=False, bucketize=False)
        man = FakeManager(SketchPG(Peer(world, r), probe), n)
        params = [torch.nn.Parameter(torch.zeros(s)) for s in SHAPES]
        frag = Fragment(man, [torch.randn(s, generator=g) for s in SHAPES], torch.optim.SGD(params, lr=1.0), params)
        probe.attach_sums(DiLoCo(frag))  # innermost, as the worker does
        probe.attach(DiLoCo(frag), man, [frag.outer], heal=None)
        probe.step = 10
        reps.append((probe, frag, man))
    for _, frag, _ in reps:
        frag.prepare_sync()
    logs = {}
    for r, (probe, frag, _) in enumerate(reps):
        sent, _ = probe.take()
        assert frag.perform_sync() is True
        synced, _ = probe.take()
        logs[(r, 0)] = round_records(sent, synced, n)
    return logs, reps, world


def test_the_cpu_sum_is_sketched_at_the_sync_without_wrapping_the_work(tmp_path):
    logs, reps, world = run_round(tmp_path)
    # the Work torchft's Manager wraps is the group's own: no per-collective Python wrapper on the CPU
    for _, frag, _ in reps:
        assert all(w._work in world.works for w in frag.works)
    sync = logs[(0, 0)][1].numerics[0]
    assert sync.sum is not None and sync.sum.numel == sum(torch.Size(s).numel() for s in SHAPES)
    out = check_numerics(logs, sketches_on=True)
    assert out.status == "checked" and not out.problems, out.record()
    assert out.checked == 1 and out.replica_syncs_checked == 2
    # torchft's divide ran after the SUM's sketch: the outer optimizer stepped on SUM / 2
    assert sync.average.proj == pytest.approx([x / 2 for x in sync.sum.proj], rel=1e-9)
    assert reps[0][1].params[0].grad is reps[0][1].grads[0]


@pytest.mark.parametrize(
    "kind, cause",
    [("wrong-count", "divided by participants + 1 = 3 instead of 2"), ("noise", "values changed in the collective")],
)
def test_a_fault_between_the_collective_and_the_divide_is_caught(tmp_path, kind, cause):
    fault = layout.FaultSpec(1, 10, "corrupt", kind=kind)
    logs, _, _ = run_round(tmp_path, faults=[fault])
    out = check_numerics(logs, sketches_on=True)
    assert [p.replica for p in out.problems] == [1], out.texts()
    assert out.problems[0].cause.startswith(cause), out.problems[0]


def test_a_failed_collective_leaves_the_sum_unsketched_and_torchft_handles_it(tmp_path):
    logs, reps, _ = run_round(tmp_path, fail_call=1)  # replica 0's second collective fails
    sync = logs[(0, 0)][1].numerics[0]
    assert sync.sum is None and sync.contribution is None  # the send part is its own record
    assert logs[(0, 0)][0].numerics[0].contribution is not None
    assert reps[0][2].errors  # torchft's own wait saw the failure and reported it to its Manager
    assert logs[(1, 0)][1].numerics[0].sum is not None
