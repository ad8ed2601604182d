"""``ftrun train``: prepare the run dir, start lighthouse and groups, watch, stop, summarise.

Every child is reaped on success, failure, Ctrl-C and SIGTERM (see ``ftrun.launch.procs``).
A group that exits non-zero fails the run (naming the group and its log) unless a restart
is allowed; a run whose replicas disagree after a commit fails too.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import shutil
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from ftrun import __version__, layout
from ftrun.check.agreement import check_agreement
from ftrun.config import RunConfig
from ftrun.errors import BadInput, RunFailed
from ftrun.launch.groups import Group, Lighthouse, make_group, start_lighthouse
from ftrun.launch.procs import stop_tree
from ftrun.worker import whereabouts
from ftrun.launch.progress import EventTail, GroupProgress, read_all, update


class Stopped(Exception):
    """SIGTERM/SIGINT received by the parent."""


def prepare_run_dir(cfg: RunConfig, overwrite: bool) -> Path:
    """``<out>/<run-name>``; an existing dir is refused unless ``overwrite`` (never silently)."""
    root = Path(cfg.out)
    if not cfg.run_name:
        # a fresh name, claimed atomically: two runs started in the same second get -2, -3, ...
        base = f"{cfg.mode}-{time.strftime('%Y%m%d-%H%M%S')}"
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise BadInput(f"--out {cfg.out}: cannot create ({e.strerror})")
        for n in range(1, 1000):
            name = base if n == 1 else f"{base}-{n}"
            try:
                (root / name).mkdir()
            except FileExistsError:
                continue
            cfg.run_name = name
            return root / name
    run_dir = root / cfg.run_name
    if run_dir.exists():
        if not overwrite:
            raise BadInput(f"--run-name {cfg.run_name}: {run_dir} already exists (pass --overwrite to replace it, or pick another name)")
        if not (run_dir / layout.MANIFEST).exists() and not (run_dir / "spec.json").exists() and any(run_dir.iterdir()):
            raise BadInput(f"--overwrite: {run_dir} is not an ftrun run dir; refusing to delete it")
        shutil.rmtree(run_dir)
    try:
        run_dir.mkdir(parents=True)
    except OSError as e:
        raise BadInput(f"--out {cfg.out}: cannot create {run_dir} ({e.strerror})")
    return run_dir


@dataclass
class RunState:
    cfg: RunConfig
    run_dir: Path
    job_id: str
    groups: list[Group] = field(default_factory=list)
    lighthouse: Lighthouse | None = None
    progress: dict[int, GroupProgress] = field(default_factory=dict)
    tails: dict[int, EventTail] = field(default_factory=dict)
    started: float = 0.0
    ended: float = 0.0
    failures: list[str] = field(default_factory=list)
    lost: dict[int, str] = field(default_factory=dict)  # replica -> fault that killed it for good
    run_log: Path | None = None

    def log_event(self, event: str, **fields) -> None:
        """Run-level event log (events/run.jsonl): group exits, restarts, watchdog, stop."""
        rec = {"event": event, "t": time.time(), **fields}
        with self.run_log.open("a") as f:
            f.write(json.dumps(rec) + "\n")


def job_id(cfg: RunConfig) -> str:
    """One id for all replica groups of a job. Local runs: random. Multi-host: --job-id, else
    derived from the lighthouse URL and run name that every host's command line shares."""
    if cfg.job_id:
        return cfg.job_id
    if cfg.replica_group_id >= 0:
        return "job-" + hashlib.sha1(f"{cfg.lighthouse}|{cfg.run_name}".encode()).hexdigest()[:12]
    return uuid.uuid4().hex[:12]


def advertise_host(cfg: RunConfig) -> str:
    """The name other groups use to reach this group's torchft manager: loopback for a local
    run or a loopback lighthouse, else this host's name (or --advertise-host)."""
    if cfg.advertise_host:
        return cfg.advertise_host
    host = urlparse(cfg.lighthouse).hostname if cfg.lighthouse else None
    if host is None or host in ("127.0.0.1", "localhost", "::1"):
        return "localhost"
    return socket.gethostname()


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
    path.write_text(json.dumps(spec, indent=1))
    return path


def _install_signal_handlers() -> tuple[dict, dict]:
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


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    errs = [ln for ln in lines if "Error" in ln or "error" in ln]
    return (errs or lines or [""])[-1].strip()[:300]


def _group_error(state: RunState, replica: int) -> str:
    """The first error a rank of the group wrote to its meta file, else the log's last error line."""
    for g in range(state.cfg.nproc_per_replica):
        p = layout.meta_file(state.run_dir, replica, g)
        try:
            err = json.loads(p.read_text()).get("error")
        except (OSError, ValueError):
            err = None
        if err:
            return err
    return _last_line(layout.group_log(state.run_dir, replica))


