"""The recovery breakdown (``ftrun.check.recovery``) from hand-made event logs: every phase from
its own records, overlap counted once, gaps unaccounted, a missing phase said (not guessed).
Unit tests: no process."""

from __future__ import annotations

import msgspec
import pytest

from ftrun import layout
from ftrun.check.recovery import PHASES, breakdown
from ftrun.layout import EventRecord, LifecycleEvent, Quorum
from ftrun.torchft_compat import LABELS
from train_fixtures import event_record

T0 = 1000.0


def rec(step, t, *, commit=None, quorums=(), participants=3, quorum_s=None, restart=0):
    extra = {"quorum_s": quorum_s} if quorum_s is not None else {}
    fields = dict(participants=participants, loss=1.0, step_time_s=0.1, restart=restart, commit=commit, t=t)
    return EventRecord(**event_record(step, **fields, quorums=list(quorums) or msgspec.UNSET, **extra))


def q(qid, participants, t, heal=False, src=None):
    return Quorum(quorum_id=qid, participants=participants, replica_rank=0, max_step=1, heal=heal, heal_source=src, t=t)


def manifest(restart=True, incarnation=True):
    relaunched = {"event": "restart", "t": T0 + 0.2, "replica": 1, **({"incarnation": 1} if incarnation else {})}
    events = [
        {"event": "group_exit", "t": T0 + 0.1, "replica": 1, "code": -9},
        *([relaunched] if restart else []),
    ]
    return msgspec.convert(
        {
            "ftrun_version": "x",
            "job_id": "j",
            "run_name": "r",
            "config": {"timeouts": {"heartbeat_timeout_ms": 2000}},
            "versions": {},
            "backend": "gloo",
            "replicas": 3,
            "schedule": {"fragments": 2, "sync_every": 20, "fragment_sync_delay": 5, "steps": 60},
            "traces": [],
            "run_events": events,
            "faults": {
                "planned": [],
                "fired": [{"replica": 1, "step": 15, "action": "kill", "fired_at": T0, "fired_step": 15}],
                "max_restarts": 1 if restart else 0,
            },
        },
        layout.Manifest,
    )


def survivor(r):
    return [rec(14, T0 - 0.5 + 0.1 * i) for i in range(5)] + [
        rec(15, T0 + 2.0, quorums=[q(2, [0, 2], T0 + 2.0)], participants=2, quorum_s=2.0),
        rec(16, T0 + 3.0, participants=2, commit=True),
        rec(25, T0 + 5.01, quorums=[q(3, [0, 1, 2], T0 + 5.0)], quorum_s=1.0),
        rec(30, T0 + 6.0, commit=True),
    ]


def lifecycles(heal=True):
    r1 = [
        LifecycleEvent("start", 0, T0 - 50, T0 - 50),  # the first incarnation: before the fault, ignored
        LifecycleEvent("start", 1, T0 + 1.0, T0 + 1.0),
        LifecycleEvent("manager_up", 1, T0 + 2.5, T0 + 3.0),
        LifecycleEvent("configure", 1, T0 + 5.05, T0 + 5.25, quorum_id=3),
    ]
    r0 = [LifecycleEvent("configure", 0, T0 + 5.05, T0 + 5.2, quorum_id=3)]
    if heal:
        r1.append(LifecycleEvent("recv_checkpoint", 1, T0 + 5.3, T0 + 5.5, bytes=1000, peers=[0]))
        r0.append(LifecycleEvent("send_checkpoint", 0, T0 + 5.26, T0 + 5.27, bytes=1000, peers=[1]))
    return {0: r0, 1: r1, 2: []}


def healer(heal=True):
    return [
        rec(14, T0 - 0.2),
        rec(None, T0 + 4.0, restart=1, participants=None),
        rec(25, T0 + 5.6, restart=1, quorums=[q(3, [0, 1, 2], T0 + 5.0, heal=heal, src=0 if heal else None)]),
        rec(30, T0 + 6.0, restart=1, commit=True),
    ]


