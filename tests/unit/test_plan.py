"""ftrun.plan: the what-if timeline model, against hand-computed timelines (torch-free, no process).

The reference case: step 100 ms, R = 2, a link of 8 Mbit/s and 10 ms. An allreduce of B bytes
across 2 replicas puts B bytes on this replica's wire (2(R-1)/R = 1) and takes 2 latency steps,
so 100 kB cost 0.1 s + 20 ms = 120 ms; the quorum holds one round trip, 20 ms.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from ftrun import linkcost
from ftrun.plan import (
    Workload,
    data_hidden_bandwidth,
    hiding_bandwidth,
    plain,
    simulate,
    smallest_fragment_sync_delay,
    smallest_fragments,
)
from ftrun.schedule import Schedule

BW, LAT = 8e6, 0.01
TWO_FRAGS = Workload(0.1, (100_000, 100_000), 2)


def test_tau_zero_exposes_the_whole_allreduce() -> None:
    # plain DiLoCo, H=10, 1 MB: per sync 1.0 s of wire + 20 ms latency exposed, 20 ms of quorum
    p = simulate(Workload(0.1, (1_000_000,), 2), Schedule(1, 10, 0), BW, LAT, steps=20)
    assert p.syncs == 2
    assert p.exposed_data_s == pytest.approx(2 * 1.02)
    assert p.exposed_control_s == pytest.approx(2 * 0.02)
    assert p.wall_s == pytest.approx(2.0 + 2 * 1.04)
    assert p.utilisation == pytest.approx(2.0 / 4.08)
    assert p.as_dict()["exposed_ms_per_sync"] == pytest.approx(1040.0)


@pytest.mark.parametrize("tau, exposed_per_sync", [(0, 0.12), (1, 0.02), (2, 0.0), (9, 0.0)])
def test_a_sync_blocks_for_what_is_left_tau_steps_after_the_send(tau: int, exposed_per_sync: float) -> None:
    # each 100 kB fragment needs 120 ms; tau steps of 100 ms hide that much of it
    p = simulate(TWO_FRAGS, Schedule(2, 20, tau), BW, LAT, steps=40)
    assert p.syncs == 4
    assert p.exposed_data_s == pytest.approx(4 * exposed_per_sync, abs=1e-9)
    assert p.exposed_control_s == pytest.approx(4 * 0.02)


def test_a_fast_enough_link_hides_all_data() -> None:
    p = simulate(TWO_FRAGS, Schedule(2, 20, 5), 1e9, 0.001, steps=40)
    assert p.exposed_data_s == 0.0
    assert p.utilisation == pytest.approx(4.0 / (4.0 + 4 * 0.002))  # only the quorum's round trips remain


def test_alone_nothing_crosses_the_link() -> None:
    p = simulate(Workload(0.1, (10**9,), 1), Schedule(1, 10, 0), 1e3, LAT, steps=20)
    assert p.exposed_data_s == 0.0 and p.bits_on_wire == 0.0 and p.peak_bandwidth_bps == 0.0
    # the emulator still holds each quorum by its round trip (hold_control does not look at R)
    assert p.exposed_control_s == pytest.approx(2 * 0.02)


def test_more_replicas_move_more_bytes_and_more_latency_steps() -> None:
    # R = 4: 2(R-1)/R = 1.5 x 1 MB = 1.5 s of wire, 6 latency steps = 60 ms
    p = simulate(Workload(0.1, (1_000_000,), 4), Schedule(1, 10, 0), BW, LAT, steps=10)
    assert p.exposed_data_s == pytest.approx(1.56)


def test_sends_issued_together_queue_on_the_uplink() -> None:
    # two 1 MB allreduces issued at t=0 on one 8 Mbit/s uplink: the second waits for the first
    free, first = linkcost.enqueue(0.0, 0.0, "allreduce", 1_000_000, 2, BW, LAT)
    free, second = linkcost.enqueue(free, 0.0, "allreduce", 1_000_000, 2, BW, LAT)
    assert (first, second) == (pytest.approx(1.02), pytest.approx(2.02))
    # issued after the link drained: no wait
    assert linkcost.enqueue(free, 5.0, "allreduce", 1_000_000, 2, BW, LAT)[1] == pytest.approx(6.02)


def test_per_parameter_allreduces_queue_to_the_same_end_as_one_fragment_allreduce() -> None:
    # torchft issues one allreduce per parameter; queued, the last ends when one big one would
    free = 0.0
    for nbytes in (10_000, 250_000, 40_000, 700_000):
        free, done = linkcost.enqueue(free, 0.0, "allreduce", nbytes, 2, BW, LAT)
    p = simulate(Workload(0.1, (1_000_000,), 2), Schedule(1, 10, 0), BW, LAT, steps=10)
    assert p.exposed_data_s == pytest.approx(done)


def test_uneven_fragments_expose_their_own_bytes() -> None:
    # fragments of 100 kB and 300 kB, tau=1 (100 ms hidden): 20 ms and 220 ms exposed
    p = simulate(Workload(0.1, (100_000, 300_000), 2), Schedule(2, 20, 1), BW, LAT, steps=20)
    assert p.exposed_data_s == pytest.approx(0.02 + 0.22)


def test_smallest_fragment_sync_delay_and_fragments() -> None:
    # 20 steps, 2 syncs: tau=1 exposes 2 x 20 ms (util 2/2.08 = 96.2%), tau=2 nothing (2/2.04 = 98.0%)
    assert smallest_fragment_sync_delay(TWO_FRAGS, 2, 20, BW, LAT, 0.95, steps=20) == 1
    assert smallest_fragment_sync_delay(TWO_FRAGS, 2, 20, BW, LAT, 0.97, steps=20) == 2
    assert smallest_fragment_sync_delay(TWO_FRAGS, 2, 20, BW, LAT, 0.99, steps=20) is None  # the quorum alone costs 2%
    # F=1: one 200 kB allreduce (220 ms), one sync in 20 steps; tau=2 leaves 20 ms: 2/2.04 = 98%
    assert smallest_fragments(TWO_FRAGS, 20, BW, LAT, 0.97, steps=20) == (1, 2)
    # at 1 Mbit/s it takes 1.62 s: tau=16 leaves 20 ms, tau=15 120 ms (2/2.14 < 97%)
    assert smallest_fragments(TWO_FRAGS, 20, 1e6, LAT, 0.97, steps=20) == (1, 16)


def test_hiding_bandwidth_is_where_utilisation_reaches_the_target() -> None:
    # F=2 tau=5, 2 syncs in 20 steps: 98% leaves 0.8 ms beyond the 40 ms of quorums, so each
    # 0.8 Mbit fragment must fit in 500 ms - 20 ms of latency (+0.4 ms): ~1.665 Mbit/s
    assert hiding_bandwidth(TWO_FRAGS, Schedule(2, 20, 5), LAT, 0.98, 1e5, 1e12, steps=20) == pytest.approx(
        0.8e6 / 0.480408, rel=0.011
    )
    # plain: one sync exposes 1.6 Mbit + 20 ms + a 20 ms quorum: 98% needs 1.6 Mbit in 0.82 ms
    assert hiding_bandwidth(TWO_FRAGS, plain(Schedule(2, 20, 5)), LAT, 0.98, 1e5, 1e12, steps=20) == pytest.approx(
        1.6e6 / 0.000816, rel=0.011
    )
    # 99% is out of reach at any bandwidth: the latency terms alone cost 2%
    assert hiding_bandwidth(TWO_FRAGS, plain(Schedule(2, 20, 5)), LAT, 0.99, 1e5, 1e12, steps=20) is None
    # already reached at the low end: the low end is returned
    assert hiding_bandwidth(TWO_FRAGS, Schedule(2, 20, 5), LAT, 0.98, 2e6, 1e12, steps=20) == 2e6


def test_data_hidden_bandwidth_is_where_no_sync_waits() -> None:
    # each 0.8 Mbit fragment must arrive within 5 steps (500 ms) minus 20 ms of latency: 1.667 Mbit/s
    assert data_hidden_bandwidth(TWO_FRAGS, Schedule(2, 20, 5), LAT, 1e5, 1e12) == pytest.approx(
        0.8e6 / 0.48, rel=0.011
    )
    assert data_hidden_bandwidth(TWO_FRAGS, plain(Schedule(2, 20, 5)), LAT, 1e5, 1e12) is None  # tau=0 always waits


def test_even_split_for_another_fragment_count() -> None:
    assert Workload(0.1, (3, 4), 2).split(3).fragment_bytes == (3, 2, 2)
    assert Workload(0.1, (3, 4), 2).split(2).fragment_bytes == (3, 4)  # the run's own split kept


def test_bandwidths_report_bits_over_time() -> None:
    # plain, 1 MB, R=2: 8 Mbit per sync; mean over the wall time, peak over the send's 1.02 s
    p = simulate(Workload(0.1, (1_000_000,), 2), Schedule(1, 10, 0), BW, LAT, steps=10)
    assert p.mean_bandwidth_bps == pytest.approx(8e6 / (1.0 + 1.04))
    assert p.peak_bandwidth_bps == pytest.approx(8e6 / 1.02)


configs = st.tuples(
    st.floats(0.001, 1.0),  # step s
    st.lists(st.integers(0, 10**8), min_size=4, max_size=4),  # fragment bytes (F = 4)
    st.integers(1, 8),  # replicas
    st.integers(0, 4),  # tau (w = 5)
    st.floats(1e4, 1e11),  # bandwidth
    st.floats(0.0, 0.2),  # latency
)


@settings(max_examples=200, deadline=None)
@given(configs)
def test_exposed_is_within_the_communication(cfg) -> None:
    step, frags, r, tau, bw, lat = cfg
    p = simulate(Workload(step, tuple(frags), r), Schedule(4, 20, tau), bw, lat, steps=40)
    assert p.exposed_s <= p.comm_s + 1e-9
    assert p.wall_s == pytest.approx(p.compute_s + p.exposed_s)


@settings(max_examples=200, deadline=None)
@given(configs, st.floats(1.01, 100.0))
def test_monotone_in_bandwidth_and_tau(cfg, faster) -> None:
    step, frags, r, tau, bw, lat = cfg
    work = Workload(step, tuple(frags), r)
    base = simulate(work, Schedule(4, 20, tau), bw, lat, steps=40)
    assert simulate(work, Schedule(4, 20, tau), bw * faster, lat, steps=40).exposed_s <= base.exposed_s + 1e-9
    if tau < 4:
        assert simulate(work, Schedule(4, 20, tau + 1), bw, lat, steps=40).exposed_data_s <= base.exposed_data_s + 1e-9


@settings(max_examples=100, deadline=None)
@given(configs, st.floats(0.5, 0.999))
def test_smallest_fragment_sync_delay_is_the_first_tau_that_reaches_the_target(cfg, target) -> None:
    step, frags, r, _, bw, lat = cfg
    work = Workload(step, tuple(frags), r)
    scan = [t for t in range(5) if simulate(work, Schedule(4, 20, t), bw, lat).utilisation >= target]
    assert smallest_fragment_sync_delay(work, 4, 20, bw, lat, target) == (scan[0] if scan else None)


@settings(max_examples=100, deadline=None)
@given(configs)
def test_one_round_is_the_steady_state(cfg) -> None:
    step, frags, r, tau, bw, lat = cfg
    work = Workload(step, tuple(frags), r)
    one, many = simulate(work, Schedule(4, 20, tau), bw, lat), simulate(work, Schedule(4, 20, tau), bw, lat, steps=100)
    assert one.steps == 20 and many.syncs == 5 * one.syncs
    assert many.utilisation == pytest.approx(one.utilisation)
    assert many.as_dict()["exposed_ms_per_sync"] == pytest.approx(one.as_dict()["exposed_ms_per_sync"])


# --- what a quorum waits for: the slower groups' arrival -----------------------------------


def test_expected_max_of_normals() -> None:
    from ftrun.plan import expected_max

    assert expected_max([0.0, 3.0], 0.0) == 3.0
    assert expected_max([1.0], 5.0) == 1.0
    # two iid N(0, 1): E[max] = 1/sqrt(pi); far apart: the larger mean
    assert expected_max([0.0, 0.0], 1.0) == pytest.approx(1 / 3.141592653589793**0.5, rel=1e-3)
    assert expected_max([0.0, 100.0], 1.0) == pytest.approx(100.0, rel=1e-6)
    # three iid N(0, 1): 3 / (2 sqrt(pi))
    assert expected_max([0.0, 0.0, 0.0], 2.0) == pytest.approx(2 * 3 / (2 * 3.141592653589793**0.5), rel=1e-3)


def test_a_group_that_is_slower_per_step_makes_the_other_wait_at_each_quorum() -> None:
    # R=2, one group 2 ms a step slower than the mean, the other 2 ms faster: after the 10 steps
    # between quorums of plain DiLoCo (H=10) the slow one arrives 40 ms after the fast one, and
    # the mean group waits 20 ms (max - mean) on top of the held round trip
    work = Workload(0.1, (1_000_000,), 2, bias_s=(0.002, -0.002))
    p = simulate(work, Schedule(1, 10, 0), BW, LAT, steps=20)
    assert p.exposed_control_s == pytest.approx(2 * (0.02 + 0.02))
    assert p.exposed_data_s == pytest.approx(2 * 1.02)  # the data plane is unchanged


def test_jitter_grows_with_the_steps_between_alignments() -> None:
    # iid per-step noise of 10 ms per group: after n steps each group is N(0, n 1e-4); for R=2
    # the mean group waits sd / sqrt(pi). Plain H=10: every quorum after 10 steps.
    sd10 = 0.01 * 10**0.5
    p = simulate(Workload(0.1, (1_000,), 2, jitter_s=0.01), Schedule(1, 10, 0), 1e12, 0.0, steps=30)
    assert p.exposed_control_s == pytest.approx(3 * sd10 / 3.141592653589793**0.5, rel=1e-3)
    # streaming F=2 H=20 tau=5 on a fast link: the first quorum after 5 steps, later ones after 10
    # (a sync that does not block does not align the groups)
    s = simulate(Workload(0.1, (1_000, 1_000), 2, jitter_s=0.01), Schedule(2, 20, 5), 1e12, 0.0, steps=40)
    assert s.exposed_control_s == pytest.approx((0.01 * 5**0.5 + 3 * sd10) / 3.141592653589793**0.5, rel=1e-3)
    # on a slow link every sync blocks on the same allreduce, which aligns the groups: 5 steps each
    slow = simulate(Workload(0.1, (100_000, 100_000), 2, jitter_s=0.01), Schedule(2, 20, 5), 1e6, 0.0, steps=40)
    assert slow.exposed_data_s > 0
    assert slow.exposed_control_s == pytest.approx(4 * 0.01 * 5**0.5 / 3.141592653589793**0.5, rel=1e-3)


def test_stalls_and_the_lighthouse_reply_add_to_the_quorum() -> None:
    # group 0 stalls 50 ms before step 3 (group 1 50 ms less: relative to the mean), and the
    # lighthouse takes 3 ms: the first quorum (step 5) waits 50 + 3 ms + the round trip
    work = Workload(0.1, (1_000, 1_000), 2, stalls=((3, (0.05, -0.05)),), rpc_s=0.003)
    p = simulate(work, Schedule(2, 20, 5), 1e12, LAT, steps=10)
    assert p.exposed_control_s == pytest.approx(0.05 + 0.003 + 0.02)
    # the stall is outside the steps: compute and wall time are the steps' (as steps/s counts them)
    assert p.compute_s == pytest.approx(1.0)


def test_another_replica_count_drops_per_group_measurements() -> None:
    work = Workload(0.1, (1,), 2, bias_s=(0.001, -0.001), jitter_s=0.004, stalls=((1, (0.1, -0.1)),), rpc_s=0.002)
    four = work.with_replicas(4)
    assert (four.replicas, four.bias_s, four.stalls, four.jitter_s, four.rpc_s) == (4, (), (), 0.004, 0.002)
    assert work.split(2).jitter_s == 0.004 and work.split(2).stalls == work.stalls


# --- data-parallel: an allreduce every step, overlapping the backward pass -----------------


def test_data_parallel_allreduce_overlaps_the_backward_pass() -> None:
    from ftrun.plan import BACKWARD_SHARE, simulate_data_parallel

    # step 300 ms: the gradients' allreduce starts after the 100 ms forward; 1 MB at 8 Mbit/s
    # and 10 ms (R=2): 1.02 s, of which the 200 ms backward hides 200 ms
    p = simulate_data_parallel(Workload(0.3, (1,), 2), 1_000_000, BW, LAT, steps=3)
    assert BACKWARD_SHARE == pytest.approx(2 / 3)
    assert p.syncs == 3 and p.exposed_data_s == pytest.approx(3 * 0.82)
    assert p.exposed_control_s == 0.0 and p.bits_on_wire == pytest.approx(3 * 8e6)
    # fast enough: all hidden; alone: nothing crosses
    assert simulate_data_parallel(Workload(0.3, (1,), 2), 1_000_000, 1e9, 0.0).exposed_s == 0.0
    assert simulate_data_parallel(Workload(0.3, (1,), 1), 1_000_000, 1e3, LAT).exposed_s == 0.0


def test_a_group_that_arrives_early_at_the_sync_waits_longer_for_its_data() -> None:
    from ftrun.plan import expected_shortfall

    assert expected_shortfall(0.3, 0.0) == 0.3 and expected_shortfall(-0.3, 0.0) == 0.0
    assert expected_shortfall(0.0, 1.0) == pytest.approx(1 / (2 * 3.141592653589793) ** 0.5)
    # streaming F=2 H=20 tau=1: each 100 kB fragment needs 120 ms, the one step after the send
    # 100 ms: 20 ms exposed without jitter; with 50 ms of per-step jitter the groups are
    # N(0, 50 ms) apart at the sync and wait E[max(0, 20 ms - X)] on average: more
    calm = simulate(TWO_FRAGS, Schedule(2, 20, 1), BW, LAT, steps=20)
    noisy = simulate(Workload(0.1, (100_000, 100_000), 2, jitter_s=0.05), Schedule(2, 20, 1), BW, LAT, steps=20)
    assert calm.exposed_data_s == pytest.approx(2 * 0.02)
    assert noisy.exposed_data_s == pytest.approx(2 * expected_shortfall(0.02, 0.05))
