"""``ftrun launch [OPTIONS] -- SCRIPT.py [ARGS...]``: run any torchft script as R replica groups.

Pipeline: check the flags (``ftrun.launch.script.LaunchSpec``) -> claim the run dir -> run it
(``ftrun.launch.script_run``: the lighthouse unless ``--lighthouse``, one torchrun job per group
in ``groups/replica{r}/``, output in ``logs/replica{r}.log``, watched by ``ftrun.launch.watch``;
everything stopped; the traces the script wrote found; ``manifest.json`` written) -> inspect
(``ftrun.commands.run_check``: ``ftrun.check.analyze`` as ``inspect-trace``, as ``train`` does)
unless ``--no-check`` -> ``summary.json`` (its ``check``: the verdict), render.

Exit: 0 = every group exited 0 and the inspection passed; 1 = a group failed (named, with its
log) or the inspection failed; 2 = bad input, or no trace found (naming where ftrun looked);
130 = SIGINT/SIGTERM (every child is stopped first). The parent's death reaches the children
through their parent-death signal (``ftrun.launch.procs``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec

from ftrun import layout
from ftrun.commands.run_check import check_run, print_check
from ftrun.config.commands import LaunchOptions
from ftrun.errors import BadInput, Interrupted, RunFailed, Stopped, Stopping
from ftrun.launch.placement import Placement, plan as plan_placement
from ftrun.launch.results import write_summary
from ftrun.launch.rundir import claim_named_run_dir
from ftrun.launch.script import LaunchSpec
from ftrun.launch.script_run import run_launch


def launch(script_and_args: Sequence[str], opts: LaunchOptions) -> int:
    """Run the launch (module docstring); ``opts``: its options (``ftrun.config.commands``)."""
    spec = LaunchSpec.build(script_and_args, opts)
    with Stopping() as stop:
        try:
            return _launch(spec, opts.json_out, opts.overwrite, stop)
        except Stopped as e:
            stop.begin()
            raise Interrupted(f"stopped by {e} before the groups started") from None


def _launch(spec: LaunchSpec, json_out: bool, overwrite: bool, stop: Stopping) -> int:
    from ftrun.torchft_compat import require_supported

    require_supported()  # ftrun's lighthouse is torchft's: an unsupported torchft is refused before anything starts
    placement = plan_placement("auto", range(spec.replicas), spec.nproc_per_replica)  # BadInput before launch
    run_dir, lock = claim_named_run_dir(Path(spec.out), spec.run_name, "launch", overwrite, inputs=[spec.script])
    try:
        return _run(spec, run_dir, placement, json_out, stop)
    finally:
        lock.release()


def _run(spec: LaunchSpec, run_dir: Path, placement: Placement, json_out: bool, stop: Stopping) -> int:
    from ftrun.report.launch_view import LaunchLiveView, print_summary

    view = LaunchLiveView(enabled=not json_out)
    done = run_launch(spec, run_dir, placement, stop, view, view.refresh)
    summary, report, skipped = done.summary, None, None
    if not spec.inspect:
        skipped = check_run([run_dir], [], enabled=False)
        summary.check = skipped.verdict
    elif not summary.failures:
        if (refused := done.not_checkable()) is not None:
            summary.ok = summary.ok and isinstance(refused, BadInput)  # no trace: bad input; no quorum: a failure
            _finish(run_dir, summary, json_out, print_summary)
            _numerics_note(spec, run_dir, json_out)
            raise refused
        # the check train runs too (ftrun.commands.run_check): inspect-trace's analysis of the run dir
        checked = check_run([run_dir], [t.path for t in summary.traces], step_numbering=spec.step_numbering)
        summary.check, report = checked.verdict, checked.report
        if report is None:  # traces nothing could judge: bad input (exit 2), or no evidence (exit 1)
            summary.ok = False
            _finish(run_dir, summary, json_out, print_summary)
            _numerics_note(spec, run_dir, json_out)
            checked.raise_unjudged()
            raise RunFailed(f"nothing checked: {checked.verdict.why}")
        summary.inspection = report.to_json()
        summary.ok = report.ok
    _finish(run_dir, summary, json_out, print_summary)
    if report is not None and not json_out:
        from ftrun.report.inspect_view import render

        render(report)
    elif skipped is not None and not json_out:
        print_check(skipped)  # "schedule not checked: --no-check", once
    if summary.failures:
        raise RunFailed(summary.failures[0])
    return 0 if summary.ok else 1


def _numerics_note(spec: LaunchSpec, run_dir: Path, json_out: bool) -> None:
    """Where no check report says it: why the launch hook sketched nothing (``ftrun.launch.autohook``)."""
    from ftrun.launch.autohook.status import launch_numerics

    why = launch_numerics([run_dir], spec.script.name)[1]
    if why and not json_out:
        print(f"numerics not checked: {why}")


def _finish(
    run_dir: Path, summary: layout.LaunchSummary, json_out: bool, print_summary: Callable[[layout.LaunchSummary], None]
) -> None:
    text = write_summary(run_dir, summary)
    if json_out:
        print(text)
    else:
        print_summary(msgspec.structs.replace(summary, failures=[]))  # the failure: the one error line that follows
