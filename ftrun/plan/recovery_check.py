"""``ftrun plan --check RUN_DIR`` of a run with a ``--kill``: each fault's recovery, phase by
phase (``ftrun.check.recovery``), against the recovery model's prediction (``ftrun.plan.recovery``)
from the run's own inputs. Torch-free."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ftrun.errors import BadInput
from ftrun.plan.check_result import HealBytes, RecoveryCheck, RecoveryRow
from ftrun.plan.measure import read_run, recovery_inputs
from ftrun.plan.recovery import MEASURED_ONLY, RecoveryPrediction, predict_recovery, within as within_recovery
from ftrun.plan.result import LinkOut
from ftrun.plan.tolerance import error_of, verdict

RECOVERY_FLOOR_S = 0.2  # a phase error this small always passes: the lighthouse's 100 ms tick and a step's length
RECOVERY_GATED = ("detect", "heal", "catch_up", "total")


def recovery_rows(pred: RecoveryPrediction, recs: list[Any], tolerance: float) -> tuple[list[RecoveryRow], list[str]]:
    """Each fault's breakdown (``ftrun.check.recovery.Recovery``: each phase's own interval, the
    total) against the prediction, and what is outside tolerance (a predicted phase, the total,
    or heal bytes that differ from what torchft sent). Relaunch, join and reconfigure are inputs."""
    rows = []
    for rec in recs:
        meas: dict[str, float | None] = {k: (s[1] - s[0]) if s is not None else None for k, s in rec.spans.items()}
        meas["total"] = rec.total_s
        p = dict(pred.phases)
        p["total"] = pred.total_s
        ok = {k: within_recovery(p.get(k), meas.get(k), tolerance, RECOVERY_FLOOR_S) for k in p}
        for k in MEASURED_ONLY:
            ok[k] = None  # inputs: measured, not predicted
        rows.append(
            RecoveryRow(
                fault=rec.fault,
                replica=rec.replica,
                predicted=p,
                measured=meas,
                how=pred.how,
                heal_bytes=HealBytes(predicted=pred.heal_bytes, measured=rec.heal_bytes, sent=rec.heal_bytes_sent),
                within_tolerance=ok,
                error={k: error_of(p.get(k), meas.get(k)) for k in p},
            )
        )
    failed = [f"{r.fault}: {k}" for r in rows for k in RECOVERY_GATED if r.within_tolerance.get(k) is False]
    failed += [
        f"{r.fault}: heal bytes"
        for r in rows
        if r.heal_bytes.measured is not None and r.heal_bytes.measured != r.heal_bytes.predicted
    ]
    return rows, failed


def check_recovery(root: Path, tolerance: float) -> RecoveryCheck:
    """``--check RUN_DIR`` of a run with a ``--kill``: each fault's predicted vs measured phases."""
    from ftrun.check.recovery import recovery_of_run_dir

    recs = [x for x in recovery_of_run_dir(root) if x.fault.startswith("kill")]
    if not recs:
        raise BadInput(f"--check {root}: a run dir, but no --kill fired in it (nothing to compare a recovery with)")
    inp = read_run([root])
    x = recovery_inputs(root, inp, with_measured=True)
    link = inp.link
    pred = predict_recovery(x, link.bandwidth_bps if link else None, link.latency_s if link else 0.0)
    rows, failed = recovery_rows(pred, recs, tolerance)
    return RecoveryCheck(
        check=str(root),
        tolerance=tolerance,
        floor_s=RECOVERY_FLOOR_S,
        link=None if link is None else LinkOut(link.bandwidth_bps, link.latency_s, link.description),
        recovery=rows,
        verdict=recovery_verdict(rows, failed),
        outside_tolerance=failed,
    )


def recovery_verdict(rows: list[RecoveryRow], failed: list[str]) -> str:
    """``verdict`` of ``recovery_rows``: compared = the faults with a gated phase or the heal bytes measured."""
    compared = sum(
        1
        for r in rows
        if r.heal_bytes.measured is not None or any(r.within_tolerance.get(k) is not None for k in RECOVERY_GATED)
    )
    return verdict(failed, compared)
