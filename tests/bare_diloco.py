"""One bare torchft streaming-DiLoCo loop, shared by the scripts that stand for "a script ftrun did
not write": ``tests/torchft_example.py`` (run under ``ftrun launch``), ``tests/foreign_diloco.py``
(foreign traces) and the bare side of ``scripts/bench_overhead.py``.

No ftrun import, here or in what imports it for that role: the loop is torchft's own (Manager +
``torchft.local_sgd.DiLoCo`` over the fragments, AdamW inner and Nesterov SGD outer optimizers, as
torchft's ``train_diloco.py``), so a launch hook, a patched torchft or an inspected trace sees only
torchft. The schedule flags have ftrun's names (``add_schedule_flags``); each script adds its own.
A script imports this module from its own directory (``tests/`` is first on ``sys.path`` when it
runs as ``python tests/X.py`` or under torchrun); the benchmark puts ``tests/`` on the path.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

# Distinct widths: fragment i is Linear(WIDTHS[i], WIDTHS[i + 1]), each with its own tensor sizes.
WIDTHS = (8, 12, 20, 28, 36, 44, 52)


def add_schedule_flags(p: argparse.ArgumentParser, sync_every: int, delay: int) -> None:
    """``--fragments``, ``--sync-every``, ``--fragment-sync-delay``: ftrun's names for DiLoCo's F, H, tau."""
    p.add_argument("--fragments", type=int, default=2, help="model fragments F")
    p.add_argument("--sync-every", type=int, default=sync_every, help="inner steps H between two syncs of a fragment")
    p.add_argument("--fragment-sync-delay", type=int, default=delay, help="steps tau between a send and its sync")


def add_profiler_flags(p: argparse.ArgumentParser, active: int, repeat: int) -> None:
    """The torch profiler's schedule: ``--wait``, ``--warmup``, ``--active``, ``--repeat``."""
    p.add_argument("--wait", type=int, default=1)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--active", type=int, default=active)
    p.add_argument("--repeat", type=int, default=repeat)


def mlp(fragments: int, widths: tuple[int, ...] = WIDTHS, uneven: bool = False) -> tuple[Any, list[Any]]:
    """A model of ``fragments`` Linear layers of ``widths`` and its fragments. ``uneven``: fragment i
    holds i + 1 Linear layers (fragments differ in their number of allreduces)."""
    import torch.nn as nn

    frags: list[Any] = [
        nn.Sequential(nn.Linear(widths[i], widths[i + 1]), *(nn.Linear(widths[i + 1], widths[i + 1]) for _ in range(i)))
        if uneven
        else nn.Linear(widths[i], widths[i + 1])
        for i in range(fragments)
    ]
    return nn.Sequential(*frags), frags


def optimizers(model: Any, frags: list[Any], inner_lr: float = 1e-3, outer_lr: float = 0.7, momentum: float = 0.9):
    """AdamW over the model (inner) and one Nesterov SGD per fragment (outer), as torchft's example."""
    import torch

    # fused, as ftrun's worker builds it (``ftrun.worker.setup.make_inner``): both sides of
    # ``scripts/bench_overhead.py`` take the same inner step
    inner = torch.optim.AdamW(model.parameters(), lr=inner_lr, fused=True)
    outer = [torch.optim.SGD(f.parameters(), lr=outer_lr, momentum=momentum, nesterov=True) for f in frags]
    return inner, outer


def manager(model: Any, replica_id: str, lighthouse: str | None = None, pg: Any = None, init_sync: bool = True):
    """A torchft Manager over ``model``, synchronous quorum (DiLoCo needs it), 30 s timeouts, on
    ``pg`` (None: ``ProcessGroupGloo``). ``lighthouse`` None: the store and lighthouse from the
    environment (torchrun's ``MASTER_ADDR``/``MASTER_PORT``, ``TORCHFT_LIGHTHOUSE``), as a script
    under ``ftrun launch``; else rank 0 of a group of 1 with its own store, all on loopback."""
    import torch
    from torchft import Manager, ProcessGroupGloo

    timeout = timedelta(seconds=30)
    common = {
        "pg": ProcessGroupGloo(timeout=timeout) if pg is None else pg,
        "min_replica_size": 1,
        "load_state_dict": lambda sd: model.load_state_dict(sd),
        "state_dict": lambda: model.state_dict(),
        "use_async_quorum": False,
        "init_sync": init_sync,
        "replica_id": replica_id,
        "timeout": timeout,
        "quorum_timeout": timeout,
        "connect_timeout": timeout,
    }
    if lighthouse is None:
        return Manager(hostname="localhost", **common)
    store = torch.distributed.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    mgr = Manager(
        rank=0,
        world_size=1,
        store_addr="127.0.0.1",
        store_port=store.port,
        lighthouse_addr=lighthouse,
        hostname="127.0.0.1",
        **common,
    )
    mgr.bare_store = store  # the store serves every configure of the process group: it lives as the Manager does
    return mgr


def profiler(out: str, args: argparse.Namespace, record_shapes: bool = True) -> Any:
    """A torch profiler on ``add_profiler_flags``' schedule, one chrome trace per window:
    ``out/step-{N}.json``."""
    import torch

    os.makedirs(out, exist_ok=True)
    return torch.profiler.profile(
        schedule=torch.profiler.schedule(wait=args.wait, warmup=args.warmup, active=args.active, repeat=args.repeat),
        on_trace_ready=lambda pr: pr.export_chrome_trace(f"{out}/step-{pr.step_num}.json"),
        record_shapes=record_shapes,
    )


@dataclass
class Hooks:
    """What a script adds to the loop: ``before(k)`` at the top of step k (a profiler's step, a
    crash), ``after(k, loss)`` at its end (a print, a time stamp), ``around`` entered inside the
    averaging's context (a profiler); ``local_sgd``: a model averaged with torchft's LocalSGD
    instead of DiLoCo over the fragments."""

    before: Callable[[int], None] = lambda k: None
    after: Callable[[int, Any], None] = lambda k, loss: None
    around: AbstractContextManager[Any] | None = None
    local_sgd: Any = None


def train(
    mgr: Any,
    frags: list[Any],
    optims: tuple[Any, list[Any]],
    schedule: tuple[int, int],
    loss: Callable[[int], Any],
    more: Callable[[int], bool],
    hooks: Hooks | None = None,
) -> int:
    """The loop under DiLoCo (``schedule``: sync_every H, fragment_sync_delay tau; ``optims``: inner,
    outer): while ``more(steps so far)``: step k (1-based): ``hooks.before(k)``, ``loss(k)``
    backward, the inner optimizer's step (DiLoCo's hook sends and syncs the fragments on their
    steps), ``hooks.after(k, loss)``. Returns the steps taken."""
    from torchft.local_sgd import DiLoCo, LocalSGD

    hooks = hooks or Hooks()
    inner, outer = optims
    if hooks.local_sgd is not None:
        averaging: Any = LocalSGD(mgr, hooks.local_sgd, inner, sync_every=schedule[0])
    else:
        averaging = DiLoCo(mgr, frags, inner, outer, sync_every=schedule[0], fragment_sync_delay=schedule[1])
    step = 0
    with averaging, hooks.around or nullcontext():
        while more(step):
            step += 1
            hooks.before(step)
            inner.zero_grad()
            value = loss(step)
            value.backward()
            inner.step()
            hooks.after(step, value)
    return step


def exit_now(mgr: Any) -> None:
    """Shut the Manager down and end the process without the interpreter's teardown: torchft's
    background threads can abort it ("terminate called without an active exception", exit -6)
    after all the work is done."""
    mgr.shutdown(wait=False)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
