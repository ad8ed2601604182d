"""The check a run says at its end: ``train`` and ``launch`` judge what they captured with the
``inspect-trace`` analysis (``ftrun.check.analyze.analyze``, as ``compare`` and ``sweep`` do) and
print the verdict line ``inspect-trace`` prints for the same run dir (``verdict_line``).

One helper for both commands: ``check_run`` gives the verdict as ``layout.RunCheck`` (what the
summary records) with the check's ``Report``; ``print_check`` prints its one line. Nothing
captured, or the check switched off, is "not checked" (never a pass); traces the analysis cannot
judge are "not checked" with the reason, and the caller ends on them (``Checked.raise_unjudged``).
The failed-commit rule reads the event logs, not traces, so it holds without traces too: a run
that captured none yet failed commits no injected fault explains FAILs, its schedule still "not
checked" (``why``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from ftrun import layout
from ftrun.errors import BadInput, NotChecked, RunFailed

if TYPE_CHECKING:
    from ftrun.check.result import Report

NO_TRACES = "no traces captured"
SKIPPED = "--no-check"
MAX_PROBLEMS = 5  # the summary's first problems; inspect-trace RUN_DIR lists them all


class Checked(msgspec.Struct, kw_only=True):
    """``check_run``'s answer: ``verdict`` for the summary; ``report`` the analysis (None: not
    run); ``judged``: False when traces were captured but the analysis could not judge them (the
    run fails: nothing was checked)."""

    verdict: layout.RunCheck
    report: Report | None = None
    judged: bool = True
    refused: BadInput | None = None

    def raise_unjudged(self) -> None:
        """Captured traces nothing could judge end the run as ``inspect-trace`` ends on them:
        bad input (exit 2) as it is, no evidence to judge (``NotChecked``) a failed run (exit 1)."""
        if not self.judged:
            raise self.refused or RunFailed(f"nothing checked: {self.verdict.why}")

    @property
    def failed(self) -> bool:
        """The check says the run failed: a FAIL, or captured traces nothing could judge."""
        return self.verdict.verdict == "fail" or not self.judged


def check_run(
    paths: Sequence[Path],
    traces: Sequence[str],
    *,
    enabled: bool = True,
    why_not: str | None = None,
    step_numbering: str | None = "top",
    fragments: int | None = None,
    sync_every: int | None = None,
    fragment_sync_delay: int | None = None,
) -> Checked:
    """Judge run dir(s) ``paths`` as ``inspect-trace PATHS`` does, when ``enabled`` and the run
    captured ``traces``; ``why_not``: a reason the caller knows it must not judge (e.g. only one
    host's group here). Bad or unjudgeable traces are not raised here (the caller writes its
    summary first): they are "not checked" with the one-line reason, ``judged`` False."""
    if not enabled:
        return Checked(verdict=layout.RunCheck(verdict="not checked", why=SKIPPED))
    if not traces:
        return _untraced(paths)
    if why_not is not None:
        return Checked(verdict=layout.RunCheck(verdict="not checked", why=why_not))
    from ftrun.check.analyze import analyze
    from ftrun.report.inspect_view import verdict_line

    try:
        report = analyze(
            list(paths),
            fragments=fragments,
            sync_every=sync_every,
            fragment_sync_delay=fragment_sync_delay,
            step_numbering=step_numbering,
        )
    except BadInput as e:  # captured, yet nothing judged: never a pass
        why = layout.RunCheck(verdict="not checked", why=str(e))
        return Checked(verdict=why, judged=False, refused=None if isinstance(e, NotChecked) else e)
    verdict = layout.RunCheck(
        verdict="pass" if report.ok else "fail",
        line=verdict_line(report).plain,
        problems=report.problems()[:MAX_PROBLEMS],
    )
    return Checked(verdict=verdict, report=report)


def _untraced(paths: Sequence[Path]) -> Checked:
    """No traces: the schedule is "not checked" (never a pass), yet the failed-commit rule of
    inspect-trace (``ftrun.check.problems.logged_commit_problems``) judges the event logs: failed
    commits no injected fault explains are a FAIL, with the schedule's ``why`` kept."""
    from ftrun.check.problems import logged_commit_problems

    try:
        problems = logged_commit_problems(paths)
    except BadInput as e:  # the run dir's own files unreadable: nothing judged, said with the reason
        return Checked(verdict=layout.RunCheck(verdict="not checked", why=f"{NO_TRACES}; event logs: {e}"))
    if not problems:
        return Checked(verdict=layout.RunCheck(verdict="not checked", why=NO_TRACES))
    line = (
        f"FAIL {len(problems)} problem(s) in the event logs; schedule not checked ({NO_TRACES}); first: {problems[0]}"
    )
    return Checked(verdict=layout.RunCheck(verdict="fail", line=line, why=NO_TRACES, problems=problems[:MAX_PROBLEMS]))


def print_check(checked: Checked) -> None:
    """The check's one line on stdout: the verdict line (as ``inspect-trace`` prints it), or
    "schedule not checked: WHY" (nothing when captured traces could not be judged: the error says
    it); without traces, the FAIL of failed commits the event logs show (``_untraced``)."""
    from ftrun.console import console, line, styled

    con = console()
    if checked.report is not None:
        from ftrun.report.inspect_view import verdict_line

        con.print(verdict_line(checked.report))
    elif checked.verdict.verdict == "fail" and checked.verdict.line is not None:
        con.print(line(("FAIL", "bold red"), checked.verdict.line.removeprefix("FAIL")))
    elif checked.judged:  # unjudged traces: the caller's one error line says why (raise_unjudged)
        con.print(styled(f"schedule not checked: {checked.verdict.why}", "dim"))
