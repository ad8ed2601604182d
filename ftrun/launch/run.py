"""One job on this host: write the spec, start lighthouse and groups, supervise, stop, write the manifest.

Every child is reaped on success, failure, Ctrl-C and SIGTERM (see ``ftrun.launch.procs``).
The parts: ``rundir`` (where, which job) -> ``groups`` (lighthouse, one torchrun per group)
-> ``supervise`` (restarts, watchdog) -> ``results`` (manifest, summary). ``ftrun.commands.train``
drives them and renders; nothing here renders or analyses.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import msgspec

from ftrun import layout, runlog
from ftrun.config import NATIVE_STORE_BACKENDS, RunConfig
from ftrun.errors import Interrupted, Stopped, Stopping, signal_words
from ftrun.launch.chaos import ChaosMonkey
from ftrun.launch.groups import free_port, make_group, start_lighthouse
from ftrun.launch.native_store import open_native_store
from ftrun.launch.placement import Placement, threads_per_rank
from ftrun.launch.progress import EventLogTail, GroupProgress
from ftrun.launch.results import write_manifest
from ftrun.launch.spares import SparePool
from ftrun.launch.supervise import RunState, stop_all, supervise
from ftrun.launch.zygote import shared_imports
from ftrun.link_spec import Link
from ftrun.output import atomic_write

log = logging.getLogger(__name__)


def write_spec(state: RunState, window: tuple[int, int] | None, threads: int, link: Link | None) -> Path:
    """spec.json (``layout.Spec``): what every rank of the run reads at start."""
    cfg = state.cfg
    assert state.network is not None  # commands/train makes every RunState with its network
    spec = layout.Spec(
        config=cfg,
        run_dir=str(state.run_dir.resolve()),
        job_id=state.job_id,
        profile_window=list(window) if window else None,
        threads=threads,
        link=link,
        faults=[msgspec.convert(f.to_json(), layout.FaultSpec) for f in cfg.planned_faults()],
        quorum_timeout_s=cfg.timeouts.quorum_timeout_s,
        # every rank of the job writes to this run dir only when all groups run on this host
        start_barrier=cfg.hosts.replicas * cfg.hosts.nproc_per_replica if cfg.hosts.replica_group_id < 0 else None,
        hostname=state.network.advertise_host,
        network=state.network,
        native_store=state.native_store.address if state.native_store else None,
    )
    path = state.run_dir / layout.SPEC
    atomic_write(path, layout.to_json(spec, indent=1))
    return path


def store_address(network: layout.Network, cfg: RunConfig) -> tuple[str, int] | None:
    """The group's torchrun store (``--master-addr``, ``--master-port``): across hosts always on
    the found address (a free port unless pinned; recorded in ``network.store_port``), so the
    lighthouse hands the other groups an address they reach; locally ``--standalone`` (None)
    unless a port is pinned."""
    if network.scope == "hosts":
        network.store_port = cfg.hosts.master_port or free_port(network.address)
        return network.address, network.store_port
    if cfg.hosts.master_port:
        network.store_port = cfg.hosts.master_port
        return cfg.hosts.master_addr or "127.0.0.1", cfg.hosts.master_port
    return None


def run_job(
    state: RunState,
    window: tuple[int, int] | None,
    link: Link | None,
    placement: Placement,
    stop: Stopping,
    view: AbstractContextManager,
    refresh: Callable[[RunState], None],
) -> layout.Manifest:
    """Start the lighthouse and groups in the claimed ``state.run_dir``, supervise (``refresh``
    after every look, inside ``view``), stop every child, write and return the manifest.
    Stopped by a signal: ``Interrupted`` naming the partial run. Logs to ``logs/ftrun.log``."""
    handler = runlog.attach(state.run_dir)
    try:
        # the groups' agents (relaunches and spares too) forked from one pre-imported zygote: a
        # group then starts without importing torch, and shares the zygote's runtime pages
        zygote = (
            shared_imports(state.run_dir / layout.LOGS / "zygote.log") if state.cfg.hosts.fork_agents else nullcontext()
        )
        with zygote:
            return _run_job(state, window, link, placement, stop, view, refresh)
    finally:
        runlog.detach(handler)


def _run_job(
    state: RunState,
    window: tuple[int, int] | None,
    link: Link | None,
    placement: Placement,
    stop: Stopping,
    view: AbstractContextManager,
    refresh: Callable[[RunState], None],
) -> layout.Manifest:
    cfg, run_dir = state.cfg, state.run_dir
    stopped: str | None = None
    # commands/train makes every RunState with both
    assert state.run_event_log is not None and state.network is not None
    log.info(
        "run %s: job %s, %d replica group(s) here of %d, %d step(s)",
        run_dir,
        state.job_id,
        len(cfg.hosts.groups_here),
        cfg.hosts.replicas,
        cfg.steps,
    )
    try:
        state.run_event_log.parent.mkdir(parents=True, exist_ok=True)
        if cfg.faults.chaos:
            state.chaos = ChaosMonkey(cfg, run_dir, state.log_run_event)
        threads = threads_per_rank(cfg.hosts.replicas * cfg.hosts.nproc_per_replica)
        master = store_address(state.network, cfg)  # before the spec: it records the store port
        if cfg.hosts.backend in NATIVE_STORE_BACKENDS:  # before the spec: it records the store's address
            state.native_store = open_native_store(run_dir, cfg, free_port())
        spec_path = write_spec(state, window, threads, link)
        state.started = time.time()
        if cfg.hosts.lighthouse:
            url = cfg.hosts.lighthouse
        else:
            state.lighthouse = start_lighthouse(
                run_dir, cfg.hosts.min_replicas, heartbeat_timeout_ms=cfg.timeouts.heartbeat_timeout_ms
            )
            url = state.lighthouse.url
        log.info("lighthouse %s", url)
        for r in cfg.hosts.groups_here:
            g = make_group(
                run_dir,
                spec_path,
                r,
                cfg.hosts.replicas,
                cfg.hosts.nproc_per_replica,
                url,
                cfg.hosts.backend,
                threads,
                master,
                placement.env.get(r) if placement.mode != "cpu" else None,
                state.network.env,
                cfg.hosts.fork_agents,
            )
            state.groups.append(g)  # before start(): a signal in between must not orphan it
            g.start()
            log.info("replica group %d started (pid %d)", r, g.process.pid)
            state.progress[r] = GroupProgress(r)
            state.tails[r] = EventLogTail(layout.event_log(run_dir, r, 0))
        if cfg.faults.spares:
            state.spares = SparePool(run_dir, cfg.hosts.nproc_per_replica, template=state.groups[0])
            for _ in range(cfg.faults.spares):
                spare = state.spares.start()
                log.info("warm spare %d started (pid %d)", spare.replica, spare.process.pid)
        with view:
            supervise(state, refresh)
    except Stopped as e:
        stopped = str(e)
    finally:
        stop.begin()
        stop_all(state)
    state.ended = time.time()
    stopped = stopped or stop.signal
    if stopped:
        state.log_run_event("stopped", signal=stopped)
        raise Interrupted(f"stopped by {signal_words(stopped)}; all children stopped; partial run in {run_dir}")
    manifest = write_manifest(state, window, link)
    log.info("manifest written; %s", "; ".join(state.failures) or "no failure")
    return manifest
