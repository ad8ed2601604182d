"""``ftrun launch``'s inputs and what it builds from them: one torchrun job per replica group
running a user's script unchanged. Torch-free; no rendering.

* ``LaunchSpec.build(...)`` checks every flag up front (``BadInput``, one line each): the
  script exists, the schedule obeys torchft's rules (``ftrun.schedule.validate``), ``--kill``
  specs (``ftrun.fault_flags.parse_launch_kill``), ``--env K=V`` pairs.
* ``script_group`` gives group r: argv ``python -m torch.distributed.run ... SCRIPT ARGS`` under
  a subreaper (``ftrun.launch.reaper``: nothing the script starts outlives the group), the
  caller's environment plus torchft's (``REPLICA_GROUP_ID``, ``NUM_REPLICA_GROUPS``,
  ``TORCHFT_LIGHTHOUSE``), the group's devices and ``NCCL_HOSTID`` with CUDA, ``FTRUN_RUN_DIR``,
  ``FTRUN_TRACE_DIR`` (``traces/replica{r}/``), then ``--env``, then the numerics hook first on
  ``PYTHONPATH`` (``ftrun.launch.autohook``: the script's DiLoCo sketched into ``events/``); it
  runs in ``groups/replica{r}/``.
* ``launch_manifest`` is the run dir's ``manifest.json``: enough for ``inspect-trace RUN_DIR``.
"""

from __future__ import annotations

import os
import re
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ftrun import layout
from ftrun.config import MAX_WAIT_S
from ftrun.config.commands import LaunchOptions
from ftrun.errors import BadInput
from ftrun.fault_flags import LaunchKill, parse_launch_kill
from ftrun.launch.autohook.boot import HOOK_DIR, pythonpath
from ftrun.launch.groups import Group, group_env, torchrun_argv
from ftrun.launch.reaper import reaper_argv
from ftrun.output import check_name
from ftrun.schedule import ScheduleError, validate
from ftrun.torchft_compat import versions
from ftrun.version import __version__

NUMBERINGS = ("top", "end", "auto")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# set by ftrun for every group: an --env may not replace them
RESERVED_ENV = ("REPLICA_GROUP_ID", "NUM_REPLICA_GROUPS", "TORCHFT_LIGHTHOUSE", "FTRUN_RUN_DIR", "FTRUN_TRACE_DIR")


def parse_env_pairs(pairs: Sequence[str]) -> dict[str, str]:
    """``--env K=V`` pairs (V may be empty or hold '='); ``BadInput`` for a bad or reserved K."""
    out: dict[str, str] = {}
    for p in pairs:
        key, eq, value = p.partition("=")
        if not eq or not _ENV_KEY.match(key):
            raise BadInput(f"--env {p!r}: expected KEY=VALUE with KEY a variable name, e.g. --env NCCL_DEBUG=INFO")
        if key in RESERVED_ENV:
            raise BadInput(f"--env {p}: {key} is set by ftrun for each replica group")
        if key in out:
            raise BadInput(f"--env {key}: given twice")
        out[key] = value
    return out


