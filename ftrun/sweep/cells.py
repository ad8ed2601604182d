"""A sweep's cells, before any trains: the axes (a preset's and ``--axis``'s, ``ftrun.grid``),
their product, each cell ``invalid`` (``ftrun.config.build`` refuses it: torchft's rule or
ftrun's), ``unavailable`` (``ftrun.launch.preflight.why_unavailable``) or to run; ``--preset tau``
without a link takes compare's default one (``ftrun.comparison.link``)."""

from __future__ import annotations

from pathlib import Path

from ftrun import grid
from ftrun.config import FileValues, RunConfig, build
from ftrun.errors import BadInput


def plan(
    preset: str | None,
    axes_text: list[str],
    shared: grid.Shared,
    file_values: FileValues | None,  # a TOML file's keys (``ftrun.config.load_toml``)
    sweep_dir: Path,
) -> tuple[list[grid.Axis], grid.Shared, list[grid.Cell], list[str]]:
    """Axes, the shared values (user's + preset's), the classified cells, notes. ``BadInput`` on bad input."""
    from ftrun.launch.preflight import has_cuda_device, why_unavailable

    notes: list[str] = []

    def _build(values: grid.Shared) -> RunConfig:
        """A configuration: ``values`` by key (as flags: ``mode`` among them picks the preset, else
        the file's, else streaming) over the file's."""
        return build("streaming", file_values, None, **values)

    user_axes = [grid.parse_axis(t) for t in axes_text]
    from ftrun.torchft_compat import installed, process_group_backends

    p_axes, p_shared = (
        grid.preset_axes(
            preset, {**(file_values or {}), **shared}, has_cuda_device(), process_group_backends(installed())
        )
        if preset
        else ([], {})
    )
    axes = grid.merge_axes(p_axes, user_axes)
    grid.check_shared(axes, shared)
    keys = {a.key for a in axes}
    for k, v in p_shared.items():
        if k not in keys and shared.get(k) is None and k not in (file_values or {}):
            shared[k] = v
    if (
        preset == "tau"
        and "link" not in keys
        and not shared.get("link")
        and not (file_values and file_values.get("link"))
    ):
        from ftrun.comparison.link import default_link
        from ftrun.launch.placement import threads_per_rank
        from ftrun.link_spec import SYNC_SHARE

        base = _build({**shared, **{a.key: a.values[0] for a in axes}})  # the grid's first cell
        ranks = base.hosts.replicas * base.hosts.nproc_per_replica
        spec, calib = default_link(base, threads_per_rank(ranks))
        shared["link"] = spec.as_flag()
        notes.append(
            f"link {spec.description} (emulated): compare's default, plain DiLoCo's sync ~ {SYNC_SHARE:g} of H "
            f"steps of the calibrated step {calib.step_s * 1e3:.1f} ms"
        )
    cells = grid.cells(axes, shared, preset)

    def cell_config(params: grid.Params) -> RunConfig:
        return _build({**shared, **params, "out": str(sweep_dir), "run_name": grid.cell_name(params)})

    grid.classify(cells, cell_config, why_unavailable)
    if all(c.status == "invalid" for c in cells):  # a shared flag (or every value) breaks a rule
        raise BadInput(f"sweep: every cell is invalid, e.g. {cells[0].name}: {cells[0].reason}")
    unprofiled = next((c for c in cells if c.config is not None and c.config.profiling.profile == "none"), None)
    if unprofiled is not None:  # refused before any cell trains, not failed after each one did
        raise BadInput(
            f"sweep: cell {unprofiled.name}: --profile none leaves a cell no traces, and a cell's verdict is "
            "the check of its traces (use --profile auto or A:B)"
        )
    for c in cells:  # each cell's run dir: DIR/NAME/CELL
        if c.config is not None:
            c.config = c.config.replaced(out=str(sweep_dir), run_name=c.name)
    return axes, shared, cells, notes