def logs(heal=True):
    return {(0, 0): survivor(0), (1, 0): healer(heal), (2, 0): survivor(2)}


def test_every_phase_from_its_own_records_overlap_once_and_the_gap_unaccounted() -> None:
    (x,) = breakdown(manifest(), logs(), lifecycles())
    assert x.fault == "kill 1@15" and x.replica == 1
    assert x.total_s == pytest.approx(6.0)
    assert x.spans["detect"] == (T0, T0 + 2.0)
    assert x.spans["relaunch"] == (T0 + 0.2, T0 + 3.0)  # launcher start -> manager up
    # detect and relaunch overlap in 0.2..2.0: counted once, for the group's own chain (relaunch)
    want = {"detect": 0.2, "relaunch": 2.8, "join": 2.0, "reconfigure": 0.2, "heal": 0.2, "catch_up": 0.5}
    assert x.phases == pytest.approx(want)
    assert x.unaccounted_s == pytest.approx(0.1)  # 5.0-5.05 (quorum -> configure) and 5.25-5.3
    assert sum(x.phases.values()) + x.unaccounted_s == pytest.approx(x.total_s)
    assert x.covered and x.largest_phase == "relaunch"
    assert (x.heal_bytes, x.heal_bytes_sent, x.heal_source) == (1000, 1000, 0)
    assert x.heal_rate_bps == pytest.approx(1000 * 8 / 0.2)
    assert x.reconfigure_participants == pytest.approx({0: 0.15, 1: 0.2})
    assert "waited 2.00 s" in x.detect_bound and "heartbeat timeout" in x.detect_bound
    assert x.survivors is not None and (x.survivors.steps_without_group, x.survivors.failed_commits) == (2, 0)
    assert set(x.sources.values()) == {"event log"} and set(x.sources) == set(PHASES)
    assert x.relaunch_detail == pytest.approx({"launcher_to_rank_s": 0.8, "rank_to_manager_s": 1.5, "manager_s": 0.5})
    d = x.record()
    assert set(d.phases) == set(PHASES) and d.heal_source == 0 and d.total_s == 6.0
    assert d.spans["detect"] == (0.0, 2.0)  # seconds after the fault


def test_a_restart_without_its_incarnation_keeps_the_groups_lifecycle_after_the_fault() -> None:
    # a run log that does not name the incarnation (hand-made, or another writer's): the group's
    # lifecycle records after the fault are its relaunch's, not dropped for want of a number
    (want,) = breakdown(manifest(), logs(), lifecycles())
    (x,) = breakdown(manifest(incarnation=False), logs(), lifecycles())
    assert x.spans == want.spans and x.phases == pytest.approx(want.phases)
    assert x.spans["relaunch"] == (T0 + 0.2, T0 + 3.0) and "relaunch" not in x.reasons
    assert x.relaunch_detail == pytest.approx(want.relaunch_detail)
    # without manager_up the reason still reads (no "incarnation <unset>")
    life = lifecycles()
    life[1] = [e for e in life[1] if e.event != "manager_up"]
    (y,) = breakdown(manifest(incarnation=False), logs(), life)
    assert y.reasons["relaunch"] == "relaunched but no manager_up in its lifecycle log"


def test_traced_spans_are_preferred_and_said() -> None:
    traced = {(1, 1): {LABELS.pg_configure: [(T0 + 5.06, T0 + 5.24)], LABELS.recv_checkpoint: [(T0 + 5.31, T0 + 5.49)]}}
    (x,) = breakdown(manifest(), logs(), lifecycles(), traced)
    assert x.spans["reconfigure"] == (T0 + 5.06, T0 + 5.24) and x.spans["heal"] == (T0 + 5.31, T0 + 5.49)
    assert x.sources["reconfigure"] == x.sources["heal"] == "trace"
    assert x.spans["catch_up"] == (T0 + 5.49, T0 + 6.0)