def _fired_fault(run_dir: Path, replica: int) -> str | None:
    for p in layout.fault_markers(run_dir):
        f = json.loads(p.read_text())
        if f["replica"] == replica and f["action"] in ("kill", "sigterm"):
            return f"{'SIGKILL' if f['action'] == 'kill' else 'SIGTERM'} at step {f['step']}"
    return None


PHASES = {"step": "computing, not in a torchft wait", "quorum": "waiting for a quorum", "sync": "waiting in a fragment sync"}


def _culprit(state: RunState, r: int, pending: dict, last_progress: dict, now: float) -> int:
    """Among stalled groups, blame one that is stuck outside torchft's waits (the others wait for it)."""
    stalled = [k for k in pending if now - last_progress[k] > state.cfg.stall_timeout_s * 0.5]
    for k in stalled:
        w = whereabouts.read(state.run_dir, k)
        if w is not None and w[1] == "step":
            return k
    return r


def supervise(state: RunState, on_tick) -> None:
    """Wait for every group. A group that dies is restarted while it has restarts left
    (``--restarts``), else the run fails (and the rest is stopped). A group that makes no
    progress for ``--stall-timeout`` seconds fails the run (the watchdog)."""
    cfg = state.cfg
    pending = {g.replica: g for g in state.groups}
    last_progress = {r: time.monotonic() for r in pending}
    started = set()  # groups that logged a step: before that, start-up (imports, first quorum) is slow
    startup_grace_s = max(cfg.stall_timeout_s, 180.0)
    while pending:
        now = time.monotonic()
        for r, tail in state.tails.items():
            new = tail.read_new()
            if new:
                last_progress[r] = now
                started.add(r)
            update(state.progress[r], new)
        on_tick(state)
        if state.lighthouse is not None and state.lighthouse.proc.poll() is not None:
            state.failures.append(f"lighthouse exited with code {state.lighthouse.proc.returncode}; see {state.lighthouse.log}")
            return
        for r, g in sorted(pending.items(), key=lambda kv: last_progress[kv[0]]):
            code = g.proc.poll()
            if code is None:
                if now - last_progress[r] > (cfg.stall_timeout_s if r in started else startup_grace_s):
                    r = _culprit(state, r, pending, last_progress, now)
                    g = pending[r]
                    step = state.progress[r].step
                    where = whereabouts.read(state.run_dir, r)
                    inside = f", inside step {where[0]} ({PHASES.get(where[1], where[1])})" if where else ""
                    waiting = [k for k in pending if k != r and (whereabouts.read(state.run_dir, k) or (0, ""))[1] in ("quorum", "sync")]
                    msg = (f"replica group {r} made no progress for {cfg.stall_timeout_s:g} s (stuck after step {step}{inside})"
                           + (f"; group(s) {', '.join(map(str, waiting))} wait for it in torchft" if waiting else "")
                           + f"; last log line: {_last_line(g.log)!r}; see {g.log}")
                    state.log_event("stall", replica=r, step=step, seconds=cfg.stall_timeout_s)
                    state.failures.append(msg)
                    return
                continue
            g.exit_codes.append(code)
            step = state.progress[r].step
            if code == 0:
                del pending[r]
                state.log_event("group_done", replica=r, step=step)
                continue
            state.log_event("group_exit", replica=r, code=code, step=step, restarts=g.restarts)
            if g.restarts < cfg.max_restarts:
                g.restarts += 1
                g.env["FTRUN_RESTART"] = str(g.restarts)
                g.start()
                started.discard(r)
                last_progress[r] = time.monotonic()
                state.log_event("restart", replica=r, incarnation=g.restarts, after_step=step)
                continue
            fault = _fired_fault(state.run_dir, r)
            if fault is not None:
                # killed on purpose and not relaunched: the others carry on if they can
                del pending[r]
                state.lost[r] = fault
                state.log_event("group_lost", replica=r, step=step, fault=fault)
                continue
            reason = _group_error(state, r)
            if state.lost and len(pending) < cfg.min_replicas and "timeout" in reason.lower():
                alive = len(pending)
                state.failures.append(
                    f"no quorum: {alive} replica group(s) alive but --min-replicas is {cfg.min_replicas} after "
                    + ", ".join(f"group {k} was lost ({v})" for k, v in state.lost.items())
                    + f"; replica group {r} gave up after --quorum-timeout {cfg.quorum_timeout_s:g} s ({reason}); see {g.log}"
                )
                return
            state.failures.append(
                f"replica group {r} exited with code {code} at step {step}"
                + (f" after {g.restarts} restart(s)" if g.restarts else "")
                + f": {reason}; see {g.log}"
            )
            return
        time.sleep(0.2)


