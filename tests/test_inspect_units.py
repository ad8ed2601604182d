"""Unit checks of the inspect building blocks on hand-made spans (no torch, no processes)."""

from __future__ import annotations

from ftrun.check import comm
from ftrun.check.analyze import runs
from ftrun.check.evidence import GroupingMatcher, ManifestMatcher, identify
from ftrun.trace.spans import Allreduce, Collective, Send, Span, Sync

T, G1, G2 = (1, 1), (1, 2), (1, 3)


def coll(ts, end, shape, tid=G1):
    return Collective("gloo:all_reduce", Span(ts, end, tid), (shape,), 4)


def send(ts, *shapes):
    ars = tuple(Allreduce(Span(ts + i, ts + i + 0.5, T), (s,), None, ts + i + 0.1) for i, s in enumerate(shapes))
    return Send(Span(ts, ts + len(shapes) + 1, T), ars)


def test_manifest_matcher_exact_bucketized_and_ambiguous():
    frags = [
        {"id": 0, "params": [{"numel": 6}, {"numel": 2}], "numel": 8},
        {"id": 1, "params": [{"numel": 3}, {"numel": 5}], "numel": 8},
        {"id": 2, "params": [{"numel": 2}, {"numel": 6}], "numel": 8},
    ]
    m = ManifestMatcher(frags)
    assert m.candidates((2, 6)) == (0, 2)  # same sizes: ambiguous
    assert m.candidates((5, 3)) == (1,)
    assert m.candidates((8,)) == (0, 1, 2)  # one bucket of the total
    assert m.candidates((7,)) == ()
    i = identify(m.candidates((2, 6)), "send sizes", (2, 6), expected=2)
    assert i.fragment == 2 and i.ambiguous and "ambiguous" in i.note
    assert identify((), "send sizes", (7,), 0).note == "sizes [7] match no fragment"


def test_grouping_matcher_majority_anchor_and_overflow():
    g = GroupingMatcher(2)
    # first observed send (sizes total 10) was expected to be fragment 1: it anchors at 1
    for numels, exp in [((10,), 1), ((4, 4), 0), ((10,), 1), ((4, 4), 0), ((10,), 0)]:
        g.learn(numels, exp)
    g.learn((99,), None)
    g.finish(2)
    assert g.candidates((10,)) == (1,) and g.candidates((8,)) == (0,)
    assert g.candidates((99,)) == ()  # a third signature with two fragments: inconsistent


def test_grouping_matcher_identical_signatures_are_ambiguous():
    g = GroupingMatcher(2)
    for exp in (0, 1, 0, 1):
        g.learn((3, 3), exp)
    g.finish(2)
    assert g.candidates((3, 3)) == (0, 1)


def test_attribution_prefers_matching_sizes_across_gloo_threads():
    s = send(100, (4, 2), (4,))
    # thread G2 runs the (4,) tensor first; start order alone would mis-attribute
    colls = [coll(101.5, 120, (4,), G2), coll(103, 130, (4, 2), G1), coll(200, 210, (9,), G1)]
    (sc,) = comm.attribute([s], colls)
    assert [c.shapes for _, c in sc.calls] == [((4, 2),), ((4,),)]
    assert sc.complete and sc.done_ts == 130 and sc.numel == 12 and sc.bytes == 48
    assert sc.union_us() == 130 - 101.5


def test_exposed_hidden_and_serialization():
    s = send(100, (4,), (2,))
    sync = Sync(Span(150, 190, T), Span(170, 175, T), Span(180, 185, T), Span(185, 189, T), ((4,), (2,)))
    # second collective starts only after the first ended and after the sync's wait ended
    colls = [coll(101, 140, (4,)), coll(180, 181, (2,))]
    (sc,) = comm.attribute([s], colls)
    n = comm.serialized(sc, colls, comm.wait_ends([sync]), step_of=lambda ts: 1)
    assert n == 1
    t = comm.sync_timing(sync, sc, n)
    assert t.exposed_ms == (180 - 150) / 1000  # perform_sync start -> restore_parameters start
    assert t.send_to_done_ms == (181 - 100.1) / 1000
    assert t.hidden_ms == max(0.0, t.send_to_done_ms - t.exposed_ms)
    assert t.should_commit_ms == 4 / 1000
    # the same collective in another step is not serialized behind that wait
    later = [coll(101, 140, (4,)), coll(182, 183, (2,))]
    (sc2,) = comm.attribute([s], later)
    assert comm.serialized(sc2, later, comm.wait_ends([sync]), step_of=lambda ts: 1 if ts < 181 else 2) == 0


def test_link_hold_counts_as_communication():
    s = send(100, (4,))
    hold = Collective("ftrun::link::hold", Span(105, 300, (1, 9)), None, None, hold=True)
    (sc,) = comm.attribute([s], [coll(101, 104, (4,)), hold])
    assert sc.done_ts == 300 and sc.holds == [hold]


def test_runs():
    assert runs([5, 2, 3, 4, 9, 10, 3]) == [(2, 5), (9, 10)]
