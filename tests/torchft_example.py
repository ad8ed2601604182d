"""A torchft streaming-DiLoCo script written the way torchft's ``train_diloco.py`` is, for ``ftrun launch``.

No ftrun code (its loop is ``tests/bare_diloco.py``'s): it reads what torchft's examples read —
``REPLICA_GROUP_ID``, ``NUM_REPLICA_GROUPS`` and ``TORCHFT_LIGHTHOUSE`` (the Manager), torchrun's
``MASTER_ADDR`` / ``MASTER_PORT`` / ``RANK`` / ``WORLD_SIZE`` — calls ``prof.step()`` at the top of
each loop iteration after ``prof.start()``, writes its traces to the RELATIVE path
``output/replica-{K}/profiles/step-{N}.json``, prints ``inner step S manager step M`` every step,
and stops by itself once the manager has committed ``--manager-steps`` times.

    torchrun --standalone --nproc-per-node 1 tests/torchft_example.py [--manager-steps N]
        [--fragments F] [--sync-every H] [--fragment-sync-delay T] [--wait W --warmup U --active A]
        [--step-sleep SECONDS] [--equal-fragments] [--local-sgd] [--crash-group K --crash-at S]
"""

from __future__ import annotations

import argparse
import os
import time

import bare_diloco as bare


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--manager-steps", type=int, default=4)
    bare.add_schedule_flags(p, sync_every=4, delay=1)
    bare.add_profiler_flags(p, active=8, repeat=1)
    p.add_argument(
        "--step-sleep", type=float, default=0.0, help="seconds to sleep in every step (stands in for compute)"
    )
    p.add_argument(
        "--equal-fragments", action="store_true", help="every fragment Linear(16, 16): equal sizes, equal collectives"
    )
    p.add_argument("--local-sgd", action="store_true", help="average with torchft's LocalSGD instead of DiLoCo")
    p.add_argument("--crash-group", type=int, default=None)
    p.add_argument("--crash-at", type=int, default=3)
    args = p.parse_args()

    import torch

    replica = int(os.environ.get("REPLICA_GROUP_ID", 0))
    torch.manual_seed(0)
    widths = (16,) * (args.fragments + 1) if args.equal_fragments else bare.WIDTHS
    model, frags = bare.mlp(args.fragments, widths)
    optims = bare.optimizers(model, frags)
    manager = bare.manager(model, f"train_diloco_{replica}")
    x = torch.randn(16, widths[0])
    y = torch.randn(16, widths[args.fragments])
    prof = bare.profiler(f"output/replica-{replica}/profiles", args)

    def before(step: int) -> None:
        prof.step()
        if args.crash_group == replica and step == args.crash_at:
            raise RuntimeError(f"deliberate crash in replica group {replica} at step {step}")

    def after(step: int, loss: torch.Tensor) -> None:
        time.sleep(args.step_sleep)
        print(f"inner step {step} manager step {manager.current_step()} loss {loss.item():.4f}", flush=True)

    hooks = bare.Hooks(before, after, around=prof, local_sgd=model if args.local_sgd else None)
    schedule = (args.sync_every, args.fragment_sync_delay)
    until = args.manager_steps
    loss = lambda _: torch.nn.functional.mse_loss(model(x), y)  # noqa: E731
    bare.train(manager, frags, optims, schedule, loss, lambda _: manager.current_step() < until, hooks)
    bare.exit_now(manager)


if __name__ == "__main__":
    main()
