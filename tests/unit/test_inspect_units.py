"""Unit checks of the inspect building blocks on hand-made spans (no torch, no processes)."""

from __future__ import annotations

from ftrun.check import comm
from ftrun.check.commits import NO_OUTER_STEP, SENT_AGAIN, SyncSeen, infer
from ftrun.check.evidence import ClusterIdentifier, ManifestIdentifier, Signature, restore_signature, send_signature
from ftrun.check.observe import runs
from ftrun.layout import Fragment, Param
from ftrun.schedule import Schedule
from ftrun.trace.spans import Allreduce, Collective, Send, Span, Sync

T, G1, G2 = (1, 1), (1, 2), (1, 3)


def coll(ts, end, shape, tid=G1):
    return Collective("gloo:all_reduce", Span(ts, end, tid), (shape,), 4)


def send(ts, *shapes):
    ars = tuple(Allreduce(Span(ts + i, ts + i + 0.5, T), (s,), ts + i + 0.1) for i, s in enumerate(shapes))
    return Send(Span(ts, ts + len(shapes) + 1, T), ars)


def _frag(i: int, *numels: int) -> Fragment:
    return Fragment(i, [Param(f"p{j}", n, [n]) for j, n in enumerate(numels)], sum(numels), 4 * sum(numels))


FRAGS = [_frag(0, 6, 2), _frag(1, 3, 5), _frag(2, 2, 6), _frag(3, 1, 1, 7)]


def test_signatures_from_shapes_and_counts():
    s = send_signature([((2, 3),), ((2,),)], [4, 4])
    assert (s.count, s.sizes, s.itemsize) == (2, (2, 6), 4)
    assert send_signature([((2, 3),), None]).sizes is None  # one allreduce without sizes: count only
    assert send_signature([None, None, None]).describe() == "3 allreduces"
    assert restore_signature(2, ((5,), (3,))).sizes == (3, 5)
    assert restore_signature(3, None) == Signature("restore", 3, None)
    assert restore_signature(0, None) is None


def test_manifest_identifier_exact_bucketized_count_and_ambiguous():
    m = ManifestIdentifier(FRAGS)
    assert m.identify(Signature("send", 2, (3, 5))).fragment == 1
    amb = m.identify(Signature("send", 2, (2, 6)))
    assert amb.fragment is None and amb.ambiguous and amb.candidates == (0, 2) and not amb.checked
    assert m.candidates(Signature("send", 1, (9,))) == (3,)  # one bucket of fragment 3's total
    assert m.candidates(Signature("send", 2, (4, 5))) == (3,)  # buckets of 5 + remainder 4
    assert m.candidates(Signature("send", 3, (2, 3, 4))) == ()  # sums to 9, but unequal buckets: not torchft's chunking
    assert m.candidates(Signature("restore", 1, (9,))) == ()  # a restore is per parameter, never bucketed
    assert m.identify(Signature("send", 3, None)).fragment == 3  # count only: 3 parameters
    assert m.identify(Signature("send", 2, (3, 5), itemsize=2)).problem  # half precision: not these float32 fragments
    bad = m.identify(Signature("send", 2, (9, 15)))
    assert bad.fragment is None and bad.problem.startswith(
        "2 allreduces of [9, 15] elements match no manifest fragment"
    )
    assert "fragment 1: 2 parameters of [3, 5]" in bad.problem
    # a bucketized run without sizes (Baby process groups): a count of buckets names no fragment
    mb = ManifestIdentifier(FRAGS, bucketized=True)
    one = mb.identify(Signature("send", 1, None))
    assert one.fragment is None and one.ambiguous and one.candidates == tuple(range(len(FRAGS))) and not one.problem
    assert mb.identify(Signature("send", 1, (9,))).fragment == 3  # with sizes the buckets still tell
    assert mb.identify(Signature("restore", 3, None)).fragment == 3  # a restore is per parameter


def test_cluster_identifier_votes_anchor_and_overflow():
    c = ClusterIdentifier(2, with_sizes=True)
    a, b, x = Signature("send", 1, (10,)), Signature("send", 2, (4, 4)), Signature("send", 1, (99,))
    for sig in (a, b, a, b, a, x):
        c.learn_send(sig)
    # the first send (a) anchors; one mutated send expected the other way is outvoted
    for sig, exp in ((a, 1), (b, 0), (a, 1), (b, 0), (a, 0)):
        c.vote(sig, exp)
    c.finish(2)
    assert c.identify(a).fragment == 1 and c.identify(b).fragment == 0
    assert "more distinct signatures (3) than fragments (2)" in c.identify(x).problem
    # a restore joins the send class with its signature, or the class its paired sends had
    c.learn_restore(Signature("restore", 2, (4, 4)), b)
    c.learn_restore(Signature("restore", 3, (3, 3, 4)), a)
    assert c.identify(Signature("restore", 2, (4, 4))).fragment == 0
    assert c.identify(Signature("restore", 3, (3, 3, 4))).fragment == 1
    assert c.same_class(Signature("restore", 3, (3, 3, 4)), a) is True


def test_cluster_identifier_too_few_classes_is_unusable():
    c = ClusterIdentifier(2, with_sizes=False)
    s = Signature("send", 2, None)
    for exp in (0, 1, 0, 1):
        c.learn_send(s)
        c.vote(s, exp)
    c.finish(2)
    i = c.identify(s)
    assert i.fragment is None and not i.checked and i.problem is None
    assert c.unusable.startswith(
        "fragment identity cannot be checked from this trace: 1 distinct allreduce count signature(s)"
    )


