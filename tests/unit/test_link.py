"""The emulated link: ``ftrun.link_spec.parse_link`` and ``ftrun.worker.link.LinkEmulator``.

LinkEmulator tests run in-process on a real torchft ``ProcessGroupGloo`` of world size 1
(joined on a TCPStore at 127.0.0.1 with an ephemeral port through
``ftrun.torchft_compat.connect``: ``configure`` on torchft 0.2.x, ``reconfigure`` on the nightly),
so the collective really runs; no lighthouse, no Manager.
"""

from __future__ import annotations

import math
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings, strategies as st
from torch.distributed import TCPStore
from torch.distributed.distributed_c10d import AllreduceOptions, ReduceOp
from torchft.process_group import ProcessGroup, ProcessGroupGloo

from ftrun.errors import BadInput
from ftrun.link_spec import Link, parse_link
from ftrun.torchft_compat import connect
from ftrun.worker.link import HeldWork, LinkEmulator, hold_control

# No wall-clock upper bound (a loaded machine's scheduler decides it): a hold's length is
# checked on the completion the emulator planned (``assert_planned``), exact at any load, and
# that it is kept by the wall clock's lower bound (a sleep never ends early). HANG_S only ends a
# test whose future never completes.
HANG_S = 60.0


def assert_planned(work: dist._Work, t0: float, t1: float, hold: float) -> None:
    """``work`` completes no earlier than the emulator planned: ``hold`` after the moment it was
    issued, a moment in [t0, t1] (read before and after the call)."""
    assert isinstance(work, HeldWork)
    assert t0 + hold - 1e-6 <= work._deadline <= t1 + hold + 1e-6, (work._deadline - t0, work._deadline - t1, hold)


# --- parse_link ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, bw, lat",
    [
        ("1gbit,20ms", 1e9, 0.020),
        ("1gbit", 1e9, 0.0),
        ("1G", 1e9, 0.0),
        ("200mbit,20ms", 200e6, 0.020),
        ("200Mbps, 20 ms", 200e6, 0.020),
        ("50mbit,5ms", 50e6, 0.005),
        ("50m,5", 50e6, 0.005),  # latency without unit = ms
        ("100kbit,1s", 100e3, 1.0),
        ("2.5gbit,250us", 2.5e9, 250e-6),
        ("1000000,0.5s", 1e6, 0.5),  # bandwidth without unit = bit/s
        ("1e9bit,0ms", 1e9, 0.0),
        ("1.5e+09,2.5e-01ms", 1.5e9, 0.25e-3),  # what as_flag() writes for such values
        ("10mbit/s,1ms", 10e6, 0.001),
        ("  10 mb , 3 ms  ", 10e6, 0.003),
    ],
)
def test_parse_link_units(text: str, bw: float, lat: float) -> None:
    spec = parse_link(text)
    assert isinstance(spec, Link)
    assert spec.bandwidth_bps == pytest.approx(bw)
    assert spec.latency_s == pytest.approx(lat)
    # as_flag() is what compare hands to both trainings: it must parse back to the same link
    again = parse_link(spec.as_flag())
    assert again.bandwidth_bps == pytest.approx(spec.bandwidth_bps)
    assert again.latency_s == pytest.approx(spec.latency_s)


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "fast",
        "0",
        "0gbit,1ms",
        "-1gbit",
        "1pbit",  # (no such unit; 1tbit is one)
        "2tbit",  # beyond 1 Tbit/s
        "1gbit,",
        "1gbit,20min",
        "1gbit,-5ms",
        ",20ms",
        "1gbit,20ms,3",
        "1 gbit 20ms",
        "gbit",
        "1.gbit",
        "nan",
        "inf",
        "1gbit,20ms;rm -rf /",
        # non-finite after scaling: used to give Link(inf, ...) (no emulation, or a hold forever)
        "1e400",
        "1e308gbit",
        "1gbit," + "9" * 400 + "ms",
        "1e-400",
    ],
)
def test_parse_link_rejects(text: str) -> None:
    with pytest.raises(BadInput) as e:
        parse_link(text)
    assert "--link" in str(e.value) and "\n" not in str(e.value)


