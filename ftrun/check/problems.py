"""Stage 6 of the check, problems: what fails the verdict, one line each.

* an event's own problem (``event_problem``): missing, unexpected, at another step than
  expected, or moving another fragment than expected (or one the evidence contradicts);
* run problems (``run_problems`` -> ``RunProblems``), by what was checked: ``traces`` (a
  replica group without a trace that no fault explains), ``agreement`` (replicas whose synced
  parameters differ after a commit, from the event logs' fingerprints), ``commits`` (failed
  commits no injected fault explains, unless allowed); ``logged_commit_problems``: the same
  failed-commit rule on the event logs alone, for a run without traces;
* ``require_evidence``: never PASS on zero evidence (``NotChecked``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from ftrun.check import commits as commit_checks
from ftrun.check.agreement import Agreement, check_agreement
from ftrun.check.evidence import Identity
from ftrun.check.expect import schedule_for
from ftrun.check.fired_faults import FiredFaults, fault_marks
from ftrun.check.observe import Obs, WorkerObs
from ftrun.check.result import AgreementCheck, EventResult
from ftrun.errors import NotChecked
from ftrun.event_log import read_event_log
from ftrun.layout import EventRecord, LaunchManifest, read_manifest
from ftrun.schedule import Event
from ftrun.trace.discover import Inputs, event_log_paths


def event_problem(kind: str, e: Event | None, o: Obs | None, identity: Identity | None) -> str | None:
    """What is wrong with one matched (expected, observed) event, one phrase; None when ok."""
    fragment = identity.fragment if identity is not None else None
    fr = "?" if fragment is None else fragment
    if e is None:
        assert o is not None, "a pair has an expected or an observed side"
        where = f"at step {o.step}" if o.step is not None else "outside every step span"
        return f"unexpected {kind} (fragment {fr}) {where}"
    if o is None or identity is None:
        return f"{kind} of fragment {e.fragment} missing at step {e.step}"
    problems = []
    if o.step != e.step:
        problems.append(f"{kind} of fragment {e.fragment} expected at step {e.step}, observed at step {o.step}")
    if identity.problem:
        problems.append(f"{kind} at step {o.step}: {identity.problem}")
    elif identity.labelled and identity.fragment != e.fragment:
        problems.append(f"{kind} at step {o.step}: fragment {fr}, expected fragment {e.fragment}")
    return "; ".join(problems) if problems else None


class RunProblems(msgspec.Struct):
    """Run-level problems by class (the report's ``run_problems_by_class``) and the agreement check."""

    by_class: dict[str, list[str]] = msgspec.field(default_factory=dict)
    agreement: AgreementCheck | None = None  # None: no event logs, nothing checked

    @property
    def lines(self) -> list[str]:
        return [p for ps in self.by_class.values() for p in ps]


def run_problems(
    inputs: Inputs,
    traced: set[int],
    faults: FiredFaults,
    notes: list[str],
    logs: dict[tuple[int, int], list[EventRecord]],
    failed_commits: list[commit_checks.FailedCommit],
    allow_failed_commits: bool,
) -> RunProblems:
    """The run's problems (module docstring); notes a job of which only some groups were given."""
    out = RunProblems({"traces": missing_traces(inputs, traced, faults, notes), "agreement": [], "commits": []})
    if logs:
        ag = check_agreement(logs)
        out.agreement = AgreementCheck(ag.ok, ag.commits_checked, ag.disagreements)
        out.by_class["agreement"] = disagreements(ag)
    if not allow_failed_commits:
        out.by_class["commits"] = unexplained_failed_commits(failed_commits)
    return out


def require_evidence(seen: Sequence[WorkerObs], results: Sequence[EventResult]) -> None:
    """``NotChecked`` when a worker shows no send or sync, or nothing was checked at all."""
    unseen = [f"replica {wo.worker.replica} rank {wo.worker.rank}" for wo in seen if not wo.obs]
    if unseen or not results:  # never PASS on zero evidence (require_torchft makes this rare)
        raise NotChecked(f"nothing checked: no torchft send or sync observed for {', '.join(unseen) or 'any worker'}")


def missing_traces(inputs: Inputs, traced: set[int], faults: FiredFaults, notes: list[str]) -> list[str]:
    """Run problems: a replica group of the run without a trace that no fault explains. Notes a
    job of which only some groups were given."""
    problems: list[str] = []
    if inputs.manifest is not None and inputs.whole_run:
        set_aside = launch_set_aside(inputs.manifest)
        for r in inputs.groups():
            if r not in traced and r not in set_aside and not faults.explains_missing_trace(r):
                problems.append(f"no trace for replica {r} (no fault explains it)")
        total = inputs.manifest.replicas
        if len(inputs.run_dirs) >= 1 and inputs.groups() and len(inputs.groups()) < total:
            notes.append(
                f"job has {total} replica groups; inspected group(s) {inputs.groups()} "
                "(give every group's run dir to check them all)"
            )
    return problems


def launch_set_aside(m: Any) -> set[int]:
    """``ftrun launch``'s groups whose missing trace it explains: a ``--kill`` fired on them, or
    their traces were set aside (a relaunched incarnation's). Other manifests: none."""
    if not isinstance(m, LaunchManifest):
        return set()
    unchecked = m.traces_not_checked if isinstance(m.traces_not_checked, list) else []
    return {f.replica for f in m.launch_faults.fired} | {t.replica for t in unchecked}


def disagreements(ag: Agreement) -> list[str]:
    """Run problems: replicas whose synced parameters differ after a commit (``check_agreement``)."""
    out = []
    for d in ag.disagreements:
        seen = ", ".join(
            f"replica {r}: fragment {v.fragment} {v.fingerprint[:12]}" for r, v in sorted(d.replicas.items())
        )
        quorum = "" if d.quorum_id is None else f" in quorum {d.quorum_id}"
        out.append(
            f"replicas disagree on the synced parameters after manager step {d.manager_step}{quorum} "
            f"(rank {d.rank}): {seen}"
        )
    return out


def unexplained_failed_commits(failed_commits: list[commit_checks.FailedCommit]) -> list[str]:
    """Run problems: per worker, the failed commits no injected fault explains: their sync steps,
    what showed them and the torchft errors logged for them (``commits.torchft_errors``)."""
    by_worker: dict[tuple[int, int], list[commit_checks.FailedCommit]] = {}
    for c in failed_commits:
        if not c.explained:
            by_worker.setdefault((c.replica, c.rank), []).append(c)
    out = []
    for (rep, rank), cs in sorted(by_worker.items()):
        how = "; ".join(sorted({f"{c.source.replace('_', ' ')}: {c.evidence}" for c in cs}))
        errors = commit_checks.torchft_errors(cs)  # why, where the event logs say it
        how += f"; {errors}" if errors else ""
        out.append(
            f"replica {rep} rank {rank}: {len(cs)} commit(s) failed "
            f"(sync steps {', '.join(str(c.sync_step) for c in cs)}; "
            f"{how}) and no injected fault explains it (--allow-failed-commits to accept)"
        )
    return out


def logged_commit_problems(run_dirs: Sequence[Path]) -> list[str]:
    """The failed-commit rule (``unexplained_failed_commits``) on the event logs alone, for run
    dir(s) of one job whose traces were not captured (``ftrun.commands.run_check``): each rank's
    ``commit: false`` records (``commits.from_logs``), less those a fired fault explains
    (``commits.explain``: the manifests' faults and schedule). Commits only a trace shows failed
    (inferred ones) are not seen. ``BadInput`` when a manifest or its schedule cannot be read."""
    dirs = list(run_dirs)
    manifests = [read_manifest(rd) for rd in dirs]
    paths: dict[tuple[int, int], Path] = {}
    for rd, m in zip(dirs, manifests, strict=True):  # a manifest per run dir, as discover merges them
        for k, p in event_log_paths(rd, m).items():
            paths.setdefault(k, p)
    logs: dict[tuple[int, int], list[EventRecord]] = {k: read_event_log(p) for k, p in sorted(paths.items())}
    failed = commit_checks.from_logs(logs)
    if failed:
        schedule = schedule_for(Inputs([], dirs[0], manifests[0]), None, None, None)
        commit_checks.explain(failed, fault_marks(dirs, manifests, logs), schedule)
    return unexplained_failed_commits(failed)
