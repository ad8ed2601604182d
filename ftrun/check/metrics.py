"""What ``ftrun compare`` reports of one run: the trace check's verdict plus what the event logs
measured over the whole run, and the median/spread over ``--repeat``. Torch-free.

Metric definitions (per run; event logs of rank 0 of each replica, averaged over replicas):
* ``exposed_comm_s`` = ``exposed_data_s``: sum over the run of each sync's blocking time on its
  fragment's collectives (event log ``exposed_s``). ``per_sync_exposed_ms`` = that / syncs.
* ``exposed_control_s``: the control plane's blocking time: every ``start_quorum`` (the training
  thread waits for the quorum torchft runs before each send) and ``should_commit`` (event log
  ``quorum_s`` + ``commit_s``). ``per_sync_exposed_control_ms`` = that / syncs. Like the data
  plane's, it includes waiting for the slowest replica to arrive, not only the link's round trips.
* ``compute_utilisation``: compute time / loop wall time, where loop wall time = the sum of
  the steps' times and compute time = that minus exposed data and control time.
* ``median_step_s``: the median time of the steps with neither send nor sync (pure compute,
  as the run really ran them), next to the link's ``calibrated_step_s``.
* ``hidden_comm_share``: over the profiled syncs whose send was captured,
  sum(hidden) / sum(send->done), from the traces.
* ``peak_sync_bytes``: the largest fragment payload sent in one sync (trace evidence, else the
  manifest's fragment sizes); ``total_bytes``: payload of every send in the run, per replica.
* ``decomposition``: the loop time's terms (``ftrun.check.throughput``), each with its per-step
  spread (``<term>_spread``); the views say a difference only beyond it (``ftrun.check.noise``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import TypedDict

import msgspec

from ftrun import layout
from ftrun.check.result import Report
from ftrun.check.throughput import Decomposition, decompose, mean_decomposition
from ftrun.errors import BadInput
from ftrun.event_log import read_event_log, replica_stats, stepped
from ftrun.layout import NumericsCheck

# Per-run figures that --repeat reports as median and spread (min, max) over the repeats.
FIGURES = (
    "steps_per_s",
    "tokens_per_s",
    "wall_s",
    "exposed_comm_s",
    "exposed_data_s",
    "exposed_control_s",
    "per_sync_exposed_ms",
    "per_sync_exposed_control_ms",
    "hidden_comm_share",
    "compute_utilisation",
    "median_step_s",
    "median_overlapped_step_s",
    "overlap_slowdown",
    "overlap_lost_s",
    "final_loss",
)
PER_REPLICA_FIGURES = ("steps_per_s_per_replica", "tokens_per_s_per_replica")


def _mean(xs: Sequence[float | None]) -> float | None:
    """The mean of the figures measured (None: not measured), None when none was."""
    got = [x for x in xs if x is not None]
    return sum(got) / len(got) if got else None


class _ReplicaFigures(TypedDict):
    """One replica group's figures, from its rank 0's event log (``replica_stats``)."""

    replica: int
    steps: int
    steps_per_s: float | None
    train_s: float
    syncs: int
    commits: int
    exposed_comm_s: float
    exposed_control_s: float
    compute_utilisation: float | None
    median_step_s: float | None
    total_bytes: int
    losses: dict[int, float]


def _per_replica(
    dirs: list[Path], replicas: int, frag_bytes: dict[int, int]
) -> tuple[list[_ReplicaFigures], list[Decomposition | None]]:
    """Each replica group's figures and throughput decomposition, from its rank 0's event log in
    the first of ``dirs`` that has one; a group without records is left out."""
    per_replica: list[_ReplicaFigures] = []
    parts = []  # each replica's throughput decomposition (ftrun.check.throughput)
    for r in range(replicas):
        recs: list[layout.EventRecord] = next(
            (got for d in dirs if (got := read_event_log(layout.event_log(d, r, 0)))), []
        )
        s = replica_stats(recs)
        if not s.records:
            continue
        train_s = s.train_s
        parts.append(decompose(recs))
        per_replica.append(
            {
                "replica": r,
                "steps": s.records,
                "steps_per_s": s.steps_per_s,
                "train_s": train_s,
                "syncs": s.syncs,
                "commits": s.commits,
                "exposed_comm_s": s.exposed_data_s,
                "exposed_control_s": s.exposed_control_s,
                "compute_utilisation": (train_s - s.exposed_data_s - s.exposed_control_s) / train_s
                if train_s
                else None,
                "median_step_s": s.median_plain_step_s,
                "total_bytes": sum(frag_bytes.get(x.sent, 0) for x in stepped(recs) if x.sent is not None),
                "losses": s.losses,
            }
        )
    return per_replica, parts


def run_metrics(name: str, run_dir: Path | list[Path], report: Report) -> layout.CompareRun:
    """Metrics of one run: a run dir, or the run dirs of one job's replica groups (merged); one
    repeat of it (``aggregate`` takes the median over the repeats)."""
    dirs = [run_dir] if isinstance(run_dir, Path) else list(run_dir)
    manifests = [layout.read_train_manifest(d) for d in dirs]
    manifest = manifests[0]
    cfg = manifest.config
    frag_bytes = {f.id: f.bytes for f in manifest.fragments}
    per_replica, parts = _per_replica(dirs, manifest.replicas, frag_bytes)
    if not per_replica:
        raise BadInput(f"compare: {', '.join(map(str, dirs))} has no event logs")
    walls = [m.wall_s for m in manifests if m.wall_s is not None]
    sync_figs = [
        e.sync
        for e in report.events
        if e.sync is not None and e.sync.send_to_done_ms is not None and e.observed_step is not None
    ]
    comm = sum(s.send_to_done_ms or 0.0 for s in sync_figs)  # (each not None: sync_figs)
    hidden = sum(s.hidden_comm_ms or 0.0 for s in sync_figs)
    send_bytes = [e.send.bytes for e in report.events if e.send is not None and e.send.bytes]
    peak = max(send_bytes) if send_bytes else max(frag_bytes.values(), default=0)
    steps = cfg.steps
    checkpoints = sorted({max(1, steps * q // 4) for q in (1, 2, 3, 4)})
    tokens_per_step = cfg.data.batch_size * cfg.data.seq_len * manifest.nproc_per_replica
    sps = _mean([p["steps_per_s"] for p in per_replica])
    syncs = _mean([p["syncs"] for p in per_replica]) or 0
    exposed = _mean([p["exposed_comm_s"] for p in per_replica]) or 0.0
    control = _mean([p["exposed_control_s"] for p in per_replica]) or 0.0
    decomposition = mean_decomposition([d for d in parts if d is not None])
    return layout.CompareRun(
        name=name,
        run_dir=str(dirs[0]) if len(dirs) == 1 else ",".join(map(str, dirs)),
        run_dirs=[str(d) for d in dirs],
        schedule=manifest.schedule,
        verdict=report.verdict,
        problems=report.problems()[:20],
        numerics=numerics_brief(report.numerics),
        steps_per_s=sps,
        steps_per_s_per_replica=[p["steps_per_s"] for p in per_replica],
        tokens_per_s=sps * tokens_per_step if sps else None,
        tokens_per_s_per_replica=[
            p["steps_per_s"] * tokens_per_step if p["steps_per_s"] else None for p in per_replica
        ],
        wall_s=max(walls) if walls else None,
        syncs=syncs,
        commits=_mean([p["commits"] for p in per_replica]),
        exposed_comm_s=exposed,
        exposed_data_s=exposed,
        exposed_control_s=control,
        per_sync_exposed_ms=exposed / syncs * 1e3 if syncs else None,
        per_sync_exposed_control_ms=control / syncs * 1e3 if syncs else None,
        compute_utilisation=_mean([p["compute_utilisation"] for p in per_replica]),
        median_step_s=_mean([p["median_step_s"] for p in per_replica]),
        # overlap cost (ftrun.check.throughput): compute time of steps with a fragment in flight
        median_unoverlapped_step_s=(decomposition or {}).get("median_plain_compute_s"),
        median_overlapped_step_s=(decomposition or {}).get("median_overlapped_compute_s"),
        overlap_slowdown=(decomposition or {}).get("overlap_slowdown"),
        overlap_lost_s=(decomposition or {}).get("overlap_slowdown_s"),
        decomposition=decomposition,
        backend=cfg.hosts.backend,
        profiled_syncs=len(sync_figs),
        profiled_comm_ms=comm,
        profiled_hidden_ms=hidden,
        hidden_comm_share=hidden / comm if comm else None,
        peak_sync_bytes=peak,
        total_bytes=_mean([p["total_bytes"] for p in per_replica]),
        final_loss=_mean([p["losses"].get(steps) for p in per_replica]),
        loss_at_steps={str(s): _mean([p["losses"].get(s) for p in per_replica]) for s in checkpoints},
        link=manifest.link,
        recovery=recovery_of(dirs),
    )


def measured_step_s(run_dir: Path, replicas: int) -> float | None:
    """A trained run's median compute step (``median_step_s``: steps with neither send nor
    sync, from rank 0's event log of each replica, averaged), without its traces."""
    return _mean(
        [replica_stats(read_event_log(layout.event_log(run_dir, r, 0))).median_plain_step_s for r in range(replicas)]
    )


