"""``analyze(paths, ...) -> Report``: check traces against the expected streaming-DiLoCo schedule.

The library behind ``ftrun inspect-trace`` (and reused by ``compare``, ``sweep``, ``launch``).
Everything observed comes from the traces; the manifest / flags and event logs only supply
expectations. ``analyze`` loads the inputs (``ftrun.trace``; refused early when they are not
torchft's or not one run: ``ftrun.check.provenance``), asks for the schedule
(``ftrun.check.expect``), then runs the check's stages in order, each a module with a typed
output the next one takes:

1. observe (``observe``): each worker's sends and syncs at their steps -> ``WorkerObs``;
2. identify (``identify``): signature classes of what each moved -> ``RunIdentities``;
3. expect/match (``match``): expected events shifted by failed commits (``commits``),
   paired with the observed -> ``WorkerMatch``; then identify labels them -> ``Identities``;
4. figures (``events``, ``figures``): one ``EventResult`` per pair, with ``SendFigures`` /
   ``SyncFigures``, and each worker's ``WorkerReport``;
5. cross-replica (``cross``): the workers compared step by step -> ``CrossCheck``;
6. problems (``problems``): run problems, the numeric check (``numerics``), the verdict.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from ftrun import layout
from ftrun.check import commits as commit_checks, fragment_log, provenance
from ftrun.check.cross import cross_replica
from ftrun.check.events import event_results
from ftrun.check.expect import schedule_for
from ftrun.check.fired_faults import FiredFaults, describe, fault_marks
from ftrun.check.identify import RunIdentities
from ftrun.check.match import (
    WorkerMatch,
    choose_numbering,
    expect,
    infer_failed,
    inferred_commits,
    pair,
    unseen_syncs,
)
from ftrun.check.numbering import prove as prove_numbering
from ftrun.check.numerics import Numerics, check_numerics
from ftrun.check.observe import NUMBERINGS, WorkerObs, comms_by_file, observe
from ftrun.check.overlap import overlap_of
from ftrun.check.problems import require_evidence, run_problems
from ftrun.check.result import Report, ReportSchedule, StepNumbering
from ftrun.check.workers import Worker, assign
from ftrun.errors import BadInput
from ftrun.event_log import read_event_log
from ftrun.schedule import ReleaseBehaviour, Schedule
from ftrun.torchft_compat import release_behaviour
from ftrun.trace.discover import Inputs, discover
from ftrun.trace.forked import map_forked
from ftrun.trace.load import MAX_TRACE_BYTES
from ftrun.trace.spans import TraceSpans, extract, no_steps
from ftrun.trace.stream import TraceFile

# (replica, rank) -> its event log's records
EventLogs = dict[tuple[int, int], list[layout.EventRecord]]


def analyze(
    paths: Sequence[Path],
    *,
    fragments: int | None = None,
    sync_every: int | None = None,
    fragment_sync_delay: int | None = None,
    step_numbering: str | None = "top",
    allow_failed_commits: bool = False,
    merge_jobs: bool = False,
    max_trace_bytes: int = MAX_TRACE_BYTES,
) -> Report:
    """Check the traces under ``paths`` (run dir, folder or files). ``BadInput`` on bad input;
    ``NotChecked`` when they hold no evidence to judge (``ftrun.check.provenance``).

    A failed commit no injected fault explains fails the verdict unless ``allow_failed_commits``;
    traces of different runs are refused unless ``merge_jobs``; each file is read up to
    ``max_trace_bytes`` (``ftrun.trace.load``).
    """
    inputs = discover([Path(p) for p in paths])
    step_numbering = _numbering(inputs, step_numbering)
    spans, workers, logs = _load(inputs, max_trace_bytes, merge_jobs)
    schedule = schedule_for(inputs, fragments, sync_every, fragment_sync_delay)
    faults = fault_marks(inputs.run_dirs, inputs.manifests, logs) if inputs.manifest is not None else FiredFaults()
    failed_commits = commit_checks.from_logs(logs)
    model = _commit_model(inputs, schedule, faults, workers, logs)
    failed = {(w.replica, w.rank): model.stalled(w.replica, failed_commits) for w in workers}
    offset, numbering, numbering_problems = choose_numbering(
        workers, schedule, failed, step_numbering, faults, prove_numbering(spans)
    )

    seen = [observe(w, schedule.window, offset) for w in workers]  # 1. observe
    classes = RunIdentities(inputs.manifest, seen, schedule)  # 2. identify: signature classes
    matches = _expected(seen, schedule, failed, faults)  # 3. expect/match
    inferred = infer_failed(matches, {r for r, _ in logs}, classes, model, failed_commits)
    for m in matches:
        m.pairs = pair(m.expected, m.seen.obs, schedule.window)
    ids = classes.label(seen, [m.pairs for m in matches])  # 2. identify: labels, anchored on the matches
    log_notes, log_problems = fragment_log.apply(_fragment_logs(inputs), seen, ids, schedule)  # torchft's own lines
    failed_commits += inferred_commits(inferred, ids)
    commit_checks.explain(failed_commits, faults, schedule)
    results, reports = event_results(matches, ids, schedule)  # 4. figures
    cross = cross_replica(matches, results)  # 5. cross-replica

    notes = _once(spans) + classes.notes(seen, ids) + log_notes + _commit_notes(seen, logs, classes, schedule)
    notes += _numbering_note(numbering)
    traced = {w.replica for w in workers}
    problems = run_problems(inputs, traced, faults, notes, logs, failed_commits, allow_failed_commits)  # 6. problems
    problems.by_class["numbering"] = numbering_problems
    problems.by_class["fragment log"] = log_problems
    require_evidence(seen, results)
    numerics = run_numerics(inputs, logs, seen, faults)
    ok = all(r.ok for r in results) and all(c.ok for c in cross) and not problems.lines and numerics.ok
    _describe(faults, traced)
    report = Report(
        verdict="pass" if ok else "fail",
        mode="manifest" if inputs.manifest is not None else "foreign",
        files=[str(f.path) for f in inputs.files],
        replicas=sorted(traced),
        schedule=ReportSchedule.of(schedule),
        step_numbering=numbering,
        workers=reports,
        events=results,
        cross_replica=cross,
        run_dir=str(inputs.run_dir) if inputs.run_dir else None,
        notes=notes,
        run_dirs=[str(p) for p in inputs.run_dirs],
        job_id=inputs.job_id,
        faults=[m.row() for m in faults.marks] + [v.row() for v in faults.votes],
        agreement=problems.agreement,
        numerics=numerics.record(),
        run_problems=problems.lines,
        run_problems_by_class=problems.by_class,
        failed_commits=sorted(failed_commits, key=lambda c: (c.replica, c.rank, c.sync_step)),
        versions=dict(inputs.manifest.versions) if inputs.manifest is not None and inputs.manifest.versions else None,
        spans={str(f.path): sp for f, sp in zip(inputs.files, spans, strict=True)},
        comms=comms_by_file(seen),
    )
    report.overlap = overlap_of(report)
    return report


def _expected(
    seen: list[WorkerObs], schedule: Schedule, failed: dict[tuple[int, int], list[int]], faults: FiredFaults
) -> list[WorkerMatch]:
    """Each worker's expected events, without its stalled cycles and the steps its faults lost."""
    return [
        expect(wo, schedule, failed[(wo.worker.replica, wo.worker.rank)], faults.lost(wo.worker.replica)) for wo in seen
    ]


