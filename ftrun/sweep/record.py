"""A sweep's result, ``sweep.json``'s content: every cell in grid order (a cell without a result:
``not run``), the counts by verdict, the grid, the machine and the versions (torch-free)."""

from __future__ import annotations

import os
import platform
from pathlib import Path

from ftrun import grid, layout


def versions() -> dict[str, str]:
    """python, ftrun, torch, torchft (version, distribution, process-group API), as installed
    (read without importing torch: ``ftrun.torchft_compat.installed``)."""
    from ftrun.torchft_compat import versions as found

    return {k: "not installed" if v is None else v for k, v in found().items()}


def ran_on() -> tuple[str, str]:
    """A cell's ``torch`` and ``torchft`` (distribution and version): this sweep's, since each
    cell trains with this interpreter (a table merged from sweeps in several venvs tells them apart)."""
    v = versions()
    return v["torch"], f"{v['torchft_distribution']} {v['torchft']}"


def machine() -> layout.Machine:
    """The host the sweep ran on: name, platform, CPUs, GPUs, whether a CUDA device is usable."""
    from ftrun.launch.placement import host_devices
    from ftrun.launch.preflight import has_cuda_device

    return layout.Machine(
        hostname=platform.node(),
        platform=platform.platform(),
        cpus=os.cpu_count(),
        gpus=len(host_devices()),
        cuda_device=has_cuda_device(),
    )


def sweep_result(
    cells: list[grid.Cell],
    results: dict[str, layout.SweepRow],
    *,
    sweep_dir: Path,
    name: str,
    preset: str | None,
    axes: list[grid.Axis],
    shared: grid.Shared,
    metric: str,
    parallel: int,
    notes: list[str],
) -> layout.SweepResult:
    """The sweep's result as it stands: ``results`` by cell name, in the grid's order."""
    listed = [
        results.get(c.name)
        or layout.SweepRow(name=c.name, params=c.params, verdict="not run", problem="stopped before it finished")
        for c in cells
    ]
    counts: dict[str, int] = {}
    for r in listed:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    return layout.SweepResult(
        sweep_dir=str(sweep_dir),
        name=name,
        preset=preset,
        axes=[layout.SweepAxis(a.key, list(a.values)) for a in axes],
        shared=dict(shared),
        metric=metric,
        parallel=parallel,
        machine=machine(),
        versions=versions(),
        notes=notes,
        counts=counts,
        cells=listed,
    )
