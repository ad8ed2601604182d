"""After a run: the manifest, the recovery story and the summary, from the run's own files. Torch-free.

The replicas' agreement is checked by the caller (``ftrun.check.agreement``) and handed in."""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec

from ftrun import layout
from ftrun.event_log import read_event_log, read_run_events, replica_stats
from ftrun.launch.supervise import RunState
from ftrun.link_spec import Link
from ftrun.output import atomic_write
from ftrun.version import __version__


def _resolved_backend(backend: str) -> str:
    """What a worker makes of ``auto`` (``ftrun.worker.setup.pick_device``), when no rank said."""
    from ftrun.launch.preflight import has_cuda_device

    return ("nccl" if has_cuda_device() else "gloo") if backend == "auto" else backend


def write_manifest(state: RunState, window: tuple[int, int] | None, link: Link | None) -> layout.Manifest:
    """manifest.json (``layout.Manifest``, validated before it is written); returns it."""
    cfg, run_dir = state.cfg, state.run_dir
    metas = [
        m
        for r in cfg.hosts.groups_here
        for g in range(cfg.hosts.nproc_per_replica)
        if (m := layout.read_rank_meta(layout.meta_file(run_dir, r, g))) is not None
    ]
    first = metas[0] if metas else None
    if cfg.hosts.lighthouse:
        detection: layout.DetectionBound | None = layout.DetectionBound(lighthouse="external")
    elif state.lighthouse is not None and state.lighthouse.detection:
        detection = state.lighthouse.detection
    else:
        detection = None
    manifest = layout.Manifest(
        ftrun_version=__version__,
        job_id=state.job_id,
        run_name=cfg.run_name,
        config=cfg,
        versions=first.versions if first is not None else {"python": sys.version.split()[0], "ftrun": __version__},
        backend=(first.backend if first is not None else None) or _resolved_backend(cfg.hosts.backend),
        replicas=cfg.hosts.replicas,
        nproc_per_replica=cfg.hosts.nproc_per_replica,
        schedule=layout.ScheduleInfo.of(cfg.schedule, cfg.steps),
        fragments=first.fragments if first is not None else [],
        expected=[
            layout.ExpectedEvent(e.step, e.kind, e.fragment, e.cycle, e.manager_step)
            for e in cfg.schedule.expected.events(cfg.steps)
        ],
        profile_windows=[list(window)] if window else [],
        traces=[
            layout.TraceRef(m.replica, m.rank, f"{layout.TRACES}/{t}", m.profile_window)
            for m in metas
            for t in m.traces
        ],
        recovery_traces=[
            layout.TraceRef(w[0], w[1], str(q.relative_to(run_dir)), None)
            for q in sorted(layout.recovery_trace_dir(run_dir).glob("*.pt.trace.json*"))
            if (w := layout.parse_worker(q.name)) is not None
        ],
        event_logs=[
            layout.EventLogRef(r, g, str(layout.event_log(run_dir, r, g).relative_to(run_dir)))
            for r in cfg.hosts.groups_here
            for g in range(cfg.hosts.nproc_per_replica)
        ],
        link=link,
        devices=[layout.DeviceRef(m.replica, m.rank, m.device) for m in metas],
        faults=layout.FaultsInfo(
            planned=[layout.FaultSpec(f.replica, f.step, f.action, f.seconds, f.kind) for f in cfg.planned_faults()],
            fired=layout.read_fault_markers(run_dir),
            max_restarts=cfg.faults.max_restarts,
        ),
        run_events=read_run_events(layout.run_event_log(run_dir)),
        wall_s=round(state.ended - state.started, 3),
        network=state.network,
        detection=detection,  # what bounded detection of a lost group (ftrun.check.recovery shows it)
    )
    atomic_write(run_dir / layout.MANIFEST, layout.to_json(manifest, indent=1))
    return manifest


def fault_history(
    logs: dict[tuple[int, int], list[layout.EventRecord]], manifest: layout.Manifest
) -> layout.FaultHistory:
    """Faults, restarts, heals, quorum changes and commits lost, from the logs alone (summary.json's ``faults``).
    ``extra_steps``: steps trained past ``--steps`` while the groups waited for a relaunched one
    (``ftrun.worker.stop``); a fault's ``cause``: why its group never came back (its one line)."""
    from ftrun.worker.stop import never_back_cause, ran_to

    replicas = manifest.replicas
    planned, last = manifest.schedule.steps, ran_to(logs)
    last_step = max(last or 0, planned or 0) if planned is not None else None
    healing = [(r, rec) for (r, g), recs in logs.items() if g == 0 for rec in recs if rec.healed]
    heals = [(r, rec.step, rec.healed) for r, rec in healing if isinstance(rec.healed, layout.Healed)]
    first = min((x for x, _ in logs), default=None)
    quorums = [
        layout.QuorumChange(r, rec.step, q.quorum_id, q.participants)
        for (r, g), recs in logs.items()
        if g == 0 and r == first
        for rec in recs
        for q in (rec.quorums or [])
    ]
    failed = sorted({rec.manager_step for (r, g), recs in logs.items() for rec in recs if rec.commit is False})
    recov = []
    for f in manifest.faults.fired:
        if f.action in ("hang", "corrupt", "corrupt-sync"):  # nothing left the quorum
            continue
        # the group's own first commit in a full quorum after it healed (as the recovery breakdown's
        # total ends): its peers may commit before it, once it sent its part of a sync, while it
        # still catches up; and a commit right after the fault may count the dead incarnation, whose
        # heartbeats the lighthouse has not yet timed out, among the participants
        back = [
            rec.t
            for rec in logs.get((f.replica, 0), [])
            if rec.commit
            and rec.t > f.fired_at
            and (rec.participants or 0) >= replicas
            and any(back_with(rec, h, f.fired_at) for hr, h in healing if hr == f.replica)
        ]
        late = [
            rec.rejoined.aligned_step
            for rec in logs.get((f.replica, 0), [])
            if rec.t > f.fired_at
            and rec.rejoined
            and rec.rejoined.aligned_step is not None
            and last_step is not None
            and rec.rejoined.aligned_step > last_step
        ]
        relaunched = any(
            e.event == "restart" and e.replica == f.replica and e.t > f.fired_at for e in manifest.run_events
        )
        recov.append(
            layout.FaultOutcome(
                **msgspec.structs.asdict(f),
                recovered_s=round(min(back) - f.fired_at, 3) if back else None,
                # relaunched, but back only after the others finished: never in the run's quorum again
                rejoined_after_end=late[0] if late else None,
                last_step=last_step,
                cause=never_back_cause(planned, last, manifest.config.timeouts.quorum_timeout_s)
                if not back and relaunched
                else None,
            )
        )
    restarts = [e for e in manifest.run_events if e.event == "restart"]
    return layout.FaultHistory(
        faults=recov,
        extra_steps=max(0, (last or 0) - planned) if planned is not None else 0,
        restarts=len(restarts),
        heals=[layout.HealRow.of(r, step, h) for r, step, h in heals],
        quorum_changes=quorums,
        commits_lost=len(failed),
        failed_commit_manager_steps=failed,
    )


