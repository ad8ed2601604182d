"""One training rank, started by torch's elastic launcher: ``-m ftrun.worker.main SPEC.json``.

Environment (set by ftrun's launcher, as torchft's examples use): ``REPLICA_GROUP_ID``,
``NUM_REPLICA_GROUPS``, ``TORCHFT_LIGHTHOUSE``; torchrun adds ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT`` for the group's own store.

Per rank: a torchft ``Manager`` (``use_async_quorum=False``) over a reconfigurable process
group, ``torchft.local_sgd.DiLoCo`` over the model's fragments, AdamW inside, Nesterov SGD
outside. Ranks of one group share the model through DDP; rank g of every group forms the
cross-group torchft process group. Each step is wrapped in ``ftrun::step#S manager_step=M``.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import platform
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path


def die_with_parent() -> None:
    """SIGKILL this rank if its launcher dies, even if the launcher was SIGKILLed."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    if os.getppid() == 1:
        os._exit(1)


def make_process_group(backend: str, timeout: timedelta):
    import torchft

    if backend == "nccl":
        return torchft.ProcessGroupNCCL(timeout=timeout)
    if backend == "baby-nccl":
        return torchft.ProcessGroupBabyNCCL(timeout=timeout)
    return torchft.ProcessGroupGloo(timeout=timeout)


def main(spec_path: str) -> int:
    die_with_parent()
    spec = json.loads(Path(spec_path).read_text())
    cfg = spec["config"]
    run_dir = Path(spec["run_dir"])

    import torch
    import torch.nn.functional as F
    import torchft
    from torch.profiler import record_function
    from torchft.local_sgd import DiLoCo

    from ftrun import __version__, layout
    from ftrun.labels import ftrun_step_label
    from ftrun.worker.data import Batches
    from ftrun.worker.faults import Faults
    from ftrun.worker.models import TokenModel, describe_fragments, split_fragments
    from ftrun.worker.profiling import make_profiler
    from ftrun.worker.quorum_probe import QuorumProbe
    from ftrun.worker.whereabouts import Whereabouts
    from ftrun.worker.recorder import StepRecorder

    replica = int(os.environ["REPLICA_GROUP_ID"])
    restart = int(os.environ.get("FTRUN_RESTART", 0))  # 0 = first incarnation of this group
    rank = int(os.environ.get("RANK", 0))
    group_size = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.set_num_threads(int(spec.get("threads", 1)))

    backend = cfg["backend"]
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend in ("nccl", "baby-nccl"):
        device = torch.device("cuda", local_rank % max(torch.cuda.device_count(), 1))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")

    torch.manual_seed(cfg["seed"])  # identical initial weights on every replica and rank
    model = TokenModel(cfg["model"], cfg["vocab"], cfg["width"], cfg["blocks"], cfg["seq_len"]).to(device)
    fragments = split_fragments(model, cfg["fragments"])
    train_model = model
    if group_size > 1:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=timedelta(seconds=cfg["timeout_s"]))
        train_model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)

    stream = replica * group_size + rank + 1000 * restart  # a restarted group draws fresh data
    data = Batches(cfg["data"], cfg["vocab"], cfg["seq_len"], cfg["batch_size"], cfg["seed"], stream)
    inner = torch.optim.AdamW(model.parameters(), lr=cfg["inner_lr"])
    outer = [
        torch.optim.SGD(f.parameters(), lr=cfg["outer_lr"], momentum=cfg["outer_momentum"], nesterov=cfg["outer_momentum"] > 0)
        for f in fragments
    ]

    # What a healing replica receives from a live peer (torchft's checkpoint transport). The
    # peer's training step comes along so a restarted group rejoins the run's step numbering.
    clock = {"step": 0, "healed_from_step": None}

    def state_dict():
        return {"model": model.state_dict(), "inner": inner.state_dict(), "train_step": clock["step"]}

    def load_state_dict(sd) -> None:
        model.load_state_dict(sd["model"])
        inner.load_state_dict(sd["inner"])
        clock["healed_from_step"] = int(sd["train_step"])

    timeout = timedelta(seconds=cfg["timeout_s"])
    pg = make_process_group(backend, timeout)
    if spec.get("link"):
        from ftrun.worker.link import LinkEmulator

        pg = LinkEmulator(pg, spec["link"]["bandwidth_bps"], spec["link"]["latency_s"])
    manager = torchft.Manager(
        pg=pg,
        min_replica_size=cfg["min_replicas"],
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=f"{spec['job_id']}_replica{replica}",
        timeout=timeout,
        quorum_timeout=timedelta(seconds=spec.get("quorum_timeout_s", cfg["timeout_s"])),
        use_async_quorum=False,
        init_sync=False,  # every replica starts from the same seeded weights
        hostname=spec.get("hostname", "localhost"),
    )
    probe = QuorumProbe(manager)
    where = Whereabouts(run_dir, replica, enabled=rank == 0)
    manager.start_quorum = where.around("quorum", manager.start_quorum)

    worker = layout.worker_name(replica, rank)
    recorder = StepRecorder(layout.event_log(run_dir, replica, rank))
    writer = None
    if rank == 0:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(run_dir / layout.TB / f"replica{replica}"))
    # a restarted group is not profiled: its steps are only known after it has healed
    window = tuple(spec["profile_window"]) if spec.get("profile_window") and not restart else None
    traces: list[str] = []
    faults = Faults(spec.get("faults", []), replica, rank, run_dir)

    meta = {
        "replica": replica,
        "rank": rank,
        "group_size": group_size,
        "backend": backend,
        "device": str(device),
        "fragments": describe_fragments(fragments),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "torchft": getattr(torchft, "__version__", None) or _dist_version("torchft"),
            "ftrun": __version__,
        },
        "pid": os.getpid(),
        "restart": restart,
        "traces": traces,
        "profile_window": list(window) if window else None,
    }
    meta_path = layout.meta_file(run_dir, replica, rank)
    meta_path.parent.mkdir(parents=True, exist_ok=True)

    def write_meta(status: str) -> None:
        meta["status"] = status
        meta_path.write_text(json.dumps(meta, indent=1))

    write_meta("running")
    if not restart:
        start_line(run_dir, spec, worker)
    steps = cfg["steps"]
    sleep_s = cfg.get("step_sleep_ms", 0.0) / 1e3
    try:
        with DiLoCo(
            manager,
            fragments,
            inner,
            outer,
            sync_every=cfg["sync_every"],
            fragment_sync_delay=cfg["fragment_sync_delay"],
            fragment_update_alpha=cfg["fragment_update_alpha"],
            use_bucketization=cfg["bucketize"],
            should_quantize=cfg["quantize"],
            backup_device=device,
        ) as diloco:
            recorder.attach(diloco)
            for frag in diloco._fragments:
                frag.perform_sync = where.around("sync", frag.perform_sync)
            prof = make_profiler(window, run_dir / layout.TRACES, replica, rank, traces) if window else None
            if prof is not None:
                prof.start()
            step = 1
            rejoining = bool(restart)  # until the first quorum tells us where the run is
            while step <= steps:
                if prof is not None:
                    prof.step()
                if not rejoining:
                    where.set("step", step)
                    faults.before_step(step)
                clock["step"] = step
                mstep = manager.current_step()
                t0 = time.perf_counter()
                with record_function(ftrun_step_label(step, mstep)) if prof is not None else contextlib.nullcontext():
                    inputs, targets = data.next()
                    inputs, targets = inputs.to(device), targets.to(device)
                    inner.zero_grad()
                    logits = train_model(inputs)
                    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
                    loss.backward()
                    inner.step()  # DiLoCo's post-hook sends/syncs here (and quorums, and heals)
                    if sleep_s:
                        time.sleep(sleep_s)
                dt = time.perf_counter() - t0
                loss_value = float(loss.detach())
                quorums = probe.take()
                extra = {}
                if quorums:
                    extra["quorums"] = quorums
                healed_from = clock["healed_from_step"]
                if healed_from is not None:
                    src = next((q["heal_source"] for q in reversed(quorums) if q["heal"]), None)
                    extra["healed"] = {"source_replica": src, "peer_step": healed_from, "manager_step": manager.current_step()}
                    clock["healed_from_step"] = None
                if rejoining and quorums:
                    # the quorum aligned us with the live replicas at their send step
                    aligned = healed_from if healed_from is not None else peers_step(run_dir, replica)
                    extra["rejoined"] = {"local_step": step, "aligned_step": aligned}
                    if aligned is not None:
                        step = aligned
                    rejoining = False
                participants = manager.num_participants() if manager._quorum_future is not None else None
                recorder.end_step(
                    step=None if rejoining else step,
                    manager_step=mstep,
                    manager_step_after=manager.current_step(),
                    participants=participants,
                    quorum_id=getattr(manager, "_quorum_id", None),
                    loss=loss_value,
                    step_time_s=dt,
                    restart=restart,
                    **extra,
                )
                if writer is not None and not rejoining:
                    writer.add_scalar("loss", loss_value, step)
                    writer.add_scalar("step_time_s", dt, step)
                    writer.add_scalar("manager_step", manager.current_step(), step)
                    if participants is not None:
                        writer.add_scalar("participants", participants, step)
                step += 1
            if prof is not None:
                prof.stop()
    except Exception as e:
        meta["error"] = f"{type(e).__name__}: {e}".strip().splitlines()[0][:500]
        write_meta("failed")
        raise
    meta["commits"] = recorder.commits
    meta["failed_commits"] = recorder.failed_commits
    meta["final_manager_step"] = manager.current_step()
    write_meta("done")
    recorder.close()
    if writer is not None:
        writer.close()
    manager.shutdown(wait=False)
    return 0