def test_link_spec_costs_and_describe() -> None:
    spec = parse_link("8mbit,50ms")
    # ring allreduce of 1 MB across 2 replicas: 2 latency steps, 1 MB each way -> 0.1 + 1.0 s
    assert spec.collective_s("allreduce", 1_000_000, 2) == pytest.approx(1.1)
    # across 4: 6 steps, 1.5 MB -> 0.3 + 1.5 s (not one transfer of the tensor's size)
    assert spec.collective_s("allreduce", 1_000_000, 4) == pytest.approx(1.8)
    assert spec.collective_s("allreduce", 1_000_000, 1) == 0.0  # alone: nothing crosses
    # plain DiLoCo's sync: one quorum round trip (0.1 s) on top of the allreduce
    assert spec.plain_sync_s(1_000_000, 2) == pytest.approx(1.2)
    assert spec.description == "8 Mbit/s, 50 ms"
    assert parse_link("1gbit,20ms").description == "1 Gbit/s, 20 ms"
    assert parse_link("500kbit,1ms").description == "500 kbit/s, 1 ms"  # below 1 kbit/s is refused


@settings(max_examples=300, deadline=None)
@given(
    st.text(max_size=40)
    | st.from_regex(
        r"\s*[0-9.e+-]{0,8}\s*[kmgKMGt]?(bit|b|bps|bit/s)?\s*(,\s*[0-9.]{0,6}\s*(ms|s|us|min)?)?\s*", fullmatch=True
    )
)
def test_parse_link_total(text: str) -> None:
    """Any string gives a usable Link or BadInput; never another exception."""
    try:
        spec = parse_link(text)
    except BadInput as e:
        assert str(e) and "\n" not in str(e)
        return
    assert math.isfinite(spec.bandwidth_bps) and spec.bandwidth_bps > 0
    assert math.isfinite(spec.latency_s) and spec.latency_s >= 0
    assert math.isfinite(spec.collective_s("allreduce", 10**9, 2))
    again = parse_link(spec.as_flag())  # compare passes as_flag() on to both trainings
    assert again.bandwidth_bps == pytest.approx(spec.bandwidth_bps, rel=1e-5)
    assert again.latency_s == pytest.approx(spec.latency_s, rel=1e-5, abs=1e-12)


# --- LinkEmulator on a real ProcessGroupGloo ----------------------------------------------


@pytest.fixture(scope="module")
def gloo():
    store = TCPStore(host_name="127.0.0.1", port=0, is_master=True, wait_for_workers=False)
    pg = ProcessGroupGloo()
    connect(pg, f"127.0.0.1:{store.port}/ftrun-link-test", 0, 1)  # torchft 0.2.x configure / nightly reconfigure
    assert pg.size() == 1
    yield pg
    pg.abort()


def _sum_opts() -> AllreduceOptions:
    opts = AllreduceOptions()
    opts.reduceOp = ReduceOp.SUM
    return opts


class _Done:
    """When (time.monotonic) a work's future completes, seen from a done-callback."""

    def __init__(self, work: dist._Work) -> None:
        self.event = threading.Event()
        self.t: float | None = None
        work.get_future().add_done_callback(self._on_done)

    def _on_done(self, _fut: torch.futures.Future[Any]) -> None:
        self.t = time.monotonic()
        self.event.set()

    def time(self) -> float:
        assert self.event.wait(HANG_S), "future never completed"
        assert self.t is not None
        return self.t


def assert_not_done_before(work: dist._Work, deadline: float) -> int:
    """Probe ``work``'s future at a few moments before ``deadline`` (monotonic): never done.

    A probe only counts when it finished before the deadline, so a descheduled test thread
    cannot produce a false failure. Returns how many probes counted.
    """
    fut = work.get_future()
    counted = 0
    start = time.monotonic()
    for frac in (0.3, 0.6, 0.9):
        time.sleep(max(0.0, start + (deadline - start) * frac - time.monotonic()))
        done = fut.done()
        if time.monotonic() < deadline:
            assert not done, f"completed {deadline - time.monotonic():.3f} s before the link could have carried it"
            counted += 1
    return counted


