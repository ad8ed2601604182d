"""The check's stages one by one (observe -> identify -> expect/match -> figures -> cross-replica
-> problems), on tests/data/cpu_run (F=2 H=20 tau=5, 2 replicas, steps 21-40 profiled) and on
hand-made observations. No process."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from ftrun.check import commits
from ftrun.check.analyze import analyze
from ftrun.check.cross import cross_replica
from ftrun.check.events import event_results
from ftrun.check.evidence import Identity, send_signature
from ftrun.check.fired_faults import FiredFaults
from ftrun.check.identify import RunIdentities
from ftrun.check.match import WorkerMatch, expect, pair
from ftrun.check.observe import Obs, WorkerObs, observe
from ftrun.check.problems import event_problem, require_evidence
from ftrun.check.result import EVENT_KEYS, EventResult, SendFigures, SyncFigures
from ftrun.check.workers import Worker, assign
from ftrun.errors import NotChecked
from ftrun.schedule import Event, Schedule
from ftrun.trace.discover import discover
from ftrun.trace.spans import Allreduce, Send, Span, StepSpan, Sync, TraceSpans, extract
from ftrun.trace.stream import TraceFile

DATA = Path(__file__).resolve().parent.parent / "data" / "cpu_run"
SCHEDULE = Schedule(2, 20, 5)  # cpu_run's
T = (1, 1)
TRACE = TraceSpans(Path("t.json"), "ftrun", [], [], [], [])


def _workers() -> list[Worker]:
    inputs = discover([DATA])
    spans = [extract(f.path, TraceFile(f.path), require_steps=False) for f in inputs.files]
    return assign(inputs.files, spans)


@pytest.fixture(scope="module")
def staged():
    """cpu_run through the first four stages, as ``analyze`` runs them (no failed commits, no faults)."""
    seen = [observe(w, SCHEDULE.window, 0) for w in _workers()]
    classes = RunIdentities(discover([DATA]).manifest, seen, SCHEDULE)
    matches = [expect(wo, SCHEDULE, [], []) for wo in seen]
    for m in matches:
        m.pairs = pair(m.expected, m.seen.obs, SCHEDULE.window)
    ids = classes.label(seen, [m.pairs for m in matches])
    results, reports = event_results(matches, ids, SCHEDULE)
    return seen, matches, ids, results, reports


def test_observe_places_and_pairs(staged):
    seen = staged[0]
    assert [(wo.worker.replica, wo.ranges) for wo in seen] == [(0, [(21, 40)]), (1, [(21, 40)])]
    for wo in seen:
        assert [(o.kind, o.step) for o in wo.obs] == [("send", 25), ("sync", 30), ("send", 35), ("sync", 40)]
        for o in wo.obs:
            assert o.manager_step is not None and o.sig is not None
            if o.kind == "send":
                assert o.comm is not None and o.queue is not None and o.paired is None
            else:  # the most recent send, tau = 5 steps before
                assert o.paired is not None and o.paired.kind == "send" and o.step - o.paired.step == 5


def _trace(steps: range, sends: list[float], syncs: list[float]) -> TraceSpans:
    """ftrun step spans 10 us apart (step k at 10k .. 10k+9) with sends and syncs at the given times."""
    st = [StepSpan(k, k // 10, Span(10.0 * k, 10.0 * k + 9, T)) for k in steps]
    snd = [Send(Span(ts, ts + 1, T), (Allreduce(Span(ts, ts + 0.5, T), ((4,),), ts),)) for ts in sends]
    syn = [Sync(Span(ts, ts + 1, T), None, None, None, None) for ts in syncs]
    return TraceSpans(Path("t.json"), "ftrun", st, snd, syn, [])


def test_a_sync_pairs_with_the_latest_send_less_than_a_window_before():
    # window 10: the sync at step 12 pairs with the send at step 7; the one at 31 finds the send
    # at 15 more than a window earlier (and the send at 7 already taken): unpaired
    w = Worker(0, 0, "file order", [_trace(range(1, 40), [71.0, 151.0], [121.0, 311.0])])
    got = observe(w, 10, 0)
    assert got.ranges == [(1, 39)]
    assert [(o.kind, o.step, o.manager_step) for o in got.obs] == [
        ("send", 7, 0),
        ("sync", 12, 1),
        ("send", 15, 1),
        ("sync", 31, 3),
    ]
    assert got.obs[1].paired is got.obs[0] and got.obs[3].paired is None
    assert observe(Worker(0, 0, "file order", [_trace(range(1, 40), [], [])]), 10, 0).obs == []


def test_identify_names_each_fragment_from_the_manifest_sizes(staged):
    seen, _, ids, _, _ = staged
    got = {(o.kind, o.step): (ids.of(o).fragment, ids.of(o).evidence) for o in seen[0].obs}
    assert got == {
        ("send", 25): (0, "send sizes"),
        ("sync", 30): (0, "restore sizes"),
        ("send", 35): (1, "send sizes"),
        ("sync", 40): (1, "restore sizes"),
    }


def test_a_sync_without_restore_evidence_takes_its_paired_send_identity():
    """No manifest: the send's class is labelled from the expected schedule; the sync (no
    restore captured) is then identified by the send it waited for."""
    send = Obs("send", 1.0, 5, 0, TRACE, sig=send_signature([((4,),), ((8,),)]))
    sync = Obs("sync", 2.0, 10, 0, TRACE, paired=send)
    wo = WorkerObs(Worker(0, 0, "file order", [TRACE]), [(1, 10)], [send, sync])
    classes = RunIdentities(None, [wo], Schedule(1, 10, 5))
    ids = classes.label([wo], [[(_ev("send", 5), send), (_ev("sync", 10), sync)]])
    assert (ids.of(send).fragment, ids.of(send).evidence) == (0, "send sizes")
    assert (ids.of(sync).fragment, ids.of(sync).evidence) == (0, "paired send")
    lone = Obs("sync", 3.0, 20, 0, TRACE)
    assert ids.of(lone).evidence == "none"  # never labelled: no evidence, never guessed


def _ev(kind: str, step: int, fragment: int = 0) -> Event:
    return Event(step, kind, fragment, 0, 0)


def test_pair_same_step_then_nearest_within_a_window():
    exp = [_ev("send", 5), _ev("sync", 10), _ev("send", 15)]
    o_send, o_sync_late = Obs("send", 1.0, 5, 0, TRACE), Obs("sync", 2.0, 12, 0, TRACE)
    o_extra = Obs("sync", 3.0, 40, 0, TRACE)
    got = pair(exp, [o_send, o_sync_late, o_extra], window=10)
    assert (exp[0], o_send) in got  # same step
    assert (exp[1], o_sync_late) in got  # 2 steps off, within the window
    assert (exp[2], None) in got  # missing
    assert (None, o_extra) in got  # unexpected (30 steps from any expected sync)
    assert len(got) == 4


def test_expect_leaves_out_lost_steps_and_shifts_by_failed_cycles():
    wo = WorkerObs(Worker(0, 0, "file order", [TRACE]), [(1, 40)], [])
    plain = expect(wo, SCHEDULE, [], [])
    got = [(e.kind, e.step, e.fragment) for e in plain.expected][:4]
    assert got == [("send", 5, 0), ("sync", 10, 0), ("send", 15, 1), ("sync", 20, 1)]
    lost = expect(wo, SCHEDULE, [], [(1, 20)])
    assert all(e.step > 20 for e in lost.expected)
    failed = expect(wo, SCHEDULE, [0], [])  # cycle 0's commit failed: fragment 0 is sent again next cycle
    assert [e.fragment for e in failed.expected if e.kind == "send"][:3] == [0, 0, 1]


def test_event_rows_carry_send_or_sync_figures(staged):
    results, reports = staged[3], staged[4]
    assert [r.ok for r in results] == [True] * 8
    for r in results:
        if r.kind == "send":
            assert isinstance(r.send, SendFigures) and r.sync is None
            assert r.send.bytes == 4 * r.send.numel and r.send.collectives == r.send.allreduces > 0
        else:
            assert isinstance(r.sync, SyncFigures) and r.send is None and r.sync.send_captured
            assert r.sync.exposed_data_ms == r.sync.exposed_comm_ms
    t = reports[0].totals
    assert (t.events, t.ok, t.sends, t.syncs) == (4, 4, 2, 2)
    assert t.bytes == sum(r.send.bytes for r in results[:4] if r.send is not None)


def test_json_row_keeps_its_published_keys_in_order(staged):
    """The JSON row is flat and its keys are those it had when it was one 40-field record."""
    published = [
        "replica",
        "rank",
        "kind",
        "fragment",
        "expected_fragment",
        "expected_step",
        "observed_step",
        "ok",
        "problem",
        "notes",
        "evidence",
        "fragment_checked",
        "fragment_candidates",
        "fragment_basis",
        "manager_step",
        "cycle",
        "file",
        "ts_us",
        "allreduces",
        "numel",
        "bytes",
        "collectives",
        "exposed_comm_ms",
        "hidden_comm_ms",
        "send_to_done_ms",
        "comm_union_ms",
        "should_commit_ms",
        "exposed_data_ms",
        "exposed_control_ms",
        "quorum_ms",
        "serialized",
        "serialized_collectives",
        "send_captured",
        "queue_delay_ms",
        "queue_cause",
        "commit_sync_ms",
        "issuing_comm_ms",
    ]
    assert list(EVENT_KEYS) == published
    results = staged[3]
    send, sync = msgspec.to_builtins(results[0].row()), msgspec.to_builtins(results[1].row())
    assert list(send) == list(sync) == published
    assert send["bytes"] == results[0].send.bytes and send["exposed_comm_ms"] is None
    assert sync["exposed_comm_ms"] == results[1].sync.exposed_comm_ms and sync["bytes"] is None
    missing = msgspec.to_builtins(EventResult(0, 0, "send", None, 0, 5, None, False).row())
    assert all(missing[k] is None for k in published[17:])
    json.dumps(analyze([DATA]).to_json())  # JSON-ready


def test_cross_replica_flags_a_worker_missing_an_event():
    def m(replica: int) -> WorkerMatch:
        return WorkerMatch(WorkerObs(Worker(replica, 0, "file order", [TRACE]), [(1, 20)], []), [], [], [])

    row = dict(kind="send", expected_fragment=0, expected_step=5, ok=True, manager_step=0)
    both = [EventResult(replica=r, rank=0, fragment=0, observed_step=5, **row) for r in (0, 1)]
    (cc,) = cross_replica([m(0), m(1)], both)
    assert cc.ok and cc.fragments == {"0/0": 0, "1/0": 0} and cc.problem is None
    (cc,) = cross_replica([m(0), m(1)], both[:1])
    assert not cc.ok and cc.fragments == {"0/0": 0, "1/0": None}
    assert cc.problem == (
        "replicas disagree on the send at step 5 (manager step 0): replica 0 rank 0: fragment 0, replica 1 rank 0: none"
    )
    other = [both[0], EventResult(replica=1, rank=0, fragment=1, observed_step=5, **row)]
    assert "fragment 1" in cross_replica([m(0), m(1)], other)[0].problem
    assert cross_replica([m(0)], both[:1]) == []  # one worker: nothing to compare


def test_event_problem_names_what_is_wrong():
    e, o = _ev("send", 5), Obs("send", 1.0, 6, 0, TRACE)
    ok = Identity(0, (0,), "send sizes")
    assert event_problem("send", e, Obs("send", 1.0, 5, 0, TRACE), ok) is None
    assert event_problem("send", e, o, ok) == "send of fragment 0 expected at step 5, observed at step 6"
    assert event_problem("send", None, o, ok) == "unexpected send (fragment 0) at step 6"
    assert event_problem("send", e, None, None) == "send of fragment 0 missing at step 5"
    other = Identity(1, (1,), "send sizes")
    at5 = Obs("send", 1.0, 5, 0, TRACE)
    assert event_problem("send", e, at5, other) == "send at step 5: fragment 1, expected fragment 0"
    unknown = Identity(None, (0, 1), "send count", ambiguous=True)
    assert event_problem("send", e, at5, unknown) is None  # ambiguous: not checked, not failed


def test_nothing_observed_is_not_checked():
    empty = WorkerObs(Worker(0, 0, "file order", [TRACE]), [(1, 10)], [])
    with pytest.raises(NotChecked):
        require_evidence([empty], [EventResult(0, 0, "send", None, 0, 5, None, False)])
    with pytest.raises(NotChecked):
        require_evidence([], [])


def test_failed_cycles_skip_what_a_heal_or_a_lost_step_explains():
    sch = SCHEDULE
    fc = [commits.FailedCommit(0, 0, 30, 0, "event_log", "commit: false")]
    assert commits.failed_cycles(0, fc, FiredFaults(), sch) == [sch.cycle_of(30)]
    assert commits.failed_cycles(0, fc, FiredFaults(), sch, heals={0: [31]}) == []  # healed past it
    assert commits.failed_cycles(1, fc, FiredFaults(), sch) == []  # another replica's
