"""``ftrun compare A B``: train two configurations (or read two run dirs), check both, report.

Train mode: A and B are presets (``streaming``, ``baseline``) or config TOML files; both runs
share model, data, seed, replicas, steps and link, and live under ``<out>/compare-<time>/``.
Read mode: A and B are existing run dirs; a comma-separated list of run dirs (``A-group0,A-group1``)
is the replica groups of one multi-host job, read as one run (as ``inspect-trace DIR...`` does).
Either way each run is checked with the very ``inspect-trace`` analysis
(``ftrun.check.analyze.analyze``) and measured by ``ftrun.check.metrics``; ``ftrun.report``
renders report.md, timeline.png and the terminal table. Writes report.json too.

This command parses nothing itself (``cli.py`` does), calls compare's pipeline
(``ftrun.comparison.run.run_compare``, giving it ``ftrun train`` for its trainings) and renders
its result: the terminal table or ``--json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ftrun.comparison.run import run_compare
from ftrun.config import RunConfig
from ftrun.json_out import report_json


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
        specs,
        opts,
        expect_hidden,
        overwrite=overwrite,
        name=name,
        repeat=repeat,
        progress=not json_out,
        junit=junit,
        train=train_quietly,
    )
    if json_out:
        print(report_json(result))
    else:
        from ftrun.report.compare_view import print_report

        print_report(result)
    return 0 if result.ok else 1


def train_quietly(cfg: RunConfig, overwrite: bool) -> int:
    """One training of a trained compare (``ftrun.comparison.modes.Trainer``): ``ftrun train``
    without its output (compare checks and renders every run itself), imported only when
    compare trains."""
    from ftrun.commands.train import train

    return train(cfg, overwrite=overwrite, json_out=False, quiet=True)
