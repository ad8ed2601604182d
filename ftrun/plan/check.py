"""``ftrun plan --check DIR``: predict every run of a compare dir (``report.json``) or sweep dir
(``sweep.json``) from its own run dir on the link it was trained on, and compare with what it
measured (``ftrun.plan.tolerance``); a ``--kill`` run dir goes to ``ftrun.plan.recovery_check``,
a compare of a chaos run with its twin to ``ftrun.plan.goodput_run``. The command exits 1 when a
gated figure is outside the tolerance. Torch-free."""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

import msgspec

from ftrun import layout
from ftrun.errors import BadInput
from ftrun.link_spec import Link
from ftrun.plan.check_result import Checked, CheckedOk, PlanCheck, RunCheck, RunsCheck
from ftrun.plan.goodput_run import check_goodput, has_goodput
from ftrun.plan.measure import read_run
from ftrun.plan.model import simulate
from ftrun.plan.recovery_check import check_recovery
from ftrun.plan.request import LOOPBACK
from ftrun.plan.result import Figures
from ftrun.plan.tolerance import EXPOSED_FLOOR_MS, error_of, verdict, within

# --- --check ---------------------------------------------------------------------------------


class _MeasuredRun(msgspec.Struct):
    """A run to check: its run dirs per repeat, the link it recorded, what it measured."""

    name: str
    dirs: list[list[Path]]
    link: Link | None
    measured: dict[str, float | None]
    planes: str = "data+control"  # a sweep reports the data plane; control only when it says so


def _run_dirs(root: Path, given: str | list[str] | None) -> list[Path]:
    """Run dirs as a report recorded them: relative to the report's dir (``compare``'s
    ``as_recorded``), else as given (absolute, or relative to the cwd compare ran in: earlier
    reports); a dir that moved is looked up next to the report (a sweep's cells)."""
    dirs = []
    for d in given.split(",") if isinstance(given, str) else list(given or []):
        tries = [root / d, Path(d), root / Path(d).name]  # (root / an absolute d is d)
        p = next((t for t in tries if (t / layout.MANIFEST).is_file()), Path(d))
        if not (p / layout.MANIFEST).is_file():
            raise BadInput(f"--check {root}: run dir {d} is missing (no {layout.MANIFEST})")
        dirs.append(p)
    if not dirs:
        raise BadInput(f"--check {root}: a run names no run dir")
    return dirs


def _measured(
    data: float | None, ctrl: float | None, sps: float | None, total: float | None
) -> dict[str, float | None]:
    return {
        "exposed_ms_per_sync": total,
        "exposed_data_ms_per_sync": data,
        "exposed_control_ms_per_sync": ctrl,
        "steps_per_s": sps,
    }


def _measured_runs(root: Path) -> list[_MeasuredRun]:
    """The runs of report.json or sweep.json, each file read with its one typed decode
    (``ftrun.layout.read_compare_report``, ``read_sweep_result``: bounded in size and depth; a
    file of another shape is one line naming the file and the field)."""
    if (root / layout.REPORT_JSON).is_file():
        rep = layout.read_compare_report(root / layout.REPORT_JSON)
        out = []
        for r in rep.runs:
            data, ctrl = r.per_sync_exposed_ms, r.per_sync_exposed_control_ms
            total = None if data is None or ctrl is None else data + ctrl
            # each repeat's run dir, or the run's own (one repeat: its run dirs, a job's groups)
            given: list[str | list[str] | None] = (
                [x.run_dir for x in r.repeat_runs]
                if not isinstance(r.repeat_runs, msgspec.UnsetType) and r.repeat_runs
                else [r.run_dirs or r.run_dir]
            )
            dirs = [_run_dirs(root, x) for x in given]
            out.append(_MeasuredRun(r.name, dirs, r.link, _measured(data, ctrl, r.steps_per_s, total)))
        return out
    if (root / layout.SWEEP_JSON).is_file():
        sweep = layout.read_sweep_result(root / layout.SWEEP_JSON)
        out = []
        for i, c in enumerate(sweep.cells):
            data, ctrl = c.exposed_comm_per_sync_ms, c.exposed_control_per_sync_ms
            total = data + ctrl if data is not None and ctrl is not None else data
            name = c.name or (Path(c.run_dir).name if c.run_dir is not None else f"cell{i}")
            planes = "data+control" if ctrl is not None else "data"
            measured = _measured(data, ctrl, c.steps_per_s, total)
            out.append(_MeasuredRun(name, [_run_dirs(root, c.run_dir)], None, measured, planes))
        return out
    raise BadInput(f"--check {root}: neither a compare dir (report.json) nor a sweep dir (sweep.json)")


