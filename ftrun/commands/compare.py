"""``ftrun compare A B``: train two configurations (or read two run dirs), check both, report.

Train mode: A and B are presets (``streaming``, ``baseline``) or config TOML files; both runs
share model, data, seed, replicas, steps and link, and live under ``<out>/compare-<time>/``.
Read mode: A and B are existing run dirs; a comma-separated list of run dirs (``A-group0,A-group1``)
is the replica groups of one multi-host job, read as one run (as ``inspect-trace DIR...`` does).
Either way each run is checked with the very ``inspect-trace`` analysis
(``ftrun.check.analyze.analyze``) and measured by ``ftrun.check.metrics``; ``ftrun.report``
renders report.md, timeline.png and the terminal table. Writes report.json too.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import msgspec

from ftrun import layout
from ftrun.chaos_summary import GoodputComparison
from ftrun.check.metrics import measured_step_s
from ftrun.check.result import Report
from ftrun.commands.compare_link import Calibration, default_link, recalibrated
from ftrun.config import PRESETS, RunConfig, build, flag, for_command, load_toml
from ftrun.errors import BadInput
from ftrun.json_out import report_json
from ftrun.launch.placement import threads_per_rank
from ftrun.link_spec import Link, parse_link
from ftrun.output import (
    atomic_write,
    check_name,
    check_target,
    check_writable,
    claim_output_dir,
    removed_if_empty_on_error,
)
from ftrun.schedule import label as schedule_label


def _is_run_dir(p: Path) -> bool:
    return (p / layout.MANIFEST).is_file()


def split_spec(spec: str) -> list[Path]:
    """The run dirs of one read-mode spec: ``DIR`` or ``DIR,DIR,...`` (groups of one job)."""
    return [Path(x) for x in spec.split(",") if x.strip()]


def run_name_of(dirs: list[Path]) -> str:
    """A run's display name: the dir name, or the job's name for several group dirs (``job-group0`` -> ``job``)."""
    if len(dirs) == 1:
        return dirs[0].name
    names = {re.sub(r"-group\d+$", "", d.name) for d in dirs}
    return names.pop() if len(names) == 1 else "+".join(d.name for d in dirs)


def _spec_kind(s: str) -> str:
    p = Path(s)
    if s in PRESETS or (p.suffix == ".toml" and p.is_file()):
        return "train"
    if "," in s:
        dirs = split_spec(s)
        if not dirs:
            raise BadInput(f"compare: {s!r} names no run dir")
        for d in dirs:
            if not d.exists():
                raise BadInput(f"compare: {d} (in {s}) is not an existing run dir")
            if not (d.is_dir() and _is_run_dir(d)):
                raise BadInput(f"compare: {d} (in {s}) is not an ftrun run dir (no {layout.MANIFEST})")
        return "read"
    if p.is_dir() and _is_run_dir(p):
        return "read"
    if p.suffix == ".toml":
        raise BadInput(f"compare: config file {s} not found")
    if p.exists():
        raise BadInput(f"compare: {s} is not an ftrun run dir (no {layout.MANIFEST})")
    raise BadInput(f"compare: {s} is neither a preset ({', '.join(PRESETS)}), a config .toml, nor an existing run dir")


def resolve_specs(specs: list[str]) -> str:
    """'train' when every spec is a preset or TOML file, 'read' when every spec is a run dir
    (or a comma-separated list of the run dirs of one job's replica groups)."""
    if len(specs) != 2:
        raise BadInput(f"compare: expected two runs (presets, config files or run dirs), got {len(specs)}")
    kinds = [_spec_kind(s) for s in specs]
    if kinds[0] != kinds[1]:
        raise BadInput("compare: give two presets/config files (to train) or two run dirs (to read), not a mix")
    return kinds[0]


def config_for(spec: str, opts: Any) -> RunConfig:
    """Run ``spec`` (a preset or a TOML file) with the shared settings ``opts`` (``Overrides``)."""
    if spec in PRESETS:
        return build(preset=spec, overrides=msgspec.structs.replace(opts, mode=spec))
    return build(file_values=load_toml(spec), overrides=opts)


DRIFT = 0.25  # a first run whose measured step is this far from the calibrated one: recalibrate


def drifted(calibrated_s: float, measured_s: float | None) -> bool:
    """Whether a run's measured compute step is more than ``DRIFT`` away from the calibrated one."""
    return measured_s is not None and abs(measured_s / calibrated_s - 1.0) > DRIFT


def repeat_plan(names: list[str], repeat: int) -> list[tuple[int, str]]:
    """The trainings of ``--repeat N``, in order: (config index, run name). The order alternates
    (A then B, B then A, ...) so that drift in the machine's load does not favour one side."""
    plan = []
    for i in range(repeat):
        for k in (0, 1) if i % 2 == 0 else (1, 0):
            plan.append((k, names[k] if repeat == 1 else f"{names[k]}-{i + 1}"))
    return plan


# The training settings both runs of a trained compare share: ``ftrun compare``'s config flags
# (``ftrun.config``, the fields that take ``compare``) but the link and the output root.
SHARED_SETTINGS = tuple(f.key for f in for_command("compare") if f.key not in ("link", "out"))


def compare(
    specs: list[str],
    opts: Any,
    json_out: bool,
    expect_hidden: float | None,
    overwrite: bool = False,
    name: str | None = None,
    repeat: int = 1,
    junit: Path | None = None,
) -> int:
    """Exit 0 when both schedules pass (and ``--expect-hidden`` holds), 1 otherwise."""
    result, _ = run_compare(
        specs, opts, expect_hidden, overwrite=overwrite, name=name, repeat=repeat, progress=not json_out, junit=junit
    )
    if json_out:
        print(report_json(result))
    else:
        from ftrun.report.compare_view import print_report

        print_report(result)
    return 0 if result.ok else 1


def run_compare(
    specs: list[str],
    opts: Any,
    expect_hidden: float | None,
    overwrite: bool = False,
    name: str | None = None,
    repeat: int = 1,
    progress: bool = True,
    junit: Path | None = None,
) -> tuple[layout.CompareReport, list[list[Report]]]:
    """Train or read both runs, check and measure them, write the outputs (and ``junit``).
    Returns (report.json's result, each configuration's check reports). ``opts``: the
    ``Overrides`` of compare's config flags (its ``link`` and ``out`` are compare's own);
    ``progress``: the training lines on stdout."""
    link, out = opts.link, opts.out
    if repeat < 1:
        raise BadInput(f"--repeat {repeat}: must be at least 1")
    if expect_hidden is not None and not 0.0 <= expect_hidden <= 1.0:
        raise BadInput(f"--expect-hidden {expect_hidden}: must be between 0 and 1")
    if name is not None:
        check_name("--name", name)  # one directory under --out, never elsewhere
    # Parse --link up front so that a bad one is exit 2 in read mode too (it used to be ignored there).
    link_spec = parse_link(link) if link else None
    mode = resolve_specs(specs)
    if junit is not None:  # before training or reading: never write into a run dir being compared
        check_target(junit, "--junit", reading=[d for s in specs for d in split_spec(s)] if mode == "read" else [])
        check_writable(junit, "--junit", overwrite)  # nor onto a user's file (ftrun.output)
    out_root = Path(out or "profiles")
    # per configuration: its run dirs (train), its jobs' group dirs (read)
    run_dirs: RunDirs
    if mode == "train":
        names, run_dirs, cmp_dir, link_info = train_mode(
            specs, opts, link_spec, out_root, not progress, overwrite, name, repeat
        )
    else:
        if link_spec is not None:
            raise BadInput(
                f"--link {link}: applies only when compare trains; run dirs keep the link they were trained with"
            )
        if repeat != 1:
            raise BadInput(f"--repeat {repeat}: applies only when compare trains; give run dirs without it")
        given = [k for k in SHARED_SETTINGS if getattr(opts, k) is not None]
        if given:
            raise BadInput(
                f"{flag(given[0])}: a training setting applies only when compare trains; "
                "run dirs keep the settings they were trained with"
            )
        names, run_dirs, cmp_dir, link_info = read_mode(specs, out_root, overwrite, name)
    result, reports = outputs(names, run_dirs, cmp_dir, link_info, expect_hidden, overwrite)
    if junit is not None:
        from ftrun.report.junit import compare_junit

        atomic_write(junit, compare_junit(result, names, reports), "--junit", overwrite)
    return result, reports


# per configuration, its repeats: each a run dir (train) or a job's group dirs (read)
RunDirs = list[list[Path | list[Path]]]


def train_mode(
    specs: list[str],
    opts: Any,
    link_spec: Link | None,
    out_root: Path,
    json_out: bool,
    overwrite: bool,
    name: str | None,
    repeat: int,
) -> tuple[list[str], RunDirs, Path, layout.CompareLink]:
    """Train both configurations (``repeat`` times each, alternating) on one link under a new
    compare dir. Returns (names, run dirs per configuration, compare dir, link info)."""
    from ftrun.commands.train import train

    def say(text: str) -> None:
        if not json_out:
            print(text, flush=True)

    opts = msgspec.structs.replace(opts, link=None, run_name=None, out=str(out_root))  # out: validated per run
    cfgs = [config_for(s, opts) for s in specs]
    names = [Path(s).stem if s.endswith(".toml") else s for s in specs]
    if names[0] == names[1]:
        names = [f"{names[0]}-a", f"{names[1]}-b"]
    cmp_dir = out_root / (name or f"compare-{time.strftime('%Y%m%d-%H%M%S')}")
    if cmp_dir.exists() and not overwrite:
        raise BadInput(f"compare: {cmp_dir} already exists (pass --overwrite or another --name)")
    ranks = cfgs[0].hosts.replicas * cfgs[0].hosts.nproc_per_replica
    threads = threads_per_rank(ranks)
    calib: Calibration | None = None
    if link_spec is not None:
        spec = link_spec
        link_info = layout.CompareLink(chosen="by --link")
    elif (configured := cfgs[0].emulation.parsed_link()) is not None:
        spec = configured
        link_info = layout.CompareLink(chosen="by config")
    else:
        say(f"calibrating: one training step of the model on {ranks} concurrent process(es) ...")
        spec, calib = default_link(cfgs[0], threads)
        link_info = calib.link_info()
        say(
            f"calibrated step {calib.step_s * 1e3:.1f} ms -> link {spec.description}: "
            f"plain DiLoCo's sync {calib.cost.plain_sync_s * 1e3:.0f} ms = {calib.cost.share_of_h:.2f} "
            f"of H={cfgs[0].schedule.sync_every} steps"
        )
    per_cfg: RunDirs = [[], []]
    plan = repeat_plan(names, repeat)
    with removed_if_empty_on_error(cmp_dir):  # a failed first run leaves no empty compare dir
        claim_output_dir(cmp_dir, "compare", COMPARE_FILES, overwrite)
        i, again = 0, False
        while i < len(plan):
            k, rn = plan[i]
            # check=False: compare checks every run itself (``outputs``), once
            cfg = cfgs[k].replaced(out=str(cmp_dir), run_name=rn, link=spec.as_flag(), check=False)
            say(
                f"training {rn}: {schedule_label(cfg.schedule)}, "
                f"{cfg.hosts.replicas} replica groups x {cfg.steps} steps, emulated link {spec.description} ..."
            )
            train(cfg, overwrite=overwrite or again, json_out=False, quiet=True)
            again = False
            if i == 0 and calib is not None and isinstance(link_info.recalibrated_from, msgspec.UnsetType):
                measured = measured_step_s(cmp_dir / rn, cfg.hosts.replicas)
                if measured is not None and drifted(calib.step_s, measured):
                    # the pilot step was not the step the run took (load, profiler): choose the link
                    # from the run's own measured step, and train this run again on it
                    spec, link_info, said = recalibrated(cfgs[0], calib, rn, measured, spec, link_info)
                    say(said)
                    again = True  # its run dir is ours: replaced
                    continue
            per_cfg[k].append(cmp_dir / rn)
            i += 1
    link_info = msgspec.structs.replace(
        link_info, bandwidth_bps=spec.bandwidth_bps, latency_s=spec.latency_s, emulated=True, describe=spec.description
    )
    return names, per_cfg, cmp_dir, link_info


def read_mode(
    specs: list[str], out_root: Path, overwrite: bool, name: str | None
) -> tuple[list[str], RunDirs, Path, layout.CompareLink]:
    """Two existing runs (each one or several group dirs). Returns (names, [[dirs]] per run,
    compare dir, the link as the runs recorded it)."""
    jobs = [split_spec(s) for s in specs]  # each run: its group dirs
    names = [run_name_of(dirs) for dirs in jobs]
    if names[0] == names[1]:
        names = [f"{names[0]}-a", f"{names[1]}-b"]
    cmp_dir = out_root / (name or f"compare-{names[0]}-vs-{names[1]}")
    if (cmp_dir / "report.json").exists() and not overwrite:
        raise BadInput(f"compare: {cmp_dir} already holds a report (pass --overwrite or another --name)")
    links = [layout.read_train_manifest(dirs[0]).link for dirs in jobs]
    l0 = links[0]
    link_info = layout.CompareLink(
        bandwidth_bps=l0.bandwidth_bps if l0 else None,
        latency_s=l0.latency_s if l0 else None,
        emulated=bool(l0 and l0.emulated),
        describe=l0.description if l0 else "loopback (no emulation)",
        chosen="as recorded in the runs" if links[0] == links[1] else "DIFFERENT links in the two runs",
    )
    run_dirs: RunDirs = [[dirs] for dirs in jobs]  # one repeat each
    return names, run_dirs, cmp_dir, link_info


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