@dataclass
class LaunchSpec:
    script: Path  # absolute
    args: list[str]
    replicas: int = 2
    nproc_per_replica: int = 1
    lighthouse: str | None = None
    min_replicas: int = 2
    schedule: dict | None = None  # {fragments, sync_every, fragment_sync_delay} or None
    inspect: bool = True
    step_numbering: str = "top"
    kills: list[LaunchKill] = field(default_factory=list)
    kill_texts: list[str] = field(default_factory=list)
    restarts: int = 0
    timeout_s: float | None = None
    env: dict[str, str] = field(default_factory=dict)
    out: str = "profiles"
    run_name: str | None = None

    @classmethod
    def build(cls, script_and_args: Sequence[str], opts: LaunchOptions | None = None) -> LaunchSpec:
        """Check every flag (module docstring); ``BadInput`` on the first bad one. ``opts``:
        launch's options (``ftrun.config.commands``; None: the defaults)."""
        o = opts or LaunchOptions()
        path, args = _script(script_and_args)
        if o.replicas < 1:
            raise BadInput(f"--replicas {o.replicas}: must be at least 1")
        if o.nproc_per_replica < 1:
            raise BadInput(f"--nproc-per-replica {o.nproc_per_replica}: must be at least 1")
        if o.lighthouse is not None and o.min_replicas is not None:
            raise BadInput(
                "--min-replicas: configures the lighthouse ftrun starts; "
                "with --lighthouse URL set it on that lighthouse"
            )
        if o.lighthouse is not None and not re.match(r"^https?://[^/\s]+(:\d+)?/?$", o.lighthouse):
            raise BadInput(f"--lighthouse {o.lighthouse!r}: expected http://HOST:PORT")
        mr = o.replicas if o.min_replicas is None else o.min_replicas
        if not 1 <= mr <= o.replicas:
            raise BadInput(f"--min-replicas {mr}: must be between 1 and --replicas ({o.replicas})")
        sched = _schedule(o)
        step_numbering = o.step_numbering or "top"
        if step_numbering not in NUMBERINGS:
            raise BadInput(f"--step-numbering {step_numbering!r}: expected top, end or auto")
        kills = [parse_launch_kill(k, o.replicas) for k in o.kill]
        if len({k for k in kills}) != len(kills):
            raise BadInput("--kill: the same fault is given twice")
        restarts = o.restarts if o.restarts is not None else 1 if kills else 0  # as `ftrun train`: relaunched once
        if restarts < 0:
            raise BadInput(f"--restarts {restarts}: must be >= 0")
        if o.timeout is not None and not 0 < o.timeout <= MAX_WAIT_S:  # the bound of train's timeouts
            raise BadInput(f"--timeout {o.timeout:g}: must be > 0 and at most {MAX_WAIT_S:g} seconds (7 days)")
        if o.run_name is not None:
            check_name("--run-name", o.run_name)
        return cls(
            path.resolve(),
            list(args),
            o.replicas,
            o.nproc_per_replica,
            o.lighthouse,
            mr,
            sched,
            not o.no_inspect,
            step_numbering,
            kills,
            list(o.kill),
            restarts,
            o.timeout,
            parse_env_pairs(o.env),
            o.out,
            o.run_name,
        )


def _script(script_and_args: Sequence[str]) -> tuple[Path, list[str]]:
    """The script (an existing file) and its arguments."""
    if not script_and_args:
        raise BadInput("no script: give it after --, e.g. ftrun launch --replicas 2 -- train.py --steps 100")
    script, *args = script_and_args
    if not script.strip():
        raise BadInput("script '': must not be empty")
    path = Path(script)
    if not path.exists():
        raise BadInput(f"script {script}: no such file")
    if not path.is_file():
        raise BadInput(f"script {script}: not a file")
    return path, args


def _schedule(o: LaunchOptions) -> dict[str, int] | None:
    """The schedule the script runs (all three flags, torchft's rule), or None (``--no-check``)."""
    sched = {"fragments": o.fragments, "sync_every": o.sync_every, "fragment_sync_delay": o.fragment_sync_delay}
    given = {k: v for k, v in sched.items() if v is not None}
    if given and len(given) < 3 or (not given and not o.no_inspect):
        missing = " ".join(f"--{k.replace('_', '-')}" for k, v in sched.items() if v is None)
        raise BadInput(f"{missing}: give the schedule the script runs (to check its traces), or --no-check")
    if len(given) == 3:
        try:
            validate(given["fragments"], given["sync_every"], given["fragment_sync_delay"])
        except ScheduleError as e:
            raise BadInput(f"--{e.field.replace('_', '-')} {e.value}: {e.rule} (torchft's DiLoCo rule)") from None
    return given or None