CHECKED = ("exposed_ms_per_sync", "exposed_data_ms_per_sync", "exposed_control_ms_per_sync", "steps_per_s")
GATED = ("exposed_ms_per_sync", "steps_per_s")  # exit 1 when one is outside tolerance; the split is diagnosis


def check(dir_: str, tolerance: float) -> PlanCheck:
    """``plan --check DIR`` (module docstring): the result ``--json`` prints (its type, and its
    ``kind`` in the JSON, say which check it is; no ``kind``: the runs of a compare or sweep dir)."""
    if not 0.0 < tolerance < 10.0:
        raise BadInput(f"--tolerance {tolerance}: must be a fraction > 0, e.g. 0.25")
    root = Path(dir_)
    if not root.is_dir():
        raise BadInput(f"--check {dir_}: not a directory")
    if (root / layout.MANIFEST).is_file() and not (root / layout.REPORT_JSON).is_file():
        return check_recovery(root, tolerance)
    if has_goodput(root):  # a compare of a chaos run with its twin: the goodput model
        return check_goodput(root, tolerance)
    return check_runs(root, tolerance)


def check_runs(root: Path, tolerance: float) -> RunsCheck:
    """Every run of a compare or sweep dir, predicted on its own link, against what it measured."""
    runs = []
    for mr in _measured_runs(root):
        preds, expect = [], []
        for dirs in mr.dirs:
            inp = read_run(dirs)
            link = inp.link or LOOPBACK
            if mr.link is None:  # a sweep cell: the link its run recorded (or none)
                mr.link = link
            preds.append(Figures.of(simulate(inp.work, inp.schedule, link.bandwidth_bps, link.latency_s, inp.steps)))
            # the same run from its drift's statistics instead of its own arrivals: what runs like it give on average
            expect.append(
                Figures.of(
                    simulate(
                        replace(
                            inp.work,
                            replay=(),
                            replay_send=(),
                            replay_sync=(),
                            step_times=(),
                            commit_times=(),
                            real_times=(),  # its real collectives at their pace over every timed send
                        ),  # its one-off events stay: its stalls, its first quorum's reconfigure
                        inp.schedule,
                        link.bandwidth_bps,
                        link.latency_s,
                        inp.steps,
                    )
                )
            )
        # compare reports the median of its repeats: predict each repeat, take the median too
        pred_all = {k: statistics.median(getattr(p, k) for p in preds) for k in CHECKED}
        expected = {k: statistics.median(getattr(p, k) for p in expect) for k in CHECKED}
        planes = mr.planes
        if planes == "data":
            pred_all["exposed_ms_per_sync"] = pred_all["exposed_data_ms_per_sync"]
        meas = mr.measured
        predicted = {k: pred_all[k] for k in CHECKED}
        runs.append(
            RunCheck(
                name=mr.name,
                planes=planes,
                link=mr.link,
                repeats=len(preds),
                predicted=msgspec.convert(predicted, Checked),
                expected_from_statistics=msgspec.convert(expected, Checked),
                measured=msgspec.convert({k: meas.get(k) for k in CHECKED}, Checked),
                error=msgspec.convert({k: error_of(predicted[k], meas.get(k)) for k in CHECKED}, Checked),
                within_tolerance=msgspec.convert(
                    {k: within(k, predicted[k], meas.get(k), tolerance) for k in CHECKED}, CheckedOk
                ),
            )
        )
    if not runs:
        raise BadInput(f"--check {root}: no runs to check")
    gated = [(r, getattr(r.within_tolerance, k), k) for r in runs for k in GATED]
    failed = [f"{r.name}: {k}" for r, ok, k in gated if ok is False]
    # a run none of whose gated figures was measured is no evidence either way: named, never a pass
    unchecked = [r.name for r in runs if all(getattr(r.within_tolerance, k) is None for k in GATED)]
    return RunsCheck(
        check=str(root),
        tolerance=tolerance,
        exposed_floor_ms=EXPOSED_FLOOR_MS,
        runs=runs,
        verdict=verdict(failed, compared=len(runs) - len(unchecked)),
        outside_tolerance=failed,
        not_checked=unchecked,
    )
