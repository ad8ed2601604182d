"""``sweep --resume``: a cell that holds ``CELL/sweep-cell.json`` is re-checked from its run dir
instead of trained again (torch-free)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from ftrun import grid, layout
from ftrun.errors import BadInput
from ftrun.sweep.evaluate import evaluate
from ftrun.sweep.runner import CELL_RESULT, differing


def finished(sweep_dir: Path, cell: grid.Cell) -> layout.SweepRow | None:
    """The cell's result from an earlier run of this sweep, re-checked from its run dir, or None.

    ``sweep-cell.json`` says only that the cell finished and with which options: its verdict and
    figures are evaluated again from the run dir (traces corrupted since then fail, whatever the
    file says). ``BadInput`` (one line) when the file is not a cell result (a wrong-typed field,
    an unknown verdict) or the cell was trained with other options (a resumed sweep must not
    mix two configurations)."""
    p = sweep_dir / cell.name / CELL_RESULT
    if not p.is_file() or cell.config is None:
        return None
    try:
        rec = layout.read_sweep_cell(p)
    except BadInput as e:
        raise BadInput(f"--resume: {e}") from None
    now = {
        k: v for k, v in json.loads(json.dumps(differing(cell.config))).items() if k != "out"
    }  # as the file spells it
    then = {k: v for k, v in rec.config.items() if k != "out"}
    if then != now:
        key = next(k for k in sorted(set(now) | set(then)) if now.get(k) != then.get(k))
        raise BadInput(
            f"--resume: cell {cell.name} was trained with {key} = {then.get(key)!r}, this sweep asks for "
            f"{now.get(key)!r} (give the same options, or another --name)"
        )
    run_dir = sweep_dir / cell.name
    fresh = evaluate(cell, run_dir, 1 if rec.verdict == "crashed" else 0, "")
    problem = fresh.problem
    if fresh.verdict == "crashed" and rec.verdict == "crashed" and rec.problem:
        problem = rec.problem  # the training's own error line, from when it ran
    res = msgspec.structs.replace(
        fresh, problem=problem, wall_s=rec.wall_s, config=rec.config, torch=rec.torch, torchft=rec.torchft
    )
    if fresh.verdict != rec.verdict:
        res = msgspec.structs.replace(
            res,
            recorded_verdict=rec.verdict,
            problem=f"re-checked on --resume (recorded {rec.verdict}): {fresh.problem or 'now ' + fresh.verdict}",
        )
    return res


def known_results(sweep_dir: Path, cells: list[grid.Cell], resume: bool) -> dict[str, layout.SweepRow]:
    """The results known before any training: each cell that does not run (invalid, unavailable:
    its reason) and, on ``--resume``, each finished one (``finished``, marked ``resumed``)."""
    results: dict[str, layout.SweepRow] = {}
    for c in cells:
        if c.status != "run":
            verdict: layout.CellVerdict = "invalid" if c.status == "invalid" else "unavailable"
            results[c.name] = layout.SweepRow(name=c.name, params=c.params, verdict=verdict, problem=c.reason)
        elif resume and (done := finished(sweep_dir, c)) is not None:
            results[c.name] = msgspec.structs.replace(done, resumed=True)
    return results