def start_line(run_dir: Path, spec: dict, worker: str, timeout_s: float = 300.0) -> None:
    """Wait until every rank of the job has its Manager up, so the first quorum has everyone.

    A local run only (``start_barrier`` = number of ranks); restarted groups skip it.
    """
    n = spec.get("start_barrier")
    if not n or os.environ.get("FTRUN_RESTART"):
        return
    ready = run_dir / "ready"
    ready.mkdir(exist_ok=True)
    (ready / worker).touch()
    deadline = time.monotonic() + timeout_s
    while len(list(ready.iterdir())) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"start line: only {len(list(ready.iterdir()))} of {n} ranks ready after {timeout_s}s")
        time.sleep(0.05)


def peers_step(run_dir: Path, replica: int) -> int | None:
    """The step the live replicas are at (local runs without a heal): last logged step + 1.

    Called right after a rejoining group's first quorum, when the live groups are blocked in
    the same quorum inside their send step, so their last complete record is the step before.
    """
    from ftrun.launch.progress import read_all

    best = None
    for p in (run_dir / "events").glob("replica*_rank0.jsonl"):
        if p.name.startswith(f"replica{replica}_"):
            continue
        steps = [r["step"] for r in read_all(p) if r.get("step") is not None]
        if steps:
            best = max(best or 0, steps[-1] + 1)
    return best


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    code = main(sys.argv[1])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # torchft's background threads must not keep the rank alive
