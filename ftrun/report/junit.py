"""JUnit XML of a check (``--junit FILE`` of inspect-trace, compare and sweep), for CI systems.

One ``testcase`` per checked event class per worker — ``sends``, ``syncs``, ``commits`` (classname
``replica{r}.rank{g}``) — plus the run-wide classes ``agreement`` (replicas agree on the fragment
of every event and on the synced parameters), ``numerics`` (only when the report carries the
numeric check) and ``traces`` (only when a replica has none); one per cell for a sweep. A class
with no evidence gets no case: nothing passes on zero evidence. A failing case's ``failure``
lists the problem lines, in the check's words (replica, fragment, step). Every problem of the
report lands in some failing case (the rest, if any, in ``other``). Renders only: the command
writes the text through ``ftrun.output``.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec
from msgspec import UnsetType

from ftrun.check.result import EventResult, Report, numerics_of
from ftrun.layout import CompareReport, SweepResult

_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")  # not allowed in XML 1.0


@dataclass
class Case:
    classname: str
    name: str
    failures: list[str] = field(default_factory=list)  # problem lines; empty: passed
    skipped: str | None = None  # why it did not run
    out: str = ""  # what was checked
    time_s: float = 0.0


@dataclass
class Suite:
    name: str
    cases: list[Case]


def _events_case(classname: str, kind: str, events: list[EventResult]) -> Case | None:
    mine = [e for e in events if e.kind == kind]
    if not mine:
        return None
    bad = [e for e in mine if not e.ok]
    observed = sum(e.observed_step is not None for e in mine)
    return Case(
        classname,
        kind + "s",
        [str(e.problem) for e in bad],  # each names its step and fragment
        out=f"{len(mine)} {kind}(s) expected or observed, {observed} observed, {len(bad)} not as expected",
    )


def _commits_case(
    cls: str, report: Report, worker: tuple[int, int], mine: list[EventResult], commit_problems: list[str]
) -> Case | None:
    """The worker's commits: each failed commit no injected fault explains fails the case, unless
    the check accepted them (``--allow-failed-commits``: then the case says how many)."""
    failed = [c for c in report.failed_commits if (c.replica, c.rank) == worker]
    syncs_seen = sum(e.kind == "sync" and e.observed_step is not None for e in mine)
    if not syncs_seen and not failed:
        return None
    unexplained = [c for c in failed if not c.explained]
    lines = (
        [
            f"commit at sync step {c.sync_step} "
            f"(fragment {'?' if c.fragment is None else c.fragment}) "
            f"failed, no injected fault explains it ({c.source.replace('_', ' ')}: {c.evidence}"
            + (f"; torchft: {c.torchft_error})" if c.torchft_error else ")")
            for c in unexplained
        ]
        if commit_problems
        else []
    )
    accepted = (
        f"; {len(unexplained)} unexplained failed commit(s) accepted" if unexplained and not commit_problems else ""
    )
    return Case(
        cls,
        "commits",
        lines,
        out=f"{syncs_seen} sync(s) observed, {len(failed)} failed commit(s), "
        f"{len(failed) - len(unexplained)} explained by a fault{accepted}",
    )


def report_cases(report: Report, prefix: str = "") -> list[Case]:
    """The cases of one check report; ``prefix`` goes before every classname (compare: the run)."""
    cases: list[Case] = []
    covered: set[str] = set()
    commit_problems = report.run_problems_by_class.get("commits", [])
    # every worker with a trace, and any with failed commits only (an event log without a trace)
    workers = sorted(
        {(w.replica, w.rank) for w in report.workers} | {(c.replica, c.rank) for c in report.failed_commits}
    )
    for replica, rank in workers:
        cls = f"{prefix}replica{replica}.rank{rank}"
        mine = [e for e in report.events if e.replica == replica and e.rank == rank]
        for kind in ("send", "sync"):
            c = _events_case(cls, kind, mine)
            if c is not None:
                cases.append(c)
        covered |= {f"replica {e.replica} rank {e.rank}: {e.problem}" for e in mine if not e.ok}
        c = _commits_case(cls, report, (replica, rank), mine, commit_problems)
        if c is not None:
            cases.append(c)
    covered |= set(commit_problems)  # each worker with an unexplained failed commit has a failing case above
    run_cls = f"{prefix}run"
    agreement = report.run_problems_by_class.get("agreement", [])
    checked = report.agreement.commits_checked if report.agreement is not None else 0
    if report.cross_replica or checked or agreement:
        lines = [c.problem for c in report.cross_replica if not c.ok and c.problem] + agreement
        cases.append(
            Case(
                run_cls,
                "agreement",
                lines,
                out=f"{len(report.cross_replica)} step(s) compared across replicas, "
                f"fingerprints of {checked} commit(s)",
            )
        )
        covered |= set(lines)
    numerics = numerics_of(report)
    if numerics is not None:
        lines = [p.text for p in numerics.problems]
        cases.append(
            Case(
                run_cls,
                "numerics",
                lines,
                out=f"{numerics.checked} sync(s) checked, tolerance {msgspec.to_builtins(numerics.tolerance)}",
            )
        )
        covered |= set(lines) | {f"numerics: {x}" for x in lines}  # Report.problems() names them so
    traces = report.run_problems_by_class.get("traces", [])
    if traces:
        cases.append(Case(run_cls, "traces", list(traces)))
        covered |= set(traces)
    rest = [p for p in report.problems() if p not in covered]
    if rest or (not report.ok and not any(c.failures for c in cases)):
        cases.append(Case(run_cls, "other", rest or [f"verdict {report.verdict}"]))
    return cases


def to_xml(suites: Sequence[Suite]) -> str:
    root = ET.Element("testsuites", name="ftrun")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    total_time = 0.0
    for s in suites:
        n = {
            "tests": len(s.cases),
            "failures": sum(bool(c.failures) for c in s.cases),
            "errors": 0,
            "skipped": sum(c.skipped is not None for c in s.cases),
        }
        t = sum(c.time_s for c in s.cases)
        el = ET.SubElement(
            root, "testsuite", {"name": _clean(s.name), **{k: str(v) for k, v in n.items()}, "time": f"{t:.3f}"}
        )
        for c in s.cases:
            tc = ET.SubElement(
                el, "testcase", classname=_clean(c.classname), name=_clean(c.name), time=f"{c.time_s:.3f}"
            )
            if c.failures:
                f = ET.SubElement(tc, "failure", message=_clean(c.failures[0]), type="ftrun")
                f.text = _clean("\n".join(c.failures))
            elif c.skipped is not None:
                ET.SubElement(tc, "skipped", message=_clean(c.skipped))
            if c.out:
                ET.SubElement(tc, "system-out").text = _clean(c.out)
        for k in totals:
            totals[k] += n[k]
        total_time += t
    for k, v in totals.items():
        root.set(k, str(v))
    root.set("time", f"{total_time:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _clean(text: str) -> str:
    return _NOT_XML.sub("?", str(text))


def inspect_junit(report: Report) -> str:
    return to_xml([Suite("ftrun inspect-trace", report_cases(report))])


def compare_junit(result: CompareReport, names: list[str], reports: list[list[Report]]) -> str:
    """One suite per run checked (``NAME`` or ``NAME #k`` with ``--repeat``), plus ``--expect-hidden``."""
    suites = []
    for name, reps in zip(names, reports, strict=True):  # a name per configuration
        for i, r in enumerate(reps):
            label = name if len(reps) == 1 else f"{name} #{i + 1}"
            suites.append(Suite(f"ftrun compare: {label}", report_cases(r, prefix=f"{label}.")))
    e = result.expect_hidden
    if not isinstance(e, UnsetType):
        share = e.observed
        shown = "none measured" if share is None else f"{share:.4f}"
        suites.append(
            Suite(
                "ftrun compare",
                [
                    Case(
                        "compare",
                        "expect-hidden",
                        [] if e.ok else [f"{names[0]} hid {shown} of its communication, expected at least {e.min}"],
                        out=f"hidden share {shown}",
                    )
                ],
            )
        )
    return to_xml(suites)


_SKIPPED = ("invalid", "unavailable")


def sweep_junit(result: SweepResult) -> str:
    """One case per cell: pass passes; invalid and unavailable are skipped (with why); every
    other verdict fails with its problem."""
    cases = []
    for c in result.cells:
        v, problem = c.verdict, c.problem
        case = Case("sweep", c.name, time_s=float(c.wall_s or 0.0), out=f"verdict {v}")
        if v in _SKIPPED:
            case.skipped = f"{v}: {problem}" if problem else v
        elif v != "pass":
            case.failures = [f"{v}: {problem}" if problem else v]
        cases.append(case)
    return to_xml([Suite(f"ftrun sweep {result.name}", cases)])
