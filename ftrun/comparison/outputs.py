"""compare's record of its runs: every run checked (``inspect-trace``'s analysis) and measured
(``ftrun.check.metrics``), and the compare dir's files: report.json (its run dirs relative to
itself), report.md and timeline.png (rendered by ``ftrun.report``)."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from ftrun import layout
from ftrun.chaos_summary import GoodputComparison
from ftrun.check.result import Report
from ftrun.comparison.specs import RunDirs
from ftrun.json_out import report_json
from ftrun.output import atomic_write, check_target, claim_output_dir, removed_if_empty_on_error

COMPARE_FILES = (layout.REPORT_JSON, "report.md", "timeline.png")


def _breakdown(run: Path | list[Path]) -> list[layout.RecoveryRecord]:
    """The recovery breakdowns in a run's summary.json: a run dir's, or for a job's group dirs
    the first that has any (each host's summary breaks down the faults it saw); [] without one
    (``BadInput`` for a file that is not a summary)."""
    for d in run if isinstance(run, list) else [run]:
        if (Path(d) / layout.SUMMARY).exists() and (found := layout.read_train_summary(Path(d)).recovery):
            return found
    return []


def _goodput(names: list[str], run_dirs: RunDirs) -> GoodputComparison | None:
    """A chaos run beside its fault-free twin (``ftrun.check.chaos_run.goodput_comparison``) when
    one configuration ran with ``--chaos`` and the other not; None otherwise (or for a job's
    several group dirs: a chaos run has every group on one host)."""
    from ftrun.check.chaos_run import goodput_comparison

    repeats: list[list[Path]] = []
    for reps in run_dirs:
        dirs = [d if not isinstance(d, list) else (d[0] if len(d) == 1 else None) for d in reps]
        if any(d is None for d in dirs):
            return None
        repeats.append([Path(d) for d in dirs if d is not None])
    return goodput_comparison(names, repeats)


def _relative(paths: str, base: Path) -> str:
    """``paths`` (a run dir, or a job's group dirs joined by ","), each relative to ``base``."""
    return ",".join(os.path.relpath(os.path.abspath(p), os.path.abspath(base)) for p in paths.split(","))


def as_recorded(result: layout.CompareReport, cmp_dir: Path) -> layout.CompareReport:
    """``result`` as report.json records it: each run's run dirs relative to ``cmp_dir`` (the
    file's own dir), so that ``plan --check`` finds them from any cwd and after the runs and the
    compare dir move together (``ftrun.plan.check`` reads older, cwd-relative records too).
    What compare prints and returns keeps the paths as given."""

    def rel(d: str | None) -> str | None:
        return None if d is None else _relative(d, cmp_dir)

    runs = []
    for r in result.runs:
        repeats = r.repeat_runs
        if not isinstance(repeats, msgspec.UnsetType):
            repeats = [msgspec.structs.replace(x, run_dir=rel(x.run_dir)) for x in repeats]
        runs.append(
            msgspec.structs.replace(
                r, run_dir=rel(r.run_dir), run_dirs=[_relative(d, cmp_dir) for d in r.run_dirs], repeat_runs=repeats
            )
        )
    return msgspec.structs.replace(result, runs=runs)


def outputs(
    names: list[str],
    run_dirs: RunDirs,
    cmp_dir: Path,
    link_info: layout.CompareLink,
    expect_hidden: float | None,
    overwrite: bool = False,
) -> tuple[layout.CompareReport, list[list[Report]]]:
    """Check every run, measure it, and write report.json, report.md and timeline.png; returns
    the result and the check reports (per configuration, per repeat).
    ``run_dirs[k]``: the repeats of config k; each a run dir (train) or a job's group dirs (read).
    A failure anywhere (a full disk while drawing) leaves no compare dir this call made holding
    only its marker."""
    with removed_if_empty_on_error(cmp_dir):
        return _outputs(names, run_dirs, cmp_dir, link_info, expect_hidden, overwrite)


def _outputs(
    names: list[str],
    run_dirs: RunDirs,
    cmp_dir: Path,
    link_info: layout.CompareLink,
    expect_hidden: float | None,
    overwrite: bool = False,
) -> tuple[layout.CompareReport, list[list[Report]]]:
    """``outputs``' work."""
    from ftrun.check.analyze import analyze
    from ftrun.check.metrics import aggregate, run_metrics
    from ftrun.report.compare_view import conclusion, explanation, write_markdown
    from ftrun.report.timeline import draw, lanes_for_run, recovery_lanes

    reading = [q for reps in run_dirs for d in reps for q in (d if isinstance(d, list) else [d])]
    check_target(cmp_dir, "--name", reading=reading)  # never write into a run dir being compared
    with removed_if_empty_on_error(cmp_dir):
        # before any work: never onto a user's report.md in a dir ftrun did not make (ftrun.output)
        claim_output_dir(cmp_dir, "compare", COMPARE_FILES, overwrite)
        reports = [[analyze(d if isinstance(d, list) else [d]) for d in reps] for reps in run_dirs]
    runs = [
        aggregate([run_metrics(n, d, r) for d, r in zip(reps, reps_reports, strict=True)])
        for n, reps, reps_reports in zip(names, run_dirs, reports, strict=True)
    ]
    sync_s = link_info.plain_sync_s
    if not isinstance(link_info.calibrated_step_s, msgspec.UnsetType) and not isinstance(sync_s, msgspec.UnsetType):
        link_info = msgspec.structs.replace(
            link_info,
            measured_median_step_s={r.name: r.median_step_s for r in runs},
            # the regime the runs were really in: plain DiLoCo's sync over H measured steps
            plain_sync_share_of_measured_h={
                r.name: round(sync_s / (r.schedule.sync_every * r.median_step_s), 3)
                for r in runs
                if r.median_step_s and r.schedule is not None
            },
        )
    lanes = [lane for n, r in zip(names, reports, strict=True) for lane in lanes_for_run(n, r[0])]
    # each configuration's first run's faults: where its recovery went (summary.json's breakdown)
    rec_lanes = [
        lane for n, reps in zip(names, run_dirs, strict=True) for lane in recovery_lanes(n, _breakdown(reps[0]))
    ]
    repeats = len(run_dirs[0])
    timeline = draw(
        lanes,
        cmp_dir / "timeline.png",
        f"{names[0]} vs {names[1]} · link {link_info.describe}"
        + (" (emulated)" if link_info.emulated else "")
        + (f" · repeat 1 of {repeats} drawn (each configuration's first run)" if repeats > 1 else ""),
        overwrite=overwrite,
        recovery=rec_lanes,
    )
    verdict = "pass" if all(r.verdict == "pass" for r in runs) else "fail"
    expected: layout.ExpectHidden | msgspec.UnsetType = msgspec.UNSET
    if expect_hidden is not None:
        share = runs[0].hidden_comm_share  # the exact share, compared unrounded
        expected = layout.ExpectHidden(expect_hidden, share, share is not None and share >= expect_hidden, names[0])
        if not expected.ok:  # one verdict: never PASS printed (or "pass" in report.json) with exit 1
            verdict = "fail"
    result = layout.CompareReport(
        compare_dir=str(cmp_dir),
        runs=runs,
        link=link_info,
        conclusion=conclusion(runs),
        throughput=explanation(runs),
        # what each configuration ran on (its first run's manifest ``versions``)
        versions={n: r[0].versions for n, r in zip(names, reports, strict=True)},
        timeline=str(timeline),
        verdict=verdict,
        goodput=_goodput(names, run_dirs),
        expect_hidden=expected,
    )
    # strict JSON: a NaN figure is null, said in its notes
    atomic_write(cmp_dir / layout.REPORT_JSON, report_json(as_recorded(result, cmp_dir)), "compare", overwrite)
    write_markdown(result, cmp_dir / "report.md", overwrite)
    return result, reports