def test_failed_commits_inferred_from_the_sync_or_the_rotation():
    sch = Schedule(2, 8, 2)  # w = 4: syncs at 4, 8, ...; sends at 2, 6, ...
    seen = [
        SyncSeen(4, "A", "A", "A", 6),  # fragment A sent again: failed
        SyncSeen(8, "A", "A", "B", 10),  # moved on
        SyncSeen(12, "B", "A", "B", 14),  # send and restore disagree: a mismatch, not a retry
        SyncSeen(16, "B", None, "B", 26),  # next send too far: not the next cycle
        SyncSeen(20, "B", "B", "B", 22, committed=True),  # outer step ran: committed whatever follows
        SyncSeen(24, "B", "B", "A", 26, committed=False),  # no outer step: failed
    ]
    assert infer(seen, sch) == [(4, SENT_AGAIN), (24, NO_OUTER_STEP)]
    assert infer(seen, sch, classes_distinct=False) == [(24, NO_OUTER_STEP)]
    assert infer(seen, Schedule(1, 4, 0)) == [(24, NO_OUTER_STEP)]  # F=1: every send is the same fragment


def test_attribution_prefers_matching_sizes_across_gloo_threads():
    s = send(100, (4, 2), (4,))
    # thread G2 runs the (4,) tensor first; start order alone would mis-attribute
    colls = [coll(101.5, 120, (4,), G2), coll(103, 130, (4, 2), G1), coll(200, 210, (9,), G1)]
    (sc,) = comm.attribute([s], colls)
    assert [c.shapes for _, c in sc.calls] == [((4, 2),), ((4,),)]
    assert sc.complete and sc.done_ts == 130 and sc.numel == 12 and sc.bytes == 48
    assert sc.union_us() == 130 - 101.5


def test_exposed_and_hidden():
    s = send(100, (4,), (2,))
    sync = Sync(Span(150, 190, T), Span(170, 175, T), Span(180, 185, T), Span(185, 189, T), ((4,), (2,)))
    colls = [coll(101, 140, (4,)), coll(180, 181, (2,))]
    (sc,) = comm.attribute([s], colls)
    t = comm.sync_timing(sync, sc, 1)  # serialized collectives: counted by gpu_comm.queueing, passed through
    assert t.serialized_collectives == 1
    assert t.exposed_ms == (175 - 150) / 1000  # perform_sync start -> end of torchft::local_sgd::wait
    assert t.send_to_done_ms == (181 - 100.1) / 1000
    # in flight from 100.1, the send's span ending at 103 (its issuing), the thread waiting from 150
    assert abs(t.issuing_ms - 0.0029) < 1e-9 and abs(t.hidden_ms - 0.047) < 1e-9
    assert t.should_commit_ms == 4 / 1000


def test_hidden_is_what_flew_before_the_wait_even_when_the_sync_blocked_longer():
    s = send(100, (4,))
    sync = Sync(Span(150, 400, T), None, Span(380, 390, T), None, ((4,),))
    (sc,) = comm.attribute([s], [coll(101, 160, (4,))])
    t = comm.sync_timing(sync, sc, 0)
    # waited from 150 on a fragment in flight until 160: done for training when the wait ended
    assert t.exposed_ms == (380 - 150) / 1000 and abs(t.send_to_done_ms - (380 - 100.1) / 1000) < 1e-9
    # in flight before the thread began to wait: while it issued the send (to 102), then hidden
    assert abs(t.issuing_ms - (102 - 100.1) / 1000) < 1e-9 and abs(t.hidden_ms - (150 - 102) / 1000) < 1e-9


def test_link_hold_counts_as_communication():
    s = send(100, (4,))
    hold = Collective("ftrun::link::hold", Span(105, 300, (1, 9)), None, None, hold=True)
    (sc,) = comm.attribute([s], [coll(101, 104, (4,)), hold])
    assert sc.done_ts == 300 and sc.holds == [hold]


def test_failed_commits_explained_by_a_fault_only_near_it():
    from ftrun.check.commits import FailedCommit, explain
    from ftrun.check.fired_faults import FaultMark, FiredFaults

    sch = Schedule(2, 20, 5)
    cs = [FailedCommit(0, 0, s, 0, "event_log") for s in (10, 20, 30, 50, 60)]
    explain(cs, FiredFaults([FaultMark(1, "kill", 25, (25, 31), 32)]), sch)
    # before the faulted replica's last sync before the kill (20): no; from it (a peer may still be
    # reading the faulted replica's part of it) to H steps after the rejoin (32 + 20): yes; later: no
    assert [c.explained for c in cs] == [False, True, True, True, False]
    own = [FailedCommit(1, 0, 20, 0, "event_log")]  # the faulted replica's own sync before its kill: no
    explain(own, FiredFaults([FaultMark(1, "kill", 25, (25, 31), 32)]), sch)
    assert not own[0].explained
    just_after = [FailedCommit(0, 0, 1030, 0, "event_log")]  # a kill at the step right after a sync
    explain(just_after, FiredFaults([FaultMark(6, "kill", 1031, (1031, 1040), 1041)]), sch)
    assert just_after[0].explained
    never = [FailedCommit(0, 0, 200, 0, "inferred")]
    explain(never, FiredFaults([FaultMark(1, "kill", 25, (25, 40), None)]), sch)
    assert never[0].explained


def test_runs():
    assert runs([5, 2, 3, 4, 9, 10, 3]) == [(2, 5), (9, 10)]