def back_with(commit: layout.EventRecord, heal: layout.EventRecord, fired_at: float) -> bool:
    """``commit`` (a record of the group's) comes after its ``heal`` from a fault at ``fired_at``:
    the heal came after the fault, at or before the commit's step, and the commit's quorum is the
    heal's or a later one (torchft's quorum ids only grow)."""
    healed = heal.healed
    return (
        isinstance(healed, layout.Healed)
        and heal.t > fired_at
        and healed.manager_step <= commit.manager_step_after
        and heal.quorum_id is not None
        and commit.quorum_id is not None
        and commit.quorum_id >= heal.quorum_id
    )


def read_logs(state: RunState) -> dict[tuple[int, int], list[layout.EventRecord]]:
    """(replica, rank) -> event records, for every rank this host ran."""
    cfg = state.cfg
    return {
        (r, g): read_event_log(layout.event_log(state.run_dir, r, g))
        for r in cfg.hosts.groups_here
        for g in range(cfg.hosts.nproc_per_replica)
    }


def summarise(
    state: RunState,
    manifest: layout.Manifest,
    logs: dict[tuple[int, int], list[layout.EventRecord]],
    agreement,
    numerics=None,
) -> layout.TrainSummary:
    """The run's summary.json. ``agreement``: ``ftrun.check.agreement.Agreement`` of ``logs``;
    ``numerics``: ``ftrun.check.numerics.Numerics`` of ``logs`` (None: not run)."""
    cfg, run_dir = state.cfg, state.run_dir
    wall = state.ended - state.started
    stats = {r: replica_stats(logs.get((r, 0), [])) for r in cfg.hosts.groups_here}
    per_replica = [
        layout.ReplicaSummary(
            replica=r,
            steps=s.steps,
            last_step=s.last_step,
            steps_per_s=round(s.steps_per_s, 3) if s.steps_per_s else None,
            commits=s.commits,
            failed_commits=s.failed_commits,
            final_loss=s.final_loss,
            final_manager_step=s.final_manager_step,
            lost=state.lost.get(r),
        )
        for r, s in stats.items()
    ]
    faults = fault_history(logs, manifest)
    causes = {f.replica: f.cause for f in faults.faults if f.cause}
    for r, s in stats.items():
        if s.last_step < cfg.steps and not state.failures and r not in state.lost:
            cause = causes.get(r, "the other groups finished before it rejoined")
            state.fail(
                f"replica group {r} stopped at step {s.last_step} of {cfg.steps}"
                + (f" (restarted, but {cause})" if s.last_step else "")
            )
    ok = not state.failures and agreement.ok and (numerics is None or numerics.ok)
    window = manifest.profile_windows[0] if manifest.profile_windows else None
    if manifest.traces:
        traces_note = None
    elif window is None:
        traces_note = "profiling off"
    else:
        last = max((s.last_step for s in stats.values()), default=0)
        traces_note = (
            f"none written: profiled steps {window[0]}..{window[1]}, the run stopped at step {last}"
            if last < window[1]
            else f"none written for profiled steps {window[0]}..{window[1]}"
        )
    return layout.TrainSummary(
        run_dir=str(run_dir),
        ok=ok,
        wall_s=round(wall, 3),
        mode=cfg.mode,
        schedule=manifest.schedule,
        backend=manifest.backend,
        link=manifest.link,
        devices=manifest.devices,
        replicas=per_replica,
        # what this run dir saw: with one group here, nothing to compare (inspect-trace of all groups does)
        agreement=layout.AgreementSummary(
            ok=agreement.ok,
            commits_checked=agreement.commits_checked,
            disagreements=agreement.disagreements,
            groups_here=len(cfg.hosts.groups_here),
            groups_in_job=cfg.hosts.replicas,
        ),
        numerics=numerics.record() if numerics is not None else None,
        failures=state.failures,
        traces=[str(run_dir / t.path) for t in manifest.traces],
        traces_note=traces_note,
        manifest=str(run_dir / layout.MANIFEST),
        versions=dict(manifest.versions),
        faults=faults,
    )


def write_summary(run_dir: Path, summary: layout.TrainSummary | layout.LaunchSummary) -> str:
    """summary.json (indented, as ``--json`` prints it); returns its text."""
    text = layout.to_json(summary, indent=1)
    atomic_write(run_dir / layout.SUMMARY, text)
    return text
