"""``ftrun train``: check the plan, claim the run dir, run the job, check agreement, summarise, render.

Drives ``ftrun.launch`` (spec, lighthouse, groups, supervision, manifest), then
``ftrun.check.agreement`` and ``ftrun.check.numerics`` on the event logs, then ``ftrun.report.train_view``,
then the check of the captured traces (``ftrun.commands.run_check``, ``inspect-trace``'s analysis)
unless ``--no-check``: its verdict line, and ``summary.check``.

Exit: 0 = the run finished and its check passed (or ran nothing: no traces, ``--no-check``);
1 = the run failed (a group, disagreement, numerics: ``RunFailed``), its check FAILed, or its
traces could not be judged; the worst wins, every reason printed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgspec

from ftrun import layout
from ftrun.check.agreement import check_agreement
from ftrun.check.fired_faults import fault_marks
from ftrun.check.numerics import Numerics, check_numerics
from ftrun.check.recovery import recovery_of
from ftrun.commands.run_check import check_run, print_check
from ftrun.config import RunConfig
from ftrun.errors import BadInput, Interrupted, RunFailed, Stopped, Stopping
from ftrun.launch.placement import Placement, check_quantize, plan as plan_placement
from ftrun.launch.results import read_logs, summarise, write_summary
from ftrun.launch.run import run_job
from ftrun.launch.rundir import job_id, prepare_run_dir
from ftrun.launch.supervise import RunState
from ftrun.link_spec import Link


def train(
    cfg: RunConfig,
    overwrite: bool = False,
    json_out: bool = False,
    quiet: bool = False,
    on_run_dir: Callable[[Path], None] | None = None,
) -> int:
    """Run one training job; returns the exit code (0 ok). A failed run raises ``RunFailed``
    (exit 1), SIGINT/SIGTERM at any moment ``Interrupted`` (exit 130, naming the partial run).
    ``on_run_dir``: called with the run dir as soon as it is claimed (its name may be chosen here:
    ``cfg`` is frozen, the run's own config is a copy naming it)."""
    claimed: list[Path] = []

    def claim(run_dir: Path) -> None:
        claimed.append(run_dir)
        if on_run_dir is not None:
            on_run_dir(run_dir)

    with Stopping() as stop:
        try:
            return _train(cfg, overwrite, json_out, quiet, stop, claim)
        except Stopped as e:  # before the children started: nothing to stop
            stop.begin()
            name = claimed[-1].name if claimed else cfg.run_name
            where = f"; partial run in {cfg.out}/{name}" if name and (Path(cfg.out) / name).is_dir() else ""
            raise Interrupted(f"stopped by {e} before training started{where}") from None


def _train(
    cfg: RunConfig, overwrite: bool, json_out: bool, quiet: bool, stop: Stopping, claim: Callable[[Path], None]
) -> int:
    from ftrun.launch.preflight import preflight
    from ftrun.torchft_compat import require_supported

    require_supported()  # an unsupported torchft: one line naming it, exit 2, before anything starts
    window = cfg.profile_window()
    placement = plan_placement(
        cfg.hosts.backend, cfg.hosts.groups_here, cfg.hosts.nproc_per_replica
    )  # BadInput before launch
    check_quantize(cfg.optimizer.quantize, cfg.hosts.backend, placement)
    link = cfg.emulation.parsed_link()
    jid = job_id(cfg)
    if cfg.hosts.replica_group_id >= 0:  # one run dir per group: hosts (or a loopback test) never collide
        cfg = cfg.replaced(run_name=f"{cfg.run_name or 'job'}-group{cfg.hosts.replica_group_id}")
    network = preflight(cfg)
    from ftrun.model_spec import is_user_model

    if is_user_model(cfg.model.model):  # build it once in a child: import errors, blocks, fragments (BadInput)
        from ftrun import model_spec
        from ftrun.console import console, line

        for w in model_spec.check(cfg.model_spec()).warnings:
            console(stderr=True, soft_wrap=True).print(line(("warning:", "bold yellow"), " ", w))
    run_dir, lock = prepare_run_dir(cfg, overwrite)
    cfg = cfg.replaced(run_name=run_dir.name)
    claim(run_dir)
    try:
        return _run(
            RunState(cfg, run_dir, job_id=jid, run_event_log=layout.run_event_log(run_dir), network=network),
            window,
            link,
            placement,
            json_out,
            quiet,
            stop,
        )
    finally:
        lock.release()


def _run(
    state: RunState,
    window: tuple[int, int] | None,
    link: Link | None,
    placement: Placement,
    json_out: bool,
    quiet: bool,
    stop: Stopping,
) -> int:
    """Run the job in the claimed run dir, then summarise and render."""
    from ftrun.report.train_view import LiveView, print_summary

    view = LiveView(state, enabled=not (json_out or quiet))
    manifest = run_job(state, window, link, placement, stop, view, view.refresh)
    logs = read_logs(state)
    cfg = state.cfg
    alone = cfg.hosts.replica_group_id >= 0 and cfg.hosts.replicas > 1  # one host of a multi-host job
    here = f"only replica group {cfg.hosts.replica_group_id}'s %s on this host (inspect-trace every group's run dir)"
    partial = here % "event log is" if alone else None
    # an injected kill may explain a contribution sketch missing from its round (check_numerics)
    numerics = check_numerics(logs, cfg.profiling.sketches, partial, fault_marks([state.run_dir], [manifest], logs))
    summary = summarise(state, manifest, logs, check_agreement(logs), numerics)
    # ``faults``: what happened (faults, restarts, heals, quorum changes); ``recovery``: where each
    # fault's recovery time went, one ``layout.RecoveryRecord`` per fault, as inspect-trace --json has it
    recoveries = recovery_of(state.run_dir, manifest, logs)
    summary.recovery = [x.record() for x in recoveries]
    if cfg.faults.chaos:
        from ftrun.check.chaos_run import chaos_summary

        summary.chaos = chaos_summary(state.run_dir, manifest, logs, recoveries)
        summary.chaos.timeline = _draw_chaos(state.run_dir, manifest, logs, summary.recovery)
    run_ok = summary.ok
    checked = check_run(
        [state.run_dir],
        summary.traces,
        enabled=cfg.verdict.check,
        why_not=here % "traces are" if alone else None,
    )
    summary.check = checked.verdict
    summary.ok = run_ok and not checked.failed  # the worst wins: a run that trained but FAILs its check is not ok
    text = write_summary(state.run_dir, summary)
    if json_out:
        print(text)
    elif not quiet:
        print_summary(msgspec.structs.replace(summary, failures=[]))  # the failure is the one error line below
        print_check(checked)
    if not run_ok:
        also = [f"check: {checked.verdict.problems[0]}"] if checked.verdict.problems else []
        also += [] if checked.judged else [f"nothing checked: {checked.verdict.why}"]
        raise RunFailed("; ".join(_reasons(state, summary, numerics) + also))
    checked.raise_unjudged()
    return 1 if checked.failed else 0


def _draw_chaos(
    run_dir: Path,
    manifest: layout.Manifest,
    logs: dict[tuple[int, int], list[layout.EventRecord]],
    recoveries: list[layout.RecoveryRecord],
) -> str | None:
    """A chaos run's whole-run timeline (``ftrun.report.chaos_timeline``) into its run dir; its name
    there, or None with a warning when it could not be written (the run trained: its summary stands)."""
    from ftrun.console import console, line
    from ftrun.report.chaos_timeline import FILE, draw, timeline_of

    try:
        draw(timeline_of(run_dir, manifest, logs, recoveries), run_dir / FILE)
    except BadInput as e:
        console(stderr=True, soft_wrap=True).print(
            line(("warning:", "bold yellow"), f" chaos timeline not written: {e}")
        )
        return None
    return FILE


def _reasons(state: RunState, summary: layout.TrainSummary, numerics: Numerics) -> list[str]:
    """Why the run itself failed (before its check): the supervisor's failures, disagreement, numerics."""
    reasons = list(state.failures)
    if not reasons and not summary.agreement.ok:
        reasons.append(f"replicas disagreed after {len(summary.agreement.disagreements)} commit(s)")
    if not numerics.ok:
        more = f" (and {len(numerics.problems) - 1} more)" if len(numerics.problems) > 1 else ""
        reasons.append(f"numerics: {numerics.problems[0].text}{more}")
    return reasons or ["not every replica finished all steps"]
