"""ftrun.linkcost: the one cost formula of the emulated link (torch-free, no process)."""

from __future__ import annotations

import pytest

from ftrun import linkcost


@pytest.mark.parametrize(
    "kind, r, steps, frac",
    [
        ("allreduce", 2, 2, 1.0),
        ("allreduce", 4, 6, 1.5),
        ("allreduce", 8, 14, 1.75),
        ("allgather", 4, 3, 0.75),
        ("alltoall", 4, 3, 0.75),
        ("reduce_scatter", 2, 1, 0.5),
        ("broadcast", 3, 2, 1.0),
        ("send", 5, 1, 1.0),
        ("barrier", 3, 4, 0.0),
    ],
)
def test_ring_steps_and_bytes(kind: str, r: int, steps: int, frac: float) -> None:
    assert linkcost.wire(kind, 1000, r) == (steps, pytest.approx(1000 * frac))


def test_alone_nothing_crosses() -> None:
    assert linkcost.collective_s("allreduce", 10**9, 1, 1e6, 1.0) == 0.0


def test_allreduce_of_4_replicas_is_not_one_transfer() -> None:
    # 100 MB, 1 Gbit/s, 20 ms, R=4: 6 x 20 ms + 150 MB * 8 / 1e9 = 0.12 + 1.2 s
    assert linkcost.collective_s("allreduce", 100_000_000, 4, 1e9, 0.02) == pytest.approx(1.32)


def test_control_round_trips() -> None:
    assert linkcost.control_s("quorum", 0.02) == pytest.approx(0.04)
    assert linkcost.control_s("should_commit", 0.02) == 0.0  # a vote inside one replica group


def test_bandwidth_for_inverts_plain_sync() -> None:
    bw = linkcost.bandwidth_for(2.0, 40_000_000, 3, 0.01)
    assert linkcost.plain_sync_s(40_000_000, 3, bw, 0.01) == pytest.approx(2.0)
    # more replicas move more bytes per replica (2(R-1)/R): a faster link is needed for the same time
    assert linkcost.bandwidth_for(2.0, 40_000_000, 8, 0.01) > bw


def test_bandwidth_for_refuses_latency_bound_budget() -> None:
    with pytest.raises(ValueError):
        linkcost.bandwidth_for(0.05, 1000, 2, 0.02)  # quorum 40 ms + 2 steps 40 ms > 50 ms
    with pytest.raises(ValueError):
        linkcost.wire("gather", 1, 2)