def test_allreduce_held_for_latency_plus_size(gloo) -> None:
    bw, lat = 8e6, 0.05  # 1 MB/s
    link = LinkEmulator(gloo, Link(bw, lat), replicas=2)
    t = torch.arange(50_000, dtype=torch.float32)  # 200 kB -> 0.2 s on the wire
    expected = t.clone()  # SUM over world size 1
    hold = 2 * lat + t.numel() * 4 * 8 / bw  # ring across 2: 2 latency steps, all bytes each way

    t0 = time.monotonic()
    work = link.allreduce([t], _sum_opts())
    assert_planned(work, t0, time.monotonic(), hold)
    done = _Done(work)
    assert_not_done_before(work, t0 + hold)
    assert work.wait() is True
    assert time.monotonic() - t0 >= hold
    work.get_future().wait()
    assert done.time() - t0 >= hold
    assert torch.equal(t, expected), "the real collective ran and its result is intact"
    result = work.get_future().value()
    assert torch.equal(result[0] if isinstance(result, list) else result, expected)


@pytest.fixture(scope="module")
def gloo_pair():
    """Two ranks of one real ProcessGroupGloo (world size 2), configured from two threads."""
    store = TCPStore(host_name="127.0.0.1", port=0, is_master=True, wait_for_workers=False)
    pgs = [ProcessGroupGloo(), ProcessGroupGloo()]
    threads = [
        threading.Thread(target=connect, args=(pgs[r], f"127.0.0.1:{store.port}/ftrun-link-pair", r, 2))
        for r in range(2)
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert [p.size() for p in pgs] == [2, 2]
    yield pgs
    for p in pgs:
        p.abort()  # without this, Gloo's threads abort the interpreter at exit


def test_allreduce_really_runs_and_result_is_correct(gloo_pair) -> None:
    """Across two real ranks: each sees the SUM of both inputs, after the link's hold."""
    bw, lat = 8e6, 0.03
    links = [LinkEmulator(p, Link(bw, lat)) for p in gloo_pair]  # R from the real group: 2
    ts = [torch.full((25_000,), 1.0), torch.arange(25_000, dtype=torch.float32)]
    expected = ts[0] + ts[1]
    hold = 2 * lat + 25_000 * 4 * 8 / bw
    t0 = time.monotonic()
    works = [links[r].allreduce([ts[r]], _sum_opts()) for r in range(2)]
    for w in works:
        assert w.wait() is True
    assert time.monotonic() - t0 >= hold
    for r in range(2):
        assert torch.equal(ts[r], expected)
        value = works[r].get_future().value()
        assert torch.equal(value[0] if isinstance(value, list) else value, expected)


def test_collectives_issued_together_queue_on_the_shared_link(gloo) -> None:
    bw, lat = 8e6, 0.01  # 2 latency steps per allreduce across R=2: 0.02 s
    link = LinkEmulator(gloo, Link(bw, lat), replicas=2)
    lat = 2 * lat
    a = torch.ones(25_000)  # 100 kB -> 0.1 s
    b = torch.ones(50_000) * 2  # 200 kB -> 0.2 s
    ba, bb = a.numel() * 4, b.numel() * 4

    t0 = time.monotonic()
    wa = link.allreduce([a], _sum_opts())
    wb = link.allreduce([b], _sum_opts())
    t1 = time.monotonic()
    assert_planned(wa, t0, t1, lat + ba * 8 / bw)
    assert_planned(wb, t0, t1, lat + (ba + bb) * 8 / bw)  # behind a's bytes on the link
    da, db = _Done(wa), _Done(wb)
    assert_not_done_before(wb, t0 + lat + (ba + bb) * 8 / bw)
    wb.wait()
    tb = time.monotonic() - t0
    wa.wait()
    wa.get_future().wait()
    wb.get_future().wait()
    assert da.time() - t0 >= lat + ba * 8 / bw
    assert db.time() - t0 >= lat + (ba + bb) * 8 / bw, "second transfer did not wait for the first on the link"
    assert tb >= lat + (ba + bb) * 8 / bw
    assert torch.equal(a, torch.ones(25_000)) and torch.equal(b, torch.ones(50_000) * 2)


def test_idle_link_does_not_carry_over_backlog(gloo) -> None:
    """After the link drains, a new transfer costs only its own hold."""
    bw, lat = 8e6, 0.005
    link = LinkEmulator(gloo, Link(bw, lat), replicas=2)
    lat = 2 * lat
    t = torch.ones(12_500)  # 50 kB -> 0.05 s
    link.allreduce([t], _sum_opts()).wait()
    time.sleep(0.1)
    t0 = time.monotonic()
    work = link.allreduce([t], _sum_opts())
    assert_planned(work, t0, time.monotonic(), lat + 0.05)  # nothing of the first one left on the link
    work.wait()
    assert time.monotonic() - t0 >= lat + 0.05


def test_allreduce_coalesced_is_held_for_all_its_bytes(gloo) -> None:
    bw, lat = 8e6, 0.005
    link = LinkEmulator(gloo, Link(bw, lat), replicas=2)
    lat = 2 * lat
    ts = [torch.ones(10_000), torch.ones(15_000)]  # 100 kB together -> 0.1 s
    t0 = time.monotonic()
    work = link.allreduce_coalesced(ts, dist.AllreduceCoalescedOptions())
    assert_planned(work, t0, time.monotonic(), lat + 0.1)
    work.wait()
    assert time.monotonic() - t0 >= lat + 0.1
    assert all(torch.equal(t, torch.ones_like(t)) for t in ts)


def test_alone_in_the_quorum_nothing_is_held(gloo) -> None:
    """R = the real group's size (1 here): nothing crosses the link, so no hold at all."""
    link = LinkEmulator(gloo, Link(8e3, 0.5))  # 1 kB/s, 0.5 s: any hold would be seconds
    t0 = time.monotonic()
    work = link.allreduce([torch.ones(10_000)], _sum_opts())
    assert_planned(work, t0, time.monotonic(), 0.0)
    work.wait()


def test_quantized_path_collectives_are_held(gloo) -> None:
    """torchft's quantized allreduce runs alltoall_base + allgather_into_tensor_coalesced: both held.

    Across R=2 each moves half its buffer in one latency step (ftrun.linkcost).
    """
    from torch.distributed.distributed_c10d import AllgatherOptions, AllToAllOptions

    bw, lat = 8e6, 0.02
    link = LinkEmulator(gloo, Link(bw, lat), replicas=2)
    inp = torch.arange(50_000, dtype=torch.float32)  # 200 kB: 100 kB cross -> 0.1 s
    out = torch.zeros_like(inp)
    t0 = time.monotonic()
    work = link.alltoall_base(out, inp, [], [], AllToAllOptions())
    assert_planned(work, t0, time.monotonic(), lat + 0.1)
    work.wait()
    assert time.monotonic() - t0 >= lat + 0.1
    assert torch.equal(out, inp), "the real alltoall ran (world size 1: output = input)"

    src = [torch.full((25_000,), 3.0)]
    dst = [torch.zeros(25_000)]  # gathered output of 100 kB: 50 kB cross -> 0.05 s
    t0 = time.monotonic()
    work = link.allgather_into_tensor_coalesced(dst, src, AllgatherOptions())
    assert_planned(work, t0, time.monotonic(), lat + 0.05)
    work.wait()
    assert time.monotonic() - t0 >= lat + 0.05
    assert torch.equal(dst[0], src[0])


class _Client:
    def __init__(self) -> None:
        self.calls = 0

    def _quorum(self, **kwargs: Any) -> dict:
        self.calls += 1
        return {"quorum_id": 7, **kwargs}

    def should_commit(self, *args: Any) -> bool:
        return True


class _Manager:
    def __init__(self) -> None:
        self._client = _Client()


def test_quorum_is_held_by_its_round_trip(monkeypatch) -> None:  # noqa: ANN001
    """The quorum RPC returns the real reply, one round trip (2 x latency) later, in a labelled span."""
    from torch.profiler import ProfilerActivity, profile

    from ftrun.torchft_compat import LINK_CONTROL_QUORUM
    from ftrun.worker import link as link_mod

    holds: list[float] = []
    real_sleep = time.sleep

    def sleep(s: float) -> None:  # the holds the emulator asks for, each still slept
        holds.append(s)
        real_sleep(s)

    monkeypatch.setattr(link_mod.time, "sleep", sleep)
    m = _Manager()
    real = m._client
    hold_control(m, Link(1e9, 0.05))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.monotonic()
        got = m._client._quorum(step=3)
        took = time.monotonic() - t0
    assert got == {"quorum_id": 7, "step": 3} and real.calls == 1
    assert holds == [pytest.approx(0.1)] and took >= 0.1
    assert any(e.name == LINK_CONTROL_QUORUM for e in prof.events())
    # should_commit is a vote inside one replica group: not held, passed through
    assert m._client.should_commit(0, 3, True) is True
    assert holds == [pytest.approx(0.1)]


def test_wrapper_passes_through_state(gloo) -> None:
    link = LinkEmulator(gloo, Link(1e9, 0.0))
    assert link.getBackendName() == f"{gloo.getBackendName()}+link"
    assert link.parent is gloo
    assert link.errored() is None


# --- errors from the real collective surface through the hold -----------------------------


class _FailingWork(dist._Work):
    """A Work whose future fails after ``delay_s`` (on a thread); ``wait()`` raises only if asked."""

    def __init__(self, error: Exception, delay_s: float, wait_raises: bool) -> None:
        super().__init__()
        self._error = error
        self._wait_raises = wait_raises
        self._fut: torch.futures.Future[Any] = torch.futures.Future()
        if delay_s <= 0:
            self._fut.set_exception(error)
        else:
            threading.Timer(delay_s, lambda: self._fut.set_exception(error)).start()

    def wait(self, timeout: timedelta | None = None) -> bool:
        try:
            self._fut.wait()
        except Exception:
            if self._wait_raises:
                raise
        return True

    def get_future(self) -> torch.futures.Future[Any]:
        return self._fut


class _FailingPG(ProcessGroup):
    """A tiny torchft ProcessGroup whose allreduce returns a Work that fails."""

    def __init__(self, delay_s: float = 0.0, wait_raises: bool = True) -> None:
        super().__init__(0, 1)
        self.delay_s = delay_s
        self.wait_raises = wait_raises
        self.calls = 0

    def allreduce(self, tensors, opts) -> dist._Work:  # noqa: ANN001
        self.calls += 1
        return _FailingWork(RuntimeError("gloo: connection reset by peer"), self.delay_s, self.wait_raises)

    def errored(self) -> Exception | None:
        return None

    def getBackendName(self) -> str:
        return "failing"


@pytest.mark.parametrize("delay_s", [0.0, 0.1])
@pytest.mark.parametrize("wait_raises", [True, False])
def test_real_collective_error_surfaces(delay_s: float, wait_raises: bool) -> None:
    inner = _FailingPG(delay_s=delay_s, wait_raises=wait_raises)
    link = LinkEmulator(inner, Link(8e6, 0.025), replicas=2)
    t0 = time.monotonic()
    work = link.allreduce([torch.ones(1000)], _sum_opts())
    assert inner.calls == 1, "the real collective was not issued"
    with pytest.raises(RuntimeError, match="connection reset"):
        work.wait()
    fut = work.get_future()
    with pytest.raises(RuntimeError, match="connection reset"):
        fut.wait()
    assert fut.done()
    # the failed future also completes no earlier than the link could have carried it
    assert time.monotonic() - t0 >= 0.05 + 4000 * 8 / 8e6
    # and a Manager-style .then() chain sees the error too
    chained = fut.then(lambda f: f.value())
    with pytest.raises(RuntimeError, match="connection reset"):
        chained.wait()


@pytest.mark.parametrize("text", ["1gbit,1e308ms", "1gbit,10.5s", "1gbit,99999999us"])
def test_latency_is_range_checked_like_bandwidth(text: str) -> None:
    with pytest.raises(BadInput) as e:
        parse_link(text)
    assert "latency" in str(e.value) and "0..10s" in str(e.value), str(e.value)
    assert parse_link("1gbit,10s").latency_s == 10.0


class _LateWork(dist._Work):
    """A Work whose future succeeds after ``delay_s`` (on a thread)."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self._fut: torch.futures.Future[Any] = torch.futures.Future()
        threading.Timer(delay_s, lambda: self._fut.set_result([torch.ones(1)])).start()

    def wait(self, timeout: timedelta | None = None) -> bool:
        self._fut.wait()
        return True

    def get_future(self) -> torch.futures.Future[Any]:
        return self._fut


class _LatePG(ProcessGroup):
    """A tiny torchft ProcessGroup whose k-th allreduce really completes after ``delays[k]``."""

    def __init__(self, delays: list[float]) -> None:
        super().__init__(0, 1)
        self.delays = list(delays)

    def allreduce(self, tensors, opts) -> dist._Work:  # noqa: ANN001
        return _LateWork(self.delays.pop(0))

    def errored(self) -> Exception | None:
        return None

    def getBackendName(self) -> str:
        return "late"


def test_a_sends_real_collectives_are_timed_under_the_hold() -> None:
    """``send_real_s``: from ``begin_send`` to the real completion of the send's last collective,
    before the hold (what the event log's ``real_s`` records); a collective of an earlier send
    does not count."""
    inner = _LatePG([0.4, 0.05, 0.15])
    link = LinkEmulator(inner, Link(8e6, 0.1), replicas=2)  # each 4 kB collective holds >= 0.2 s
    assert link.send_real_s() is None
    before = link.allreduce([torch.ones(1000)], _sum_opts())  # issued before the send: never its
    t0 = time.monotonic()
    link.begin_send()
    works = [link.allreduce([torch.ones(1000)], _sum_opts()) for _ in range(2)]
    for w in works:
        w.wait()
    took = time.monotonic() - t0
    real = link.send_real_s()
    assert real is not None and 0.15 <= real <= took
    assert took >= 0.2 > 0.15, "the hold still held the send"
    before.wait()  # completes at 0.4 s, after the send's: its completion is not the send's
    assert link.send_real_s() == real


def test_the_event_log_records_each_syncs_real_collectives(tmp_path) -> None:  # noqa: ANN001
    """The recorder starts the link's timing at each send and writes ``real_s`` at its sync."""
    import types

    from ftrun.worker.recorder import StepRecorder

    class _Link:
        began = 0

        def begin_send(self) -> None:
            self.began += 1

        def send_real_s(self) -> float:
            return 0.0425

    rec, link = StepRecorder(tmp_path / "replica0_rank0.jsonl"), _Link()
    rec.attach_link(link)
    frag = types.SimpleNamespace(original_parameters={"w": torch.ones(2)})
    rec._wrap_send(0, lambda: None)()
    rec._wrap_sync(0, frag, lambda: True)()
    fields = {"manager_step": 0, "manager_step_after": 1, "participants": 2, "quorum_id": 1, "loss": 0.0}
    out = rec.end_step(step=1, step_time_s=0.1, restart=0, **fields)
    rec.close()
    assert (
        link.began == 1
        and out.real_s == 0.0425
        and '"real_s":0.0425' in (tmp_path / "replica0_rank0.jsonl").read_text()
    )