def test_a_phase_that_did_not_happen_is_none_with_its_reason() -> None:
    (x,) = breakdown(manifest(), logs(heal=False), lifecycles(heal=False))
    assert x.phases["heal"] is None and x.spans["heal"] is None
    assert "did not ask this group to heal" in x.reasons["heal"]
    assert x.heal_bytes is None and x.heal_source is None
    # catch-up starts where the last phase that happened ended (the configure), not at a guess
    assert x.spans["catch_up"] == (T0 + 5.25, T0 + 6.0)
    assert x.phases["catch_up"] == pytest.approx(0.75)
    assert "heal: no heal" in x.text


def test_not_relaunched_and_never_back() -> None:
    lg = logs()
    lg[(1, 0)] = lg[(1, 0)][:1]  # nothing after the fault
    (x,) = breakdown(manifest(restart=False), lg, {0: [], 1: [], 2: []})
    assert x.total_s is None and x.unaccounted_s is None
    assert x.phases["detect"] == pytest.approx(2.0)  # no total to account against: its own length
    assert x.spans["detect"] == (T0, T0 + 2.0)
    assert x.phases["relaunch"] is None
    assert "not relaunched" in x.reasons["relaunch"]
    assert set(x.reasons) >= {"relaunch", "join", "reconfigure", "heal", "catch_up"}
    assert "never committed again" in x.text


def test_profile_recovery_is_a_typed_on_off_field() -> None:
    from ftrun.config import RunConfig, build, on_off
    from ftrun.errors import BadInput

    assert RunConfig().profiling.profile_recovery is True
    assert on_off("profile_recovery", "off") is False and on_off("profile_recovery", "ON") is True
    assert on_off("profile_recovery", None) is None
    with pytest.raises(BadInput, match=r"--profile-recovery 'maybe'|--profile-recovery maybe: use on or off"):
        on_off("profile_recovery", "maybe")
    assert build(profile_recovery=False).profiling.profile_recovery is False


def test_a_hang_gets_the_same_breakdown_without_a_relaunch() -> None:
    m = manifest(restart=False)
    m.faults.fired[0].action, m.faults.fired[0].seconds = "hang", 3.0
    lg = logs()
    lg[(1, 0)] = [
        rec(14, T0 - 0.2),
        rec(15, T0 + 3.2),
        rec(25, T0 + 5.1, quorums=[q(3, [0, 1, 2], T0 + 5.0)]),
        rec(30, T0 + 6.0, commit=True),
    ]
    life = lifecycles(heal=False)
    life[1] = [LifecycleEvent("configure", 0, T0 + 5.05, T0 + 5.25, quorum_id=3)]
    (x,) = breakdown(m, lg, life)
    assert x.fault == "hang 1@15" and x.total_s == pytest.approx(6.0)
    assert x.phases["relaunch"] is None and "a hang is not a crash" in x.reasons["relaunch"]
    assert x.spans["join"] == (T0 + 3.0, T0 + 5.0)  # from the stall's end
    assert x.spans["detect"] == (T0, T0 + 2.0)
    # 2.0-3.0: the survivors had dropped it, it was still stalled: no phase claims it
    assert x.unaccounted_s == pytest.approx(1.05)


