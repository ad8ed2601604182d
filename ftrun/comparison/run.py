"""``ftrun compare A B``'s pipeline: the options checked, both runs trained or read
(``ftrun.comparison.modes``), checked, measured and recorded (``ftrun.comparison.outputs``), and the
JUnit XML of ``--junit``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ftrun import layout
from ftrun.check.result import Report
from ftrun.comparison.modes import Trainer, read_mode, train_mode
from ftrun.comparison.outputs import outputs
from ftrun.comparison.specs import SHARED_SETTINGS, RunDirs, resolve_specs, split_spec
from ftrun.config import flag
from ftrun.errors import BadInput
from ftrun.link_spec import parse_link
from ftrun.output import atomic_write, check_name, check_target, check_writable


def run_compare(
    specs: list[str],
    opts: Any,
    expect_hidden: float | None,
    overwrite: bool = False,
    name: str | None = None,
    repeat: int = 1,
    progress: bool = True,
    junit: Path | None = None,
    *,
    train: Trainer,
) -> tuple[layout.CompareReport, list[list[Report]]]:
    """Train or read both runs, check and measure them, write the outputs (and ``junit``).
    Returns (report.json's result, each configuration's check reports). ``opts``: the
    ``Overrides`` of compare's config flags (its ``link`` and ``out`` are compare's own);
    ``progress``: the training lines on stdout; ``train``: each training of train mode."""
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
            specs, opts, link_spec, out_root, not progress, overwrite, name, repeat, train
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
