"""compare's two ways to its runs: train both configurations (``--repeat N`` times each,
alternating, on one link: ``ftrun.comparison.link``) under a new compare dir, or read two existing
runs (each one run dir or a job's group dirs)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Protocol

import msgspec

from ftrun import layout
from ftrun.check.metrics import measured_step_s
from ftrun.comparison.link import Calibration, default_link, recalibrated
from ftrun.comparison.outputs import COMPARE_FILES
from ftrun.comparison.specs import RunDirs, config_for, run_name_of, split_spec
from ftrun.config import RunConfig
from ftrun.errors import BadInput
from ftrun.launch.placement import threads_per_rank
from ftrun.launch.zygote import shared_imports
from ftrun.link_spec import Link
from ftrun.output import claim_output_dir, removed_if_empty_on_error
from ftrun.schedule import label as schedule_label


class Trainer(Protocol):
    """One training of a trained compare: ``ftrun train``'s own (``ftrun.commands.train.train``),
    given by the front door that runs compare (the training command sits above this package)."""

    def __call__(self, cfg: RunConfig, overwrite: bool) -> int: ...


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


def train_mode(
    specs: list[str],
    opts: Any,
    link_spec: Link | None,
    out_root: Path,
    json_out: bool,
    overwrite: bool,
    name: str | None,
    repeat: int,
    train: Trainer,
) -> tuple[list[str], RunDirs, Path, layout.CompareLink]:
    """Train both configurations (``repeat`` times each, alternating, each with ``train``) on one
    link under a new compare dir. Returns (names, run dirs per configuration, compare dir, link info)."""

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
    # every training's agents forked by one zygote, which imports torch and torchft once (started
    # at the first group: after the calibration, whose measured step must not share the CPUs with it)
    with removed_if_empty_on_error(cmp_dir), shared_imports():  # a failed first run leaves no empty compare dir
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
            train(cfg, overwrite=overwrite or again)
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