def test_a_fault_owns_only_the_groups_records_until_its_next_fault() -> None:
    # a chaos run: replica 1 hangs at T0 (back with a commit at T0 + 6), then is killed at T0 + 7
    # and relaunched at T0 + 7.2; the hang's recovery must not take that relaunch as its own
    m = manifest(restart=False)
    m.faults.fired[0].action, m.faults.fired[0].seconds = "hang", 3.0
    kill = {"replica": 1, "step": 31, "action": "kill", "fired_at": T0 + 7.0, "fired_step": 31}
    m.faults.fired.append(msgspec.convert(kill, layout.FaultMarker))
    m.run_events.append(
        msgspec.convert({"event": "restart", "t": T0 + 7.2, "replica": 1, "incarnation": 1}, layout.RunEvent)
    )
    lg = logs()
    lg[(1, 0)] = [
        rec(14, T0 - 0.2),
        rec(15, T0 + 3.2),
        rec(25, T0 + 5.1, quorums=[q(3, [0, 1, 2], T0 + 5.0)]),
        rec(30, T0 + 6.0, commit=True),
        rec(None, T0 + 9.0, restart=1, participants=None),
        rec(40, T0 + 10.0, restart=1, quorums=[q(4, [0, 1, 2], T0 + 9.5, heal=True, src=0)]),
        rec(41, T0 + 11.0, restart=1, commit=True),
    ]
    life = lifecycles(heal=False)
    life[1] = [
        LifecycleEvent("configure", 0, T0 + 5.05, T0 + 5.25, quorum_id=3),
        LifecycleEvent("start", 1, T0 + 7.5, T0 + 7.5),
        LifecycleEvent("manager_up", 1, T0 + 8.5, T0 + 9.0),
    ]
    hang, killed = breakdown(m, lg, life)
    assert hang.total_s == pytest.approx(6.0) and hang.phases["relaunch"] is None
    assert "a hang is not a crash" in hang.reasons["relaunch"]
    assert killed.total_s == pytest.approx(4.0) and killed.spans["relaunch"] == (T0 + 7.2, T0 + 9.0)


def test_the_perfetto_recovery_track_sits_on_the_traces_clock() -> None:
    from ftrun.report.perfetto import RECOVERY_PROCESS, recovery_events

    (x,) = breakdown(manifest(), logs(), lifecycles())
    base_ns = int((T0 - 100) * 1e9)
    evs = recovery_events([x.record()], base_ns, pid=7)
    evs = msgspec.to_builtins(evs)  # as the export writes them
    assert evs[0]["args"] == {"name": RECOVERY_PROCESS} and all(e["pid"] == 7 for e in evs)
    spans = {e["args"]["phase"]: e for e in evs if e["ph"] == "X"}
    assert set(spans) == set(PHASES)
    assert spans["detect"]["ts"] == pytest.approx(100e6) and spans["detect"]["dur"] == pytest.approx(2e6)
    assert spans["relaunch"]["name"] == "relaunch 2.80 s" and spans["heal"]["args"]["source"] == "event log"
    assert "s" not in spans["heal"] and set(spans["heal"]["args"]) == {
        "phase",
        "seconds_on_critical_path",
        "source",
        "total_s",
        "unaccounted_s",
    }


def test_the_survivors_traces_time_detection_and_every_participants_configure() -> None:
    # replica 0's quorum RPC for quorum 2 (the one without replica 1) ended at +1.98: the lighthouse's
    # answer, before its step log saw it (+2.0); its configure for the join quorum 3 and its send
    around = {
        0: {
            LABELS.client_quorum: [(T0 - 3.0, T0 - 2.9), (T0 + 0.05, T0 + 1.98)],
            LABELS.pg_configure: [(T0 + 5.06, T0 + 5.19)],
            LABELS.send_checkpoint: [(T0 + 5.261, T0 + 5.269)],
        },
        2: {LABELS.pg_configure: [(T0 - 10, T0 - 9.9)]},
    }  # replica 2's only traced configure is an old one
    (x,) = breakdown(manifest(), logs(), lifecycles(), around=around)
    assert x.spans["detect"] == (T0, T0 + 1.98) and x.sources["detect"] == "trace"
    assert "replica 0's quorum RPC for quorum 2 waited 1.93 s (traced)" in x.detect_bound
    assert x.reconfigure_participants == pytest.approx({0: 0.13, 1: 0.2})
    assert x.participant_sources == {0: "trace", 1: "event log"}
    assert x.heal_send_s == pytest.approx(0.008) and x.heal_send_source == "trace"
    d = x.record()
    assert d.participant_sources == {"0": "trace", "1": "event log"} and d.heal_send_source == "trace"
    # without the survivors' traces: the logs, said so
    (y,) = breakdown(manifest(), logs(), lifecycles())
    assert y.sources["detect"] == "event log" and y.spans["detect"] == (T0, T0 + 2.0)
    assert y.participant_sources == {0: "event log", 1: "event log"} and y.heal_send_source == "event log"
