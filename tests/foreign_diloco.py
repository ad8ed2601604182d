"""A tiny torchft streaming-DiLoCo run written the way torchft's own ``train_diloco.py`` is.

It is the source of "foreign" traces for the inspect tests: no ftrun code, no manifest, one
chrome trace per profiler window (``step-{n}.json``), ``prof.step()`` at the TOP of each loop
iteration after ``prof.start()`` (so ``ProfilerStep#k`` holds the k-th optimizer step);
``--step-at end`` calls it at the end instead (``ProfilerStep#k`` then holds step k+1).

    python tests/foreign_diloco.py --out DIR [--replicas R] [--steps N] [--fragments F]
        [--sync-every H] [--delay T] [--wait W --warmup U --active A --repeat P] [--step-at end]
        [--no-shapes] [--uneven] [--pg gloo|baby-gloo] [--fail-commit STEP]

``--no-shapes`` profiles with ``record_shapes=False`` (as torchft's ``train_diloco.py`` does);
``--uneven`` gives fragment i i+1 Linear layers (2(i+1) parameters), so fragments differ in the
number of allreduces; ``--pg baby-gloo`` uses ``ProcessGroupBabyGloo`` (torchft 0.2.0's Baby PGs
fail commits: see /work/shared/torchft-notes.md "Known defects"; the nightly's commit).
``--fail-commit STEP``: every replica's commit fails at its first sync at or after optimizer step
STEP (the worker reports an error to its Manager before ``should_commit``, as a user's script
whose step went wrong would) — a failed commit on every torchft release.

With R replicas the parent runs an in-process lighthouse on loopback and starts R worker
processes; worker r writes ``DIR/r{r}/step-{n}.json``. Everything binds loopback or an
ephemeral port (the manager server binds ``[::]:0``, torchft's only choice).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from datetime import timedelta

# Distinct widths: fragment i holds Linear(D[i], D[i+1]) so every fragment has its own
# tensor-size signature.
WIDTHS = (8, 12, 20, 28, 36, 44, 52)


def build_model(fragments: int, uneven: bool = False):
    import torch.nn as nn

    if not uneven:
        layers = [nn.Linear(WIDTHS[i], WIDTHS[i + 1]) for i in range(fragments)]
        return nn.Sequential(*layers), layers
    frags = [
        nn.Sequential(nn.Linear(WIDTHS[i], WIDTHS[i + 1]), *(nn.Linear(WIDTHS[i + 1], WIDTHS[i + 1]) for _ in range(i)))
        for i in range(fragments)
    ]
    return nn.Sequential(*frags), frags


def worker(args: argparse.Namespace) -> None:
    import torch
    from torch.distributed import TCPStore
    from torchft import Manager, ProcessGroupGloo
    from torchft.local_sgd import DiLoCo
    from torchft.process_group import ProcessGroupBabyGloo

    torch.manual_seed(0)
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    model, frags = build_model(args.fragments, args.uneven)
    inner = torch.optim.AdamW(model.parameters(), lr=1e-3)
    outer = [torch.optim.SGD(f.parameters(), lr=0.7, momentum=0.9, nesterov=True) for f in frags]
    pg = (ProcessGroupBabyGloo if args.pg == "baby-gloo" else ProcessGroupGloo)(timeout=timedelta(seconds=30))
    manager = Manager(
        pg=pg,
        min_replica_size=1,
        load_state_dict=lambda sd: model.load_state_dict(sd),
        state_dict=lambda: model.state_dict(),
        use_async_quorum=False,
        rank=0,
        world_size=1,
        store_addr="127.0.0.1",
        store_port=store.port,
        lighthouse_addr=args.lighthouse,
        replica_id=f"foreign{args.worker}",
        hostname="127.0.0.1",
        timeout=timedelta(seconds=30),
        quorum_timeout=timedelta(seconds=30),
        connect_timeout=timedelta(seconds=30),
    )
    step = [0]
    if args.fail_commit is not None:
        real_should_commit = manager.should_commit

        def should_commit(*a, **k):
            if step[0] >= args.fail_commit and not step[1:]:
                step.append(True)  # once
                manager.report_error(RuntimeError(f"foreign_diloco --fail-commit {args.fail_commit}"))
            return real_should_commit(*a, **k)

        manager.should_commit = should_commit
    out = os.path.join(args.out, f"r{args.worker}")
    os.makedirs(out, exist_ok=True)
    x = torch.randn(16, WIDTHS[0])
    y = torch.randn(16, WIDTHS[args.fragments])
    prof = torch.profiler.profile(
        schedule=torch.profiler.schedule(wait=args.wait, warmup=args.warmup, active=args.active, repeat=args.repeat),
        on_trace_ready=lambda p: p.export_chrome_trace(f"{out}/step-{p.step_num}.json"),
        record_shapes=not args.no_shapes,
    )
    with DiLoCo(manager, frags, inner, outer, sync_every=args.sync_every, fragment_sync_delay=args.delay):
        prof.start()
        for _ in range(args.steps):
            if args.step_at == "top":
                prof.step()
            inner.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            step[0] += 1
            inner.step()
            if args.step_at == "end":
                prof.step()
        prof.stop()
    manager.shutdown(wait=False)
    # The traces are written. Skip interpreter teardown: torchft's background threads can abort it
    # ("terminate called without an active exception", exit -6) after all the work is done.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--fragments", type=int, default=2)
    p.add_argument("--sync-every", type=int, default=8)
    p.add_argument("--delay", type=int, default=2)
    p.add_argument("--wait", type=int, default=1)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--active", type=int, default=10)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--step-at", choices=("top", "end"), default="top", help="where prof.step() is called")
    p.add_argument("--no-shapes", action="store_true", help="record_shapes=False (torchft's train_diloco.py)")
    p.add_argument("--uneven", action="store_true", help="fragment i has i+1 Linear layers")
    p.add_argument("--pg", choices=("gloo", "baby-gloo"), default="gloo")
    p.add_argument("--fail-commit", type=int, default=None, help="fail the commit at the first sync from this step")
    p.add_argument("--worker", type=int, default=None)
    p.add_argument("--lighthouse", default=None)
    args = p.parse_args()
    if args.worker is not None:
        worker(args)
        return

    from torchft._torchft import LighthouseServer

    lh = LighthouseServer(bind="127.0.0.1:0", min_replicas=args.replicas, join_timeout_ms=2000)
    argv = [a for a in sys.argv[1:]]
    procs = [
        subprocess.Popen([sys.executable, __file__, *argv, "--worker", str(r), "--lighthouse", lh.address()])
        for r in range(args.replicas)
    ]
    codes, hung = _wait_all(procs)
    lh.shutdown()
    if any(codes):
        why = f" (worker(s) {hung} hung after a peer ended: killed)" if hung else ""
        sys.exit(f"foreign_diloco: worker exit codes {codes}{why}")


def _wait_all(procs: list, grace_s: float = 60.0, limit_s: float = 600.0) -> tuple[list, list]:
    """Every worker's exit code, and the workers killed because they were still running ``grace_s``
    after another had ended (the workers sync every few steps, so they end within a sync of each
    other; one left waiting on a peer that is gone — torchft's wait can outlast its timeouts — never
    ends by itself), or at ``limit_s``."""
    import time

    start, first_end, hung = time.monotonic(), None, []
    while any(pr.poll() is None for pr in procs):
        now = time.monotonic()
        if first_end is None and any(pr.poll() is not None for pr in procs):
            first_end = now
        if (first_end is not None and now - first_end > grace_s) or now - start > limit_s:
            hung = [r for r, pr in enumerate(procs) if pr.poll() is None]
            for r in hung:
                procs[r].kill()
            break
        time.sleep(0.2)
    return [pr.wait() for pr in procs], hung


if __name__ == "__main__":
    main()
