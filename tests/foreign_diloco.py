"""A tiny torchft streaming-DiLoCo run written the way torchft's own ``train_diloco.py`` is.

It is the source of "foreign" traces for the inspect tests: no ftrun code (its loop is
``tests/bare_diloco.py``'s), no manifest, one chrome trace per profiler window
(``step-{n}.json``), ``prof.step()`` at the TOP of each loop iteration after ``prof.start()`` (so
``ProfilerStep#k`` holds the k-th optimizer step); ``--step-at end`` calls it at the end instead
(``ProfilerStep#k`` then holds step k+1).

    python tests/foreign_diloco.py --out DIR [--replicas R] [--steps N] [--fragments F]
        [--sync-every H] [--fragment-sync-delay T] [--wait W --warmup U --active A --repeat P] [--step-at end]
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

import bare_diloco as bare


def worker(args: argparse.Namespace) -> None:
    import torch
    from torchft.process_group import ProcessGroupBabyGloo

    torch.manual_seed(0)
    model, frags = bare.mlp(args.fragments, uneven=args.uneven)
    optims = bare.optimizers(model, frags)
    pg = ProcessGroupBabyGloo(timeout=timedelta(seconds=30)) if args.pg == "baby-gloo" else None
    manager = bare.manager(model, f"foreign{args.worker}", args.lighthouse, pg=pg)
    step = [0]
    if args.fail_commit is not None:
        real_should_commit = manager.should_commit

        def should_commit(*a, **k):
            if step[0] >= args.fail_commit and not step[1:]:
                step.append(True)  # once
                manager.report_error(RuntimeError(f"foreign_diloco --fail-commit {args.fail_commit}"))
            return real_should_commit(*a, **k)

        manager.should_commit = should_commit
    x = torch.randn(16, bare.WIDTHS[0])
    y = torch.randn(16, bare.WIDTHS[args.fragments])
    prof = bare.profiler(os.path.join(args.out, f"r{args.worker}"), args, record_shapes=not args.no_shapes)

    def before(k: int) -> None:
        step[0] = k  # what the commit (in the inner optimizer's step) sees
        if args.step_at == "top":
            prof.step()

    def after(k: int, loss: torch.Tensor) -> None:
        if args.step_at == "end":
            prof.step()

    loss = lambda _: torch.nn.functional.mse_loss(model(x), y)  # noqa: E731
    schedule = (args.sync_every, args.fragment_sync_delay)
    bare.train(manager, frags, optims, schedule, loss, lambda k: k < args.steps, bare.Hooks(before, after, prof))
    bare.exit_now(manager)  # the traces are written


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--steps", type=int, default=24)
    bare.add_schedule_flags(p, sync_every=8, delay=2)
    bare.add_profiler_flags(p, active=10, repeat=2)
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