def script_group(
    spec: LaunchSpec,
    run_dir: Path,
    replica: int,
    lighthouse_url: str,
    devices_env: dict[str, str] | None,
    base_env: dict[str, str] | None = None,
) -> Group:
    """Replica group ``replica`` (module docstring). ``devices_env``: the group's
    ``CUDA_VISIBLE_DEVICES`` from ``ftrun.launch.placement`` (None: no GPUs)."""
    threads = max(1, (os.cpu_count() or 1) // (spec.replicas * spec.nproc_per_replica))
    placement = None if devices_env is None else {**devices_env, "NCCL_HOSTID": f"ftrun_replica{replica}"}
    env = group_env(
        replica, spec.replicas, lighthouse_url, threads, "auto" if placement else "gloo", placement, base_env
    )
    trace_dir = layout.group_trace_dir(run_dir, replica)
    env.update(FTRUN_RUN_DIR=str(run_dir.resolve()), FTRUN_TRACE_DIR=str(trace_dir.resolve()))
    env.update(spec.env)
    # the numerics hook first on the path, the caller's (or --env's) entries after it
    env["PYTHONPATH"] = pythonpath(hook_dir(run_dir), env.get("PYTHONPATH"))
    # under a subreaper: whatever the script starts (a setsid daemon too) ends with the group
    argv = reaper_argv(torchrun_argv(spec.nproc_per_replica) + [str(spec.script), *spec.args])
    return Group(replica, argv, env, layout.group_log(run_dir, replica), cwd=layout.group_dir(run_dir, replica))


def hook_dir(run_dir: Path) -> Path:
    """The run dir's ``hook/`` (``ftrun.launch.autohook.boot.write_hook_dir`` fills it), absolute:
    the groups run in their own working directories."""
    return (run_dir / HOOK_DIR).resolve()


def event_log_refs(run_dir: Path) -> list[layout.EventLogRef]:
    """The event logs the launch hook wrote (``events/replica{r}_rank{g}.jsonl``)."""
    out = []
    for p in sorted((run_dir / layout.EVENT_LOGS).glob("replica*_rank*.jsonl")):
        w = layout.parse_worker(p.name)
        if w is not None:
            out.append(layout.EventLogRef(w[0], w[1], str(p.relative_to(run_dir))))
    return out


def launch_manifest(
    spec: LaunchSpec,
    run_dir: Path,
    lighthouse_url: str,
    groups: list[Group],
    status: dict[int, str],
    fired: list[layout.FiredKill],
    traces: list,
    seconds: float,
) -> layout.LaunchManifest:
    """``manifest.json`` of a launch (``layout.LaunchManifest``): what ran and what it wrote;
    ``traces`` lists each found trace with its replica and rank (unknown ranks are left out)."""
    return layout.LaunchManifest(
        ftrun_version=__version__,
        job_id=uuid.uuid4().hex[:12],
        run_name=run_dir.name,
        script=str(spec.script),
        args=spec.args,
        python=sys.executable,
        versions=versions(),  # the groups run this interpreter (torchrun of sys.executable)
        env_added={
            **{k: "<per group>" for k in RESERVED_ENV},
            **spec.env,
            "PYTHONPATH": pythonpath(hook_dir(run_dir), spec.env.get("PYTHONPATH", "<the caller's, if any>")),
        },
        # a foreign script's step count is not known to ftrun
        schedule=layout.LaunchSchedule(**(spec.schedule or {}), steps=None),
        step_numbering=spec.step_numbering,
        replicas=spec.replicas,
        nproc_per_replica=spec.nproc_per_replica,
        lighthouse=lighthouse_url,
        min_replicas=spec.min_replicas,
        restarts=spec.restarts,
        timeout_s=spec.timeout_s,
        seconds=round(seconds, 3),
        groups=[
            layout.LaunchGroup(
                replica=g.replica,
                cwd=str(g.cwd.relative_to(run_dir)) if g.cwd is not None else ".",
                log=str(g.log.relative_to(run_dir)),
                state=status.get(g.replica),
                exit_codes=list(g.exit_codes),
                restarts=g.restarts,
            )
            for g in groups
        ],
        launch_faults=layout.LaunchFaults(requested=list(spec.kill_texts), fired=list(fired)),
        traces=[
            layout.TraceRef(
                replica=t.replica,
                rank=t.rank,
                path=str(t.path.relative_to(run_dir)),
                window=None,
                rank_source=t.rank_source,
            )
            for t in traces
            if t.rank is not None
        ],
        event_logs=event_log_refs(run_dir),
        format=layout.FORMAT,
    )