def _describe(faults: FiredFaults, traced: set[int]) -> None:
    """Each fault that fired: whether its replica left a trace, and its line."""
    for mark in faults.marks:
        mark.has_trace = mark.replica in traced
        mark.text = describe(mark)


def _commit_model(
    inputs: Inputs, schedule: Schedule, faults: FiredFaults, workers: list[Worker], logs: EventLogs
) -> commit_checks.CommitModel:
    """What decides whether a commit failed (``ftrun.check.commits``), told what the logs saw."""
    model = commit_checks.CommitModel(
        schedule, faults, _release(inputs), commit_checks.heal_steps(logs), _groups(inputs, workers, logs)
    )
    model.saw_logged(logs)
    return model


def _numbering_note(numbering: StepNumbering) -> list[str]:
    """How ``ProfilerStep``s were numbered, when not by ftrun's own step spans."""
    if numbering.used == "ftrun::step":
        return []
    how = f"proven: {numbering.evidence}" if numbering.proven else f"as given, not proven: {numbering.evidence}"
    return [f"step numbering '{numbering.used}' ({how})"]


def _numbering(inputs: Inputs, step_numbering: str | None) -> str:
    """The ``ProfilerStep`` numbering asked for: not given, what the run recorded (ftrun launch), else top."""
    if step_numbering is None:
        step_numbering = inputs.manifest.step_numbering if isinstance(inputs.manifest, layout.LaunchManifest) else "top"
    if step_numbering not in (*NUMBERINGS, "auto"):
        raise BadInput(f"--step-numbering {step_numbering!r}: expected top, end or auto")
    return step_numbering


def _groups(inputs: Inputs, workers: list[Worker], logs: EventLogs) -> set[int]:
    """The job's replica groups the check knows of: traced, logged, and the manifest's count
    (a group neither traced nor logged is taken to have committed: ``ftrun.check.commits``)."""
    known = {w.replica for w in workers} | {r for r, _ in logs}
    m = inputs.manifest
    if isinstance(m, layout.Manifest | layout.LaunchManifest) and m.replicas > 0:
        known |= set(range(m.replicas))
    return known


def _release(inputs: Inputs) -> ReleaseBehaviour:
    """The failed-commit behaviour of the torchft the run recorded (traces alone: 0.2's, which
    the nightly shares: ``ftrun.torchft_compat.release_behaviour``)."""
    versions = inputs.manifest.versions if inputs.manifest is not None else None
    return release_behaviour(versions.get("torchft_distribution") if versions else None)


