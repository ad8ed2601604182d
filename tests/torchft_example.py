"""A torchft streaming-DiLoCo script written the way torchft's ``train_diloco.py`` is, for ``ftrun launch``.

No ftrun code: it reads what torchft's examples read — ``REPLICA_GROUP_ID``,
``NUM_REPLICA_GROUPS`` and ``TORCHFT_LIGHTHOUSE`` (the Manager), torchrun's ``MASTER_ADDR`` /
``MASTER_PORT`` / ``RANK`` / ``WORLD_SIZE`` — calls ``prof.step()`` at the top of each loop
iteration after ``prof.start()``, writes its traces to the RELATIVE path
``output/replica-{K}/profiles/step-{N}.json``, prints ``inner step S manager step M`` every step,
and stops by itself once the manager has committed ``--manager-steps`` times.

    torchrun --standalone --nproc-per-node 1 tests/torchft_example.py [--manager-steps N]
        [--fragments F] [--sync-every H] [--delay T] [--wait W --warmup U --active A]
        [--step-sleep SECONDS] [--equal-fragments] [--local-sgd] [--crash-group K --crash-at S]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta

WIDTHS = (8, 12, 20, 28, 36, 44, 52)  # distinct sizes: fragment i is Linear(WIDTHS[i], WIDTHS[i+1])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--manager-steps", type=int, default=4)
    p.add_argument("--fragments", type=int, default=2)
    p.add_argument("--sync-every", type=int, default=4)
    p.add_argument("--delay", type=int, default=1)
    p.add_argument("--wait", type=int, default=1)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--active", type=int, default=8)
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
    import torch.nn as nn
    from torchft import Manager, ProcessGroupGloo
    from torchft.local_sgd import DiLoCo, LocalSGD

    replica = int(os.environ.get("REPLICA_GROUP_ID", 0))
    torch.manual_seed(0)
    widths = [16] * (args.fragments + 1) if args.equal_fragments else WIDTHS
    frags = [nn.Linear(widths[i], widths[i + 1]) for i in range(args.fragments)]
    model = nn.Sequential(*frags)
    inner = torch.optim.AdamW(model.parameters(), lr=1e-3)
    outer = [torch.optim.SGD(f.parameters(), lr=0.7, momentum=0.9, nesterov=True) for f in frags]
    manager = Manager(
        pg=ProcessGroupGloo(timeout=timedelta(seconds=30)),
        min_replica_size=1,
        load_state_dict=lambda sd: model.load_state_dict(sd),
        state_dict=lambda: model.state_dict(),
        use_async_quorum=False,
        replica_id=f"train_diloco_{replica}",
        hostname="localhost",
        timeout=timedelta(seconds=30),
        quorum_timeout=timedelta(seconds=30),
        connect_timeout=timedelta(seconds=30),
    )
    out = f"output/replica-{replica}/profiles"
    os.makedirs(out, exist_ok=True)
    x = torch.randn(16, widths[0])
    y = torch.randn(16, widths[args.fragments])
    prof = torch.profiler.profile(
        schedule=torch.profiler.schedule(wait=args.wait, warmup=args.warmup, active=args.active, repeat=1),
        on_trace_ready=lambda pr: pr.export_chrome_trace(f"{out}/step-{pr.step_num}.json"),
        record_shapes=True,
    )
    step = 0
    if args.local_sgd:
        averaging = LocalSGD(manager, model, inner, sync_every=args.sync_every)
    else:
        averaging = DiLoCo(manager, frags, inner, outer, sync_every=args.sync_every, fragment_sync_delay=args.delay)
    with averaging:
        prof.start()
        while manager.current_step() < args.manager_steps:
            prof.step()
            step += 1
            if args.crash_group == replica and step == args.crash_at:
                raise RuntimeError(f"deliberate crash in replica group {replica} at step {step}")
            inner.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            inner.step()
            time.sleep(args.step_sleep)
            print(f"inner step {step} manager step {manager.current_step()} loss {loss.item():.4f}", flush=True)
        prof.stop()
    manager.shutdown(wait=False)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown: torchft's threads can abort it after the work is done


if __name__ == "__main__":
    main()
