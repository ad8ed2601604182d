"""A ``--chaos`` run's summary (``ftrun.chaos_summary.ChaosSummary``) from its manifest, step
logs and recovery breakdown. Torch-free.

The chaos faults are the fired faults (``faults/`` markers) that no ``--kill``/``--hang`` flag
planned; the supervisor's requests and the chaos clock are its ``events/run.jsonl`` records
(``ftrun.launch.chaos``: ``chaos_start``, ``chaos``, ``chaos_end``).
"""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path

from ftrun.chaos_plan import combined_mtbf_s, parse_kinds
from ftrun.chaos_summary import ChaosSummary, Goodput, GoodputComparison, RecoveryStats
from ftrun.check.fired_faults import fault_marks
from ftrun.check.goodput import goodput_of, percentile, retained_of
from ftrun.check.recovery_model import PHASES, Recovery
from ftrun.event_log import read_event_log
from ftrun.layout import EventRecord, FaultMarker, Manifest, read_train_manifest


def chaos_faults(manifest: Manifest) -> list[FaultMarker]:
    """The fired faults no flag planned, in firing order."""
    planned = {(f.replica, f.step, f.action) for f in manifest.faults.planned}
    fired = [f for f in manifest.faults.fired if (f.replica, f.step, f.action) not in planned]
    return sorted(fired, key=lambda f: f.fired_at)


def absorbed_hangs(faults: list[FaultMarker], logs: dict[tuple[int, int], list[EventRecord]]) -> set[float]:
    """The ``fired_at`` of each hang whose group went on committing after the stall, before its
    next fault, without a relaunch: torchft waited for it (or dropped it and took it back without
    a new quorum of its own), nothing for the recovery breakdown to measure."""
    out = set()
    for f in faults:
        if f.action != "hang":
            continue
        nxt = min((g.fired_at for g in faults if g.replica == f.replica and g.fired_at > f.fired_at), default=1e300)
        recs = [x for x in logs.get((f.replica, 0), []) if f.fired_at + f.seconds < x.t < nxt]
        if any(x.commit for x in recs) and all(x.step is not None for x in recs):
            out.add(f.fired_at)
    return out


def recovery_stats(recoveries: list[Recovery], absorbed: set[float]) -> RecoveryStats:
    """Count, median, p90 and each phase's median of the recoveries' ``total_s`` (``RecoveryStats``);
    ``absorbed``: the ``t0`` of hangs the group absorbed (``absorbed_hangs``), never counted as not back."""
    absorbed_here = [x for x in recoveries if x.total_s is None and x.t0 in absorbed]
    back = [x for x in recoveries if x.total_s is not None]
    totals = [round(x.total_s, 3) for x in back if x.total_s is not None]
    phases: dict[str, float | None] = {}
    for p in PHASES:
        values = [x.phases[p] for x in back if x.phases.get(p) is not None]
        phases[p] = round(statistics.median(v for v in values if v is not None), 3) if values else None
    median = statistics.median(totals) if totals else None
    p90 = percentile(totals, 0.9)
    return RecoveryStats(
        count=len(back),
        never_back=len(recoveries) - len(back) - len(absorbed_here),
        absorbed=len(absorbed_here),
        median_s=None if median is None else round(median, 3),
        p90_s=p90,
        totals_s=totals,
        phases_median_s=phases,
    )


def chaos_summary(
    run_dir: Path, manifest: Manifest, logs: dict[tuple[int, int], list[EventRecord]], recoveries: list[Recovery]
) -> ChaosSummary:
    """The summary of a ``--chaos`` run (``manifest.config`` holds its chaos settings);
    ``recoveries``: its ``ftrun.check.recovery.recovery_of``, every fired fault's."""
    cfg = manifest.config
    fired = chaos_faults(manifest)
    ats = {f.fired_at for f in fired}
    mine = [x for x in recoveries if x.t0 in ats]
    kinds = list(cfg.faults.chaos or [])
    events = manifest.run_events
    start = next((e.t for e in events if e.event == "chaos_start"), None)
    ended = next((e.fault for e in events if e.event == "chaos_end" and isinstance(e.fault, str)), None)
    goodput = goodput_of(logs)
    end = max((x.t for (_, g), recs in logs.items() if g == 0 for x in recs if x.commit), default=None)
    chaos_s = round(end - start, 3) if start is not None and end is not None and end > start else None
    keys = {(f.replica, f.fired_step or f.step, f.action) for f in fired}
    marks = [m for m in fault_marks([run_dir], [manifest], logs).marks if (m.replica, m.step, m.action) in keys]
    missed = [(m.lost_steps[1] - m.lost_steps[0] + 1) if m.lost_steps else 0 for m in marks]
    return ChaosSummary(
        kinds=kinds,
        seed=int(cfg.faults.chaos_seed or 0),
        min_alive=int(cfg.faults.chaos_min_alive or 1),
        mtbf_s=round(combined_mtbf_s(parse_kinds(kinds)), 3),
        requested=sum(1 for e in events if e.event == "chaos"),
        fired=len(fired),
        by_kind=dict(Counter(f.action for f in fired)),
        chaos_s=chaos_s,
        realized_mtbf_s=round(chaos_s / len(fired), 3) if chaos_s and fired else None,
        ended=ended,
        recoveries=recovery_stats(mine, absorbed_hangs(fired, logs)),
        missed_steps_per_fault=round(statistics.fmean(missed), 2) if missed else None,
        goodput=goodput,
    )


CHAOS_KEYS = ("chaos", "chaos_seed", "chaos_min_alive", "chaos_max_faults", "restarts", "run_name", "out")


def run_goodput(run_dir: Path) -> tuple[Manifest, Goodput]:
    """A run dir's manifest and goodput (``ftrun.check.goodput``), from its own event logs."""
    m = read_train_manifest(run_dir)
    logs: dict[tuple[int, int], list[EventRecord]] = {
        (e.replica, e.rank): read_event_log(run_dir / e.path) for e in m.event_logs
    }
    return m, goodput_of(logs)


def goodput_comparison(names: list[str], repeats: list[list[Path]]) -> GoodputComparison | None:
    """The chaos configuration beside its twin (``GoodputComparison``) when exactly one of the two
    compared configurations ran with ``--chaos``; None otherwise. ``repeats[k]``: configuration
    k's run dirs, one per repeat, in training order."""
    measured = [[run_goodput(d) for d in reps] for reps in repeats]
    chaotic = [bool(runs[0][0].config.faults.chaos) for runs in measured]
    if sorted(chaotic) != [False, True]:
        return None
    c, t = (0, 1) if chaotic[0] else (1, 0)
    chaos_rates = [g.steps_per_s or None for _, g in measured[c]]
    twin_rates = [g.steps_per_s or None for _, g in measured[t]]
    a, b = measured[c][0][0].config.resolved(), measured[t][0][0].config.resolved()  # by key
    differs = sorted(k for k in set(a) & set(b) if k not in CHAOS_KEYS and a[k] != b[k])
    spread = retained_of(chaos_rates, twin_rates)
    return GoodputComparison(
        chaos=names[c],
        twin=names[t],
        chaos_steps_per_s=spread.chaos_rate,
        twin_steps_per_s=spread.twin_rate,
        retained=spread.retained,
        chaos_goodput=measured[c][0][1],
        twin_goodput=measured[t][0][1],
        differs=differs,
        repeats=max(len(chaos_rates), len(twin_rates)),
        chaos_repeats_steps_per_s=chaos_rates,
        twin_repeats_steps_per_s=twin_rates,
        retained_per_repeat=spread.per_repeat,
        retained_spread=spread.spread,
    )