def _load(inputs: Inputs, max_trace_bytes: int, merge_jobs: bool) -> tuple[list[TraceSpans], list[Worker], EventLogs]:
    """Each trace's spans, the workers they belong to, and the event logs. Evidence first: a trace
    that is not torchft's, or traces of two runs, are refused before any schedule is asked for
    (flags cannot make them checkable)."""

    def read(path: Path) -> tuple[TraceSpans, provenance.Header]:  # read in chunks; the header keys kept in trace.meta
        trace = TraceFile(path, max_trace_bytes)
        return extract(path, trace, require_steps=False), provenance.header(trace.meta)

    # several files at once where that pays (ftrun.trace.forked.map_forked); the same results
    # and the same first error as reading them in turn
    read_all = map_forked(read, [f.path for f in inputs.files])
    spans = [sp for sp, _ in read_all]
    headers = {f.path: h for f, (_, h) in zip(inputs.files, read_all, strict=True)}
    provenance.require_torchft(spans)
    for sp in spans:
        if not sp.steps:  # a torchft trace without step spans: nothing to place its events in
            raise no_steps(sp.path)
    workers = assign(inputs.files, spans)
    logs: EventLogs = {k: read_event_log(p, strict=True) for k, p in sorted(inputs.event_logs.items())}
    provenance.check_one_run(workers, headers, logs, merge_jobs)
    return spans, workers, logs


def _fragment_logs(inputs: Inputs) -> dict[int, fragment_log.FragmentLog]:
    """Each replica group's fragments as torchft's log lines name them, from the run dirs' group
    logs (``ftrun.check.fragment_log``); groups without such lines are left out."""
    out: dict[int, fragment_log.FragmentLog] = {}
    for rd in inputs.run_dirs:
        logs = sorted((rd / layout.LOGS).glob("replica*.log")) if (rd / layout.LOGS).is_dir() else []
        for p in logs:
            number = p.stem.removeprefix("replica")
            if number.isdigit() and int(number) not in out:
                got = fragment_log.read_fragment_log(p, int(number))
                if got is not None:
                    out[int(number)] = got
    return out


def _commit_notes(seen: list[WorkerObs], logs: EventLogs, classes: RunIdentities, schedule: Schedule) -> list[str]:
    """What the check assumed about commits it could not see (no event log)."""
    if logs:
        return []
    notes = []
    blind = [o for wo in seen for o in wo.obs if o.sync is not None and o.sync.committed is None]
    if blind and (schedule.fragments < 2 or not classes.distinct):
        why = (
            "every send carries the same fragment"
            if schedule.fragments < 2
            else "the sends' signatures do not tell the fragments apart"
        )
        notes.append(f"failed commits cannot be inferred from this trace ({why}) and there is no event log")
    if any(unseen_syncs(wo, schedule) for wo in seen):
        notes.append("no event log: commits before and between the captured steps are assumed to have succeeded")
    return notes


def run_numerics(inputs: Inputs, logs: EventLogs, seen: list[WorkerObs], faults: FiredFaults) -> Numerics:
    """The numeric check (``ftrun.check.numerics``) of the merged event logs; nothing is checked
    when only some of the job's groups were given, or the run had ``--no-sketches``; ``faults``
    may explain a missing contribution sketch (a group killed mid-round). Damaged or
    missing records (the logs against themselves and ``seen``'s syncs: ``ftrun.check.log_evidence``)
    are its problems all the same."""
    from ftrun.check.log_evidence import evidence_problems, traced_syncs

    m = inputs.manifest
    sketches_on = m.config.profiling.sketches if isinstance(m, layout.Manifest) else None
    partial = None
    if isinstance(m, layout.Manifest) and logs and len(inputs.groups()) < m.replicas:
        partial = (
            f"only replica group(s) {inputs.groups()} of the job's {m.replicas} given (give every group's run dir)"
        )
    hook_why = None
    if isinstance(m, layout.LaunchManifest):  # what ftrun launch's hook found in the script
        from ftrun.launch.autohook.status import launch_numerics

        sketches_on, hook_why = launch_numerics(inputs.run_dirs, Path(m.script).name)
    out = check_numerics(logs, sketches_on, partial, faults)
    if hook_why and out.status != "checked":
        out.why = hook_why
    out.evidence(evidence_problems(logs, traced_syncs(seen)))
    return out


def _once(spans: list[TraceSpans]) -> list[str]:
    """What the traces cannot tell, each kind of note said once: the first file's, with how many
    more files said the same (a note's kind: its text after the file name, numbers aside)."""
    first: dict[str, str] = {}
    more: dict[str, int] = {}
    for sp in spans:
        for n in sp.notes:
            kind = re.sub(r"[0-9.]+", "#", n.split(": ", 1)[-1])
            if kind in first:
                more[kind] += 1
            else:
                first[kind], more[kind] = n, 0
    return [n + (f" (likewise in {more[k]} more trace file(s))" if more[k] else "") for k, n in first.items()]
