"""``ftrun train``: prepare the run dir, start lighthouse and groups, watch, stop, summarise.

Every child is reaped on success, failure, Ctrl-C and SIGTERM (see ``ftrun.launch.procs``).
The pipeline: ``rundir`` (where, which job) -> ``groups`` (lighthouse, one torchrun per group)
-> ``supervise`` (restarts, watchdog) -> ``results`` (manifest, summary).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from ftrun import layout
from ftrun.config import RunConfig
from ftrun.errors import Interrupted, RunFailed
from ftrun.launch.groups import make_group, start_lighthouse
from ftrun.launch.placement import check_quantize, plan as plan_placement
from ftrun.launch.progress import EventTail, GroupProgress
from ftrun.launch.results import summarise, write_manifest
from ftrun.launch.rundir import advertise_host, job_id, prepare_run_dir
from ftrun.launch.supervise import RunState, stop_all, supervise
from ftrun.output import atomic_write


class Stopped(Exception):
    """SIGTERM/SIGINT received by the parent."""


def write_spec(state: RunState, window: tuple[int, int] | None, threads: int, link: dict | None) -> Path:
    cfg = state.cfg
    spec = {
        "config": cfg.resolved(),
        "run_dir": str(state.run_dir.resolve()),
        "job_id": state.job_id,
        "profile_window": list(window) if window else None,
        "threads": threads,
        "link": link,
        "faults": [f.to_json() for f in cfg.faults()],
        "quorum_timeout_s": cfg.quorum_timeout_s,
        # every rank of the job writes to this run dir only when all groups run on this host
        "start_barrier": cfg.replicas * cfg.nproc_per_replica if cfg.replica_group_id < 0 else None,
        "hostname": advertise_host(cfg),
    }
    path = state.run_dir / "spec.json"
    atomic_write(path, json.dumps(spec, indent=1))
    return path


def install_signal_handlers() -> tuple[dict, dict]:
    """SIGTERM/SIGINT raise ``Stopped`` once. Once stopping (``flags["stopping"]``), later
    signals are only noted: a second Ctrl-C must not cut the clean-up of the children short."""
    flags: dict = {"stopping": False, "signal": None}

    def on_term(signum, frame):
        flags["signal"] = flags["signal"] or signal.Signals(signum).name
        if not flags["stopping"]:
            flags["stopping"] = True
            raise Stopped(flags["signal"])

    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    return old, flags


def train(cfg: RunConfig, overwrite: bool = False, json_out: bool = False, quiet: bool = False) -> int:
    """Run one training job; returns the exit code (0 ok). A failed run raises ``RunFailed``
    (exit 1), SIGINT/SIGTERM at any moment ``Interrupted`` (exit 130, naming the partial run)."""
    old_handlers, signals = install_signal_handlers()
    try:
        return _train(cfg, overwrite, json_out, quiet, signals)
    except Stopped as e:  # before the children started: nothing to stop
        signals["stopping"] = True
        where = f"; partial run in {cfg.out}/{cfg.run_name}" if cfg.run_name and (Path(cfg.out) / cfg.run_name).is_dir() else ""
        raise Interrupted(f"stopped by {e} before training started{where}") from None
    finally:
        for s, h in old_handlers.items():
            signal.signal(s, h)


def _train(cfg: RunConfig, overwrite: bool, json_out: bool, quiet: bool, signals: dict) -> int:
    from ftrun.launch.preflight import preflight

    window = cfg.profile_window()
    placement = plan_placement(cfg.backend, cfg.groups_here, cfg.nproc_per_replica)  # BadInput before launch
    check_quantize(cfg.quantize, cfg.backend, placement)
    link = None
    if cfg.link:
        from ftrun.link_spec import parse_link

        spec = parse_link(cfg.link)
        link = {"bandwidth_bps": spec.bandwidth_bps, "latency_s": spec.latency_s, "emulated": True, "describe": spec.describe()}
    jid = job_id(cfg)
    if cfg.replica_group_id >= 0:  # one run dir per group: hosts (or a loopback test) never collide
        cfg.run_name = f"{cfg.run_name or 'job'}-group{cfg.replica_group_id}"
    preflight(cfg)
    from ftrun.model_spec import is_user_model

    if is_user_model(cfg.model):  # build it once in a child: import errors, blocks, fragments (BadInput)
        from ftrun import model_spec
        from ftrun.console import console, line

        for w in model_spec.check(cfg)["warnings"]:
            console(stderr=True, soft_wrap=True).print(line(("warning:", "bold yellow"), " ", w))
    run_dir, lock = prepare_run_dir(cfg, overwrite)
    try:
        return _run(cfg, run_dir, jid, window, link, placement, json_out, quiet, signals)
    finally:
        lock.release()


def _run(cfg: RunConfig, run_dir: Path, jid: str, window: tuple[int, int] | None, link: dict | None,
         placement, json_out: bool, quiet: bool, signals: dict) -> int:
    """Start the lighthouse and groups in the claimed ``run_dir``, supervise, stop, summarise."""
    from ftrun.report.train_view import LiveView, print_summary

    state = RunState(cfg, run_dir, job_id=jid, run_log=layout.run_event_log(run_dir))
    stopped: str | None = None
    try:
        state.run_log.parent.mkdir(parents=True, exist_ok=True)
        ranks = cfg.replicas * cfg.nproc_per_replica
        threads = max(1, (os.cpu_count() or 1) // ranks)
        spec_path = write_spec(state, window, threads, link)
        view = LiveView(state, enabled=not (json_out or quiet))
        state.started = time.time()
        if cfg.lighthouse:
            url = cfg.lighthouse
        else:
            state.lighthouse = start_lighthouse(run_dir, cfg.min_replicas, heartbeat_timeout_ms=cfg.heartbeat_timeout_ms)
            url = state.lighthouse.url
        master = (cfg.master_addr or "127.0.0.1", cfg.master_port) if cfg.master_port else None
        for r in cfg.groups_here:
            g = make_group(run_dir, spec_path, r, cfg.replicas, cfg.nproc_per_replica, url, cfg.backend, threads, master,
                           placement.env.get(r) if placement.mode != "cpu" else None)
            state.groups.append(g)  # before start(): a signal in between must not orphan it
            g.start()
            state.progress[r] = GroupProgress(r)
            state.tails[r] = EventTail(layout.event_log(run_dir, r, 0))
        with view:
            supervise(state, view.refresh)
    except Stopped as e:
        stopped = str(e)
    finally:
        signals["stopping"] = True
        stop_all(state)
    state.ended = time.time()
    stopped = stopped or signals["signal"]
    if stopped:
        state.log_event("stopped", signal=stopped)
        raise Interrupted(f"stopped by {stopped}; all children stopped; partial run in {run_dir}")
    manifest = write_manifest(state, window, link)
    summary = summarise(state, manifest)
    atomic_write(run_dir / layout.SUMMARY, json.dumps(summary, indent=1))
    if json_out:
        print(json.dumps(summary, indent=1))
    elif not quiet:
        print_summary({**summary, "failures": []})  # the failure is the one error line below
    if not summary["ok"]:
        reasons = state.failures or (
            [f"replicas disagreed after {len(summary['agreement']['disagreements'])} commit(s)"] if not summary["agreement"]["ok"] else ["not every replica finished all steps"]
        )
        raise RunFailed("; ".join(reasons))
    return 0
