"""ftrun.plan.recovery and ``plan --check`` of a kill run's recovery, on hand-made inputs and
breakdowns (``ftrun.check.recovery.Recovery`` built here; no process).

Reference: 1,000 float32 parameters in 3 tensors (4,000 B), outer momentum on: torchft's
checkpoint transport sends model + AdamW's two moments + DiLoCo's global copy + the outer
momentum = 5 x 4,000 B, + AdamW's 3 float32 step tensors = 20,012 B. Over 8 Mbit/s, 10 ms (a
recv: one latency step): 10 ms + 20,012 x 8 / 8e6 s = 30.012 ms.
"""

from __future__ import annotations

import pytest

from ftrun.check.recovery import PHASES, Recovery
from ftrun.plan.recovery import RecoveryInputs, heal_bytes, predict_recovery
from ftrun.plan.recovery_check import RECOVERY_FLOOR_S, recovery_rows
from ftrun.schedule import Schedule

BW, LAT = 8e6, 0.01
SCHED = Schedule(2, 10, 3)  # window 5: sends at local step 2 (steps 2, 7, 12, 17, ...), syncs at 5, 10, ...


def inputs(**kw) -> RecoveryInputs:
    base = dict(
        heartbeat_timeout_s=2.0,
        state_bytes=heal_bytes(4000, 3, True),
        schedule=SCHED,
        step_s=0.1,
        fragment_bytes=(2000, 2000),
        replicas=3,
        send_s=0.005,
        sync_work_s=0.002,
    )
    base.update(kw)
    return RecoveryInputs(**base)


def test_heal_bytes_are_what_torchfts_transport_sends() -> None:
    assert heal_bytes(4000, 3, True) == 20_012
    assert heal_bytes(4000, 3, False) == 16_012  # no momentum buffer with outer momentum 0


def test_each_phase_by_its_mechanism_and_the_unmodelled_ones_not_predicted() -> None:
    p = predict_recovery(inputs(kill_step=15), BW, LAT)
    # the kill at step 15's start: the survivors ask at the send of step 17, after its compute
    # (0.3 s), long before the 2 s heartbeat timeout + half a 100 ms tick; + the held round trip
    assert p.phases["detect"] == pytest.approx(2.05 + 0.02)
    assert p.phases["heal"] == pytest.approx(0.01 + 20_012 * 8 / 8e6)
    # the send's rest 5 ms, tau = 3 steps (300 ms) hide the 3-replica allreduce of 2 kB
    # (4 x 10 ms + 2 x 2/3 x 2000 x 8 / 8e6 s = 42.7 ms); the sync's own 2 ms
    assert p.phases["catch_up"] == pytest.approx(0.005 + 0.3 + 0.002)
    assert p.phases["relaunch"] is p.phases["join"] is p.phases["reconfigure"] is None
    assert "not predicted" in p.how["relaunch"] and p.total_s is None
    # a long heartbeat timeout is hidden ... a late request is not
    assert predict_recovery(inputs(kill_step=15, heartbeat_timeout_s=0.1), BW, LAT).phases["detect"] == pytest.approx(
        0.3 + 0.02
    )
    # measured inputs make a total; without a link the heal is not predicted
    m = predict_recovery(
        inputs(measured={"relaunch": 3.0, "join": 1.5, "reconfigure": 0.01}, measured_from="run"), BW, LAT
    )
    assert m.total_s == pytest.approx(3.0 + 1.5 + 0.01 + m.phases["heal"] + m.phases["catch_up"])
    assert "measured in run" in m.how["join"]
    assert predict_recovery(inputs(), None, 0.0).phases["heal"] is None


def test_a_slow_link_makes_the_catch_up_wait_for_the_sync() -> None:
    p = predict_recovery(inputs(fragment_bytes=(200_000, 200_000)), BW, LAT)
    data = 4 * 0.01 + 2 * 2 / 3 * 200_000 * 8 / 8e6  # 573 ms: the sync waits past the tau steps
    assert p.phases["catch_up"] == pytest.approx(data + 0.002)


def recovery(spans: dict, total: float, heal_bytes_: int | None = 20_012) -> Recovery:
    full = {k: spans.get(k) for k in PHASES}
    return Recovery(
        "kill 1@15",
        1,
        100.0,
        total,
        {k: None for k in PHASES},
        full,
        {},
        0.0,
        heal_bytes=heal_bytes_,
        heal_bytes_sent=heal_bytes_,
    )


def test_check_compares_each_predicted_phase_and_takes_the_rest_as_inputs() -> None:
    x = inputs(kill_step=15, measured={"relaunch": 3.0, "join": 1.5, "reconfigure": 0.01}, measured_from="run")
    pred = predict_recovery(x, BW, LAT)
    heal, catch = pred.phases["heal"], pred.phases["catch_up"]
    t = 100.0
    spans = {
        "detect": (t, t + 2.2),
        "relaunch": (t + 0.1, t + 3.1),
        "join": (t + 3.1, t + 4.6),
        "reconfigure": (t + 4.6, t + 4.61),
        "heal": (t + 4.61, t + 4.61 + heal),
        "catch_up": (t + 4.7, t + 4.7 + catch),
    }
    rows, failed = recovery_rows(pred, [recovery(spans, 4.7 + catch)], 0.25)
    (r,) = rows
    assert not failed, rows
    assert r.within_tolerance["detect"] is True and r.within_tolerance["relaunch"] is None
    assert r.measured["detect"] == pytest.approx(2.2)
    # a heal twice as long as the link's cost, and other bytes than predicted, fail
    slow = dict(spans, heal=(t + 4.61, t + 4.61 + 2 * heal + RECOVERY_FLOOR_S))
    _, failed = recovery_rows(pred, [recovery(slow, 5.0, heal_bytes_=16_012)], 0.25)
    assert "kill 1@15: heal" in failed and "kill 1@15: heal bytes" in failed
    # a phase that did not happen is not compared (None), never a pass
    rows, _ = recovery_rows(pred, [recovery({k: v for k, v in spans.items() if k != "heal"}, 4.7 + catch)], 0.25)
    assert rows[0].within_tolerance["heal"] is None and rows[0].measured["heal"] is None