def numerics_brief(num: NumericsCheck | None) -> layout.NumericsBrief:
    """The numeric check of a run in brief: status, syncs checked, problems (count), why not checked."""
    if num is None:
        return layout.NumericsBrief("not checked", 0, 0, "no event logs")
    return layout.NumericsBrief(num.status, num.checked, len(num.problems), num.why)


def recovery_of(dirs: list[Path]) -> layout.RunRecovery | None:
    """Faults and recovery, from each run dir's summary.json (None when no fault was injected; a
    run dir without one is left out; ``BadInput`` for one that is not a summary)."""
    recs: list[layout.FaultHistory] = []
    breakdown: list[layout.RecoveryRecord] = []
    for d in dirs:
        if not (d / layout.SUMMARY).exists():  # a run stopped before its end wrote none
            continue
        summary = layout.read_train_summary(d)
        recs.append(summary.faults)
        breakdown += summary.recovery
    faults = [f for r in recs for f in r.faults]
    if not faults:
        return None
    return layout.RunRecovery(
        faults=[layout.fault_label(f.action, f.replica, f.step) for f in faults],
        restarts=sum(r.restarts for r in recs),
        heals=sum(len(r.heals) for r in recs),
        commits_lost=sum(r.commits_lost for r in recs),
        recovered_s=[f.recovered_s for f in faults],
        # the breakdown (ftrun.check.recovery): fault -> the group's first commit, and where it went
        recovery_s=[b.total_s for b in breakdown],
        largest_phase=[(b.largest_phase, b.phase_s(b.largest_phase)) for b in breakdown],
    )