def stop_all(state: RunState) -> None:
    for g in state.groups:
        if g.proc is not None:
            stop_tree(g.proc)
    if state.lighthouse is not None:
        stop_tree(state.lighthouse.proc, grace_s=1.0)


def write_manifest(state: RunState, window: tuple[int, int] | None, link: dict | None) -> dict:
    cfg, run_dir = state.cfg, state.run_dir
    metas = []
    for r in cfg.groups_here:
        for g in range(cfg.nproc_per_replica):
            p = layout.meta_file(run_dir, r, g)
            if p.exists():
                metas.append(json.loads(p.read_text()))
    first = metas[0] if metas else {}
    manifest = {
        "ftrun_version": __version__,
        "job_id": state.job_id,
        "run_name": cfg.run_name,
        "config": cfg.resolved(),
        "versions": first.get("versions", {"python": sys.version.split()[0], "ftrun": __version__}),
        "backend": first.get("backend", cfg.backend),
        "replicas": cfg.replicas,
        "nproc_per_replica": cfg.nproc_per_replica,
        "schedule": {
            "fragments": cfg.fragments,
            "sync_every": cfg.sync_every,
            "fragment_sync_delay": cfg.fragment_sync_delay,
            "steps": cfg.steps,
        },
        "fragments": first.get("fragments", []),
        "expected": [e.__dict__ for e in cfg.schedule.events(cfg.steps)],
        "profile_windows": [list(window)] if window else [],
        "traces": [
            {"replica": m["replica"], "rank": m["rank"], "path": f"{layout.TRACES}/{t}", "window": m.get("profile_window")}
            for m in metas
            for t in m.get("traces", [])
        ],
        "event_logs": [
            {"replica": r, "rank": g, "path": str(layout.event_log(run_dir, r, g).relative_to(run_dir))}
            for r in cfg.groups_here
            for g in range(cfg.nproc_per_replica)
        ],
        "link": link,
        "faults": {
            "planned": [f.to_json() for f in cfg.faults()],
            "fired": [json.loads(p.read_text()) for p in layout.fault_markers(run_dir)],
            "max_restarts": cfg.max_restarts,
        },
        "run_events": read_all(layout.run_event_log(run_dir)),
        "wall_s": round(state.ended - state.started, 3),
    }
    (run_dir / layout.MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def recovery(logs: dict[tuple[int, int], list[dict]], manifest: dict) -> dict:
    """Faults, restarts, heals, quorum changes and commits lost, from the logs alone."""
    replicas = manifest["replicas"]
    heals = [
        {"replica": r, "step": rec["step"], **rec["healed"]}
        for (r, g), recs in logs.items() if g == 0 for rec in recs if rec.get("healed")
    ]
    quorums = [
        {"observer": r, "step": rec["step"], "quorum_id": q["quorum_id"], "participants": q["participants"]}
        for (r, g), recs in logs.items() if g == 0 and r == min(x for x, _ in logs) for rec in recs for q in rec.get("quorums", [])
    ]
    failed = sorted({rec["manager_step"] for (r, g), recs in logs.items() for rec in recs if rec.get("commit") is False})
    recov = []
    for f in manifest["faults"]["fired"]:
        if f["action"] == "hang":
            continue
        back = [
            rec["t"] for (r, g), recs in logs.items() for rec in recs
            if rec.get("commit") and rec["t"] > f["fired_at"] and (rec.get("participants") or 0) >= replicas
            and any(h["replica"] == f["replica"] and h.get("manager_step", 0) <= rec["manager_step_after"] for h in heals)
        ]
        recov.append({**f, "recovered_s": round(min(back) - f["fired_at"], 3) if back else None})
    restarts = [e for e in manifest["run_events"] if e["event"] == "restart"]
    return {
        "faults": recov,
        "restarts": len(restarts),
        "heals": heals,
        "quorum_changes": quorums,
        "commits_lost": len(failed),
        "failed_commit_manager_steps": failed,
    }


def summarise(state: RunState, manifest: dict) -> dict:
    cfg, run_dir = state.cfg, state.run_dir
    logs = {
        (r, g): read_all(layout.event_log(run_dir, r, g))
        for r in cfg.groups_here
        for g in range(cfg.nproc_per_replica)
    }
    agreement = check_agreement(logs)
    wall = state.ended - state.started
    per_replica = []
    for r in cfg.groups_here:
        recs = [x for x in logs.get((r, 0), []) if x.get("step") is not None]
        train_time = sum(x["step_time_s"] for x in recs)
        per_replica.append(
            {
                "replica": r,
                "steps": len({x["step"] for x in recs}),
                "last_step": recs[-1]["step"] if recs else 0,
                "steps_per_s": round(len(recs) / train_time, 3) if train_time else None,
                "commits": sum(1 for x in recs if x.get("commit")),
                "failed_commits": sum(1 for x in recs if x.get("commit") is False),
                "final_loss": recs[-1]["loss"] if recs else None,
                "final_manager_step": recs[-1]["manager_step_after"] if recs else None,
            }
        )
    for p in per_replica:
        p["lost"] = state.lost.get(p["replica"])
        if p["last_step"] < cfg.steps and not state.failures and p["replica"] not in state.lost:
            state.failures.append(
                f"replica group {p['replica']} stopped at step {p['last_step']} of {cfg.steps}"
                + (" (restarted, but the other groups finished before it rejoined)" if p["last_step"] else "")
            )
    ok = not state.failures and agreement.ok
    return {
        "run_dir": str(run_dir),
        "ok": ok,
        "wall_s": round(wall, 3),
        "mode": cfg.mode,
        "schedule": manifest["schedule"],
        "backend": manifest["backend"],
        "link": manifest["link"],
        "replicas": per_replica,
        "agreement": {"ok": agreement.ok, "commits_checked": agreement.commits_checked, "disagreements": agreement.disagreements},
        "recovery": recovery(logs, manifest),
        "failures": state.failures,
        "traces": [str(run_dir / t["path"]) for t in manifest["traces"]],
        "manifest": str(run_dir / layout.MANIFEST),
    }


def train(cfg: RunConfig, overwrite: bool = False, json_out: bool = False, quiet: bool = False) -> int:
    """Run one training job; returns the exit code (0 ok, 1 failed run)."""
    from ftrun.report.train_view import LiveView, print_summary

    window = cfg.profile_window()
    link = None
    if cfg.link:
        from ftrun.link_spec import parse_link

        spec = parse_link(cfg.link)
        link = {"bandwidth_bps": spec.bandwidth_bps, "latency_s": spec.latency_s, "emulated": True, "describe": spec.describe()}
    jid = job_id(cfg)
    if cfg.replica_group_id >= 0:  # one run dir per group: hosts (or a loopback test) never collide
        cfg.run_name = f"{cfg.run_name or 'job'}-group{cfg.replica_group_id}"
    run_dir = prepare_run_dir(cfg, overwrite)
    state = RunState(cfg, run_dir, job_id=jid, run_log=layout.run_event_log(run_dir))
    state.run_log.parent.mkdir(parents=True, exist_ok=True)
    ranks = cfg.replicas * cfg.nproc_per_replica
    threads = max(1, (os.cpu_count() or 1) // ranks)
    spec_path = write_spec(state, window, threads, link)
    old_handlers, signals = _install_signal_handlers()
    view = LiveView(state, enabled=not (json_out or quiet))
    stopped: str | None = None
    try:
        state.started = time.time()
        if cfg.lighthouse:
            url = cfg.lighthouse
        else:
            state.lighthouse = start_lighthouse(run_dir, cfg.min_replicas, heartbeat_timeout_ms=cfg.heartbeat_timeout_ms)
            url = state.lighthouse.url
        master = (cfg.master_addr or "127.0.0.1", cfg.master_port) if cfg.master_port else None
        for r in cfg.groups_here:
            g = make_group(run_dir, spec_path, r, cfg.replicas, cfg.nproc_per_replica, url, cfg.backend, threads, master)
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
        try:
            stop_all(state)
        finally:
            for s, h in old_handlers.items():
                signal.signal(s, h)
    state.ended = time.time()
    stopped = stopped or signals["signal"]
    if stopped:
        state.log_event("stopped", signal=stopped)
        raise RunFailed(f"stopped by {stopped}; all children stopped; partial run in {run_dir}")
    manifest = write_manifest(state, window, link)
    summary = summarise(state, manifest)
    (run_dir / layout.SUMMARY).write_text(json.dumps(summary, indent=1))
    if json_out:
        print(json.dumps(summary, indent=1))
    elif not quiet:
        print_summary(summary)
    if not summary["ok"]:
        reasons = state.failures or (
            [f"replicas disagreed after {len(summary['agreement']['disagreements'])} commit(s)"] if not summary["agreement"]["ok"] else ["not every replica finished all steps"]
        )
        raise RunFailed("; ".join(reasons))
    return 0
