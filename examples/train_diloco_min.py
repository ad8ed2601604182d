"""A small torchft streaming-DiLoCo training script, in the shape of torchft's ``train_diloco.py``.

Your own loop, ``torchft.Manager``, ``DiLoCo`` from ``torchft.local_sgd`` and a torch profiler
with a schedule (``prof.step()`` at the top of each iteration, as torchft's example does). It
knows nothing of ftrun: it reads what torchft's examples read (``REPLICA_GROUP_ID``,
``TORCHFT_LIGHTHOUSE`` and torchrun's ``MASTER_ADDR``/``MASTER_PORT``/``RANK``/``WORLD_SIZE``)
and writes its traces to ``output/replica-{K}/profiles/`` under the working directory. It
trains a small MLP on random data, on CPU with Gloo, and stops once the manager has
committed ``--steps`` times. Run it as two replica groups and check its schedule:

    ftrun launch --replicas 2 --fragments 2 --sync-every 4 --fragment-sync-delay 1 -- examples/train_diloco_min.py

(the flags after ``launch`` repeat the schedule the script uses, so the check knows what to expect).
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import timedelta

import torch
from torch import nn
from torchft import Manager, ProcessGroupGloo
from torchft.local_sgd import DiLoCo


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=6, help="outer steps: stop after this many commits")
    p.add_argument("--fragments", type=int, default=2, help="model fragments F (one Linear layer each)")
    p.add_argument("--sync-every", type=int, default=4, help="inner steps H between two syncs of a fragment")
    p.add_argument("--fragment-sync-delay", type=int, default=1, help="steps tau between a send and its sync")
    args = p.parse_args()

    replica = int(os.environ.get("REPLICA_GROUP_ID", 0))
    torch.manual_seed(0)  # every group starts from the same model
    widths = [16 + 8 * i for i in range(args.fragments + 1)]
    fragments = [nn.Linear(widths[i], widths[i + 1]) for i in range(args.fragments)]
    model = nn.Sequential(*fragments)
    inner = torch.optim.AdamW(model.parameters(), lr=1e-3)
    outer = [torch.optim.SGD(f.parameters(), lr=0.7, momentum=0.9, nesterov=True) for f in fragments]

    manager = Manager(
        pg=ProcessGroupGloo(timeout=timedelta(seconds=30)),
        min_replica_size=1,
        load_state_dict=model.load_state_dict,
        state_dict=model.state_dict,
        replica_id=f"train_diloco_min_{replica}",
        use_async_quorum=False,
        timeout=timedelta(seconds=30),
        quorum_timeout=timedelta(seconds=30),
    )

    out = f"output/replica-{replica}/profiles"
    os.makedirs(out, exist_ok=True)
    prof = torch.profiler.profile(
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=8, repeat=1),
        on_trace_ready=lambda pr: pr.export_chrome_trace(f"{out}/step-{pr.step_num}.json"),
        record_shapes=True,  # Gloo's collectives carry no sizes; their inputs' shapes do
    )
    data = torch.Generator().manual_seed(replica)  # each group trains on its own data
    step = 0
    with DiLoCo(
        manager,
        fragments,
        inner,
        outer,
        sync_every=args.sync_every,
        fragment_sync_delay=args.fragment_sync_delay,
    ):
        prof.start()
        while manager.current_step() < args.steps:
            prof.step()  # at the loop top: ProfilerStep#k is iteration k-1, as in torchft's example
            step += 1
            x = torch.randn(32, widths[0], generator=data)
            y = torch.randn(32, widths[-1], generator=data)
            inner.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            inner.step()  # DiLoCo's hook sends and syncs the fragments on their steps
            print(f"replica {replica} step {step} outer step {manager.current_step()} loss {loss.item():.4f}")
        prof.stop()
    manager.shutdown(wait=False)
    sys.stdout.flush()
    os._exit(0)  # torchft's background threads can abort the interpreter's teardown; the work is done


if __name__ == "__main__":
    main()