def _median(values: list[float | None]) -> float | None:
    """The median of figures every repeat measured; None when one did not."""
    got = [v for v in values if v is not None]
    return statistics.median(got) if got and len(got) == len(values) else None


def aggregate(reps: list[layout.CompareRun]) -> layout.CompareRun:
    """One run's figures over its repeats: median per figure (``FIGURES``), ``spread`` = [min, max];
    per-replica figures: the median per replica.

    The first repeat gives every other field; the verdict passes only if every repeat passed.
    """
    first = reps[0]
    if len(reps) == 1:
        return msgspec.structs.replace(first, repeats=1, spread={})
    figures: dict[str, float | None] = {k: getattr(first, k) for k in FIGURES}
    spread: dict[str, list[float]] = {}
    for key in FIGURES:
        vals: list[float | None] = [getattr(r, key) for r in reps]
        nums = [v for v in vals if v is not None]
        if len(nums) == len(vals):
            figures[key] = statistics.median(nums)
            spread[key] = [min(nums), max(nums)]
    per_replica: dict[str, list[float | None]] = {}
    for key in PER_REPLICA_FIGURES:  # element-wise median, per replica
        lists: list[list[float | None]] = [getattr(r, key) for r in reps]
        per_replica[key] = (
            [_median(list(col)) for col in zip(*lists, strict=True)]
            if all(len(x) == len(lists[0]) for x in lists)
            else getattr(first, key)
        )
    parts = [r.decomposition for r in reps if r.decomposition]
    decomposition = first.decomposition
    if len(parts) == len(reps):  # term by term, as the figures: the median over the repeats
        decomposition = {k: _median([d.get(k) for d in parts]) for k in parts[0]}
    briefs = [r.numerics or layout.NumericsBrief("not checked") for r in reps]
    # the worst repeat: one with problems, else one not checked
    numerics = next((b for b in briefs if b.problems), None) or next(
        (b for b in briefs if b.status != "checked"), briefs[0]
    )
    return msgspec.structs.replace(
        first,
        steps_per_s=figures["steps_per_s"],
        tokens_per_s=figures["tokens_per_s"],
        wall_s=figures["wall_s"],
        exposed_comm_s=figures["exposed_comm_s"] or 0.0,
        exposed_data_s=figures["exposed_data_s"] or 0.0,
        exposed_control_s=figures["exposed_control_s"],
        per_sync_exposed_ms=figures["per_sync_exposed_ms"],
        per_sync_exposed_control_ms=figures["per_sync_exposed_control_ms"],
        hidden_comm_share=figures["hidden_comm_share"],
        compute_utilisation=figures["compute_utilisation"],
        median_step_s=figures["median_step_s"],
        median_overlapped_step_s=figures["median_overlapped_step_s"],
        overlap_slowdown=figures["overlap_slowdown"],
        overlap_lost_s=figures["overlap_lost_s"],
        final_loss=figures["final_loss"],
        steps_per_s_per_replica=per_replica["steps_per_s_per_replica"],
        tokens_per_s_per_replica=per_replica["tokens_per_s_per_replica"],
        decomposition=decomposition,
        verdict="pass" if all(r.verdict == "pass" for r in reps) else "fail",
        numerics=numerics,
        problems=[f"{Path(r.run_dir or '').name}: {p}" for r in reps for p in r.problems][:20],
        repeats=len(reps),
        spread=spread,
        repeat_runs=[
            layout.RepeatRun(run_dir=r.run_dir, verdict=r.verdict, **{k: getattr(r, k) for k in FIGURES}) for r in reps
        ],
    )
