#!/usr/bin/env python3
"""The numeric check on a clean run: how close the largest error of every checked sync comes to its tolerance.

    python scripts/bench_numerics.py                 # ftrun train --steps 40 (default model, 2 groups)
    python scripts/bench_numerics.py --steps 60
    python scripts/bench_numerics.py --sketch-cost   # the outer step's sketches: CPU time per sync

Trains one clean run (``ftrun train --profile none --json`` into a temp dir, removed after; no
fault, no corruption) and reads its summary's numeric check (``numerics``: ``ftrun.check.numerics``):
how many syncs were checked, and its ``largest_error``, the check that came closest to its
tolerance, as error / tolerance. A clean run's errors are rounding: a ratio far below 1 is the
margin a real corruption has to exceed (docs/numerics.md, how corrupted rounds compare).

The last line is one JSON object: ``status``, ``checked`` (syncs), ``replica_syncs_checked``,
``largest_error`` (``check``, ``where``, ``error``, ``tolerance``, ``ratio``), ``z`` (the
tolerance's multiple of the rounding budget), ``problems`` (their count: 0 on a clean run),
``ok`` (the run's own verdict). Exit 1 when the run failed or its summary has no numerics.

``--sketch-cost``: instead, no training run: the CPU time (``time.process_time``, torch threads as
``ftrun train`` gives each of 2 ranks) that one sync's sketches take in the rank, on fragment 0's
tensors of the default model and of ``LARGE`` (~103 M parameters, ~51 M in fragment 0), measured in
this process with the worker's own code. Before: the three sketches of the average alone
(contribution, SUM, average: ``ftrun.worker.sketch``); after: the whole outer step, those three and
``ftrun.worker.sketch_outer.OuterSketcher``'s hooks in torchft's order (originals and local
parameters at the send; the outer optimizer's pre/post hooks; with alpha > 0 the local parameters
before the merge and the merged ones after it), on a stand-in for torchft's fragment holding the
same tensors, each alpha twice: a sync whose originals the check derives (no read of them) and one
that sketches them (a chain's start, and every ``ORIGINALS_EVERY + 1``-th sync); "after, alpha A" is
their mean per sync over that period. Both sides run in the same repeat, one after the other; each
figure is the least over ``--repeat`` repeats (other load only ever adds CPU time), and the ratio
after / before is of those. Beside it, one training step's CPU time (data, forward, backward, AdamW)
and the sketches' share of the H/F steps between two syncs of a fragment. ``LARGE``'s step is 1 x 16
tokens (a step of ~1 s on 2 cores), far shorter than a real batch's, so its share is high;
``--large-batch SIZE SEQ_LEN`` gives its step at that batch instead (the sketches do not
change). Last line: ``{"sketch_cost": [...]}``, one item per model.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent


# ~103 M parameters (TokenModel mlp, 6 blocks of width 2048), small batch: a CPU step of ~1 s
LARGE = {"width": 2048, "blocks": 6, "batch_size": 1, "seq_len": 16}


def _cpu_ms(fn: Callable[[], None], n: int) -> float:
    """CPU ms per call of ``fn`` over ``n`` calls (this process, all its threads)."""
    t0 = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - t0) / n * 1e3


def sketch_cost(label: str, over: dict, calls: int, repeat: int) -> dict:
    """One model's sketch CPU time per sync of fragment 0, before (the average's three sketches)
    and after (the whole outer step), with alpha 0 and alpha 0.5 (module docstring)."""
    import torch

    from ftrun.config import build
    from ftrun.launch.placement import threads_per_rank
    from ftrun.worker.data import Batches
    from ftrun.worker.fault_injection import Corruption
    from ftrun.worker.models import build_fragments, build_model
    from ftrun.worker.setup import train_step
    from ftrun.worker.sketch_outer import ORIGINALS_EVERY, OuterSketcher
    from ftrun.worker.sketch_projection import Builder, Projector

    torch.set_num_threads(threads_per_rank(2))
    run = build(steps=60, profile="none").replaced(**over)
    spec = run.model_spec()
    torch.manual_seed(spec.seed)
    model = build_model(spec)
    part = build_fragments(model, spec)[0]
    tensors = [p.detach() for p in part.parameters()]
    numel = sum(t.numel() for t in tensors)
    # torchft's fragment as the hooks read it (ftrun.torchft_compat): its originals, its module, alpha
    frag = SimpleNamespace(original_parameters={i: t.clone() for i, t in enumerate(tensors)}, _model_fragment=part)
    outer_opt = torch.optim.SGD(part.parameters(), lr=0.7, momentum=0.9, nesterov=True)
    proj = Projector()
    with tempfile.TemporaryDirectory() as tmp:
        sketcher = OuterSketcher(proj, Corruption([], 0, 0, Path(tmp)))

        def average() -> None:  # contribution (norm, copied at issue), the SUM held, the average
            for norm, copy in ((True, True), (False, False), (False, False)):
                b = Builder(proj, norm=norm, copy=copy)
                for t in tensors:
                    b.add(t)
                b.sketch()

        def whole(alpha: float, anchor: bool) -> None:
            """One round; ``anchor``: where the chain starts (the originals sketched), else a round
            whose originals the check derives (the worker's state after a derivable commit)."""
            frag._fragment_update_alpha = alpha
            sketcher.derivable = {} if anchor else {0: 0}
            average()
            parts = sketcher.parts(0)
            sketcher.at_send(frag, parts, True)
            sketcher.before_sync(frag, parts, 10)
            sketcher.before_step(outer_opt, parts, 10)
            sketcher.after_step(outer_opt, parts)
            step = sketcher.after_sync(frag, parts, True, True)
            # every sketch the rank takes was taken (a hook that failed would leave it None)
            taken = (parts.original or not anchor) and parts.local and step and (not alpha or step.merged)
            assert taken, "an outer-step hook took no sketch"

        sides = {
            "before": average,
            "after, alpha 0, originals derived": lambda: whole(0.0, False),
            "after, alpha 0, originals sketched": lambda: whole(0.0, True),
            "after, alpha 0.5, originals derived": lambda: whole(0.5, False),
            "after, alpha 0.5, originals sketched": lambda: whole(0.5, True),
        }
        per: dict[str, list[float]] = {k: [] for k in sides}
        for fn in sides.values():
            fn()  # warm
        for _ in range(repeat):
            for k, fn in sides.items():
                per[k].append(_cpu_ms(fn, calls))
    best = {k: min(v) for k, v in per.items()}
    # per sync over a chain: the originals sketched once, then derived for ORIGINALS_EVERY commits
    period = ORIGINALS_EVERY + 1
    for a in ("0", "0.5"):
        derived, sketched = best[f"after, alpha {a}, originals derived"], best[f"after, alpha {a}, originals sketched"]
        best[f"after, alpha {a}"] = (ORIGINALS_EVERY * derived + sketched) / period
    inner = torch.optim.AdamW(model.parameters(), lr=run.optimizer.inner_lr)
    data = Batches("synthetic", spec.vocab, spec.seq_len, run.data.batch_size, spec.seed, 0)
    cpu = torch.device("cpu")
    train_step(model, inner, data, cpu)
    step_ms = min(_cpu_ms(lambda: train_step(model, inner, data, cpu), 1) for _ in range(3))
    window = run.schedule.sync_every // run.schedule.fragments
    return {
        "model": label,
        "params_fragment0": numel,
        "threads": torch.get_num_threads(),
        "repeats": repeat,
        "syncs_per_repeat": calls,
        "cpu_ms_per_sync": {k: round(v, 3) for k, v in best.items()},
        "ratio_after_before": {k: round(v / best["before"], 3) for k, v in best.items() if k != "before"},
        "step_cpu_ms": round(step_ms, 2),
        "window_steps": window,
        "share_of_window": {k: round(v / (window * step_ms), 5) for k, v in best.items()},
    }


def sketch_cost_main(repeat: int, large: bool, batch: tuple[int, int] | None = None) -> int:
    """``batch``: (batch size, sequence length) of ``LARGE``'s step instead of its 1 x 16 (the share
    of a step of that size; the sketches do not depend on it)."""
    tokens = {"batch_size": batch[0], "seq_len": batch[1]} if batch else {}
    rows = [sketch_cost("default", {}, 50, repeat)]
    if large:
        rows.append(sketch_cost("large (~103 M)", {**LARGE, **tokens}, 2, min(repeat, 3)))
    print(
        "| model | fragment 0 | before ms | after a=0 ms (x) | after a=0.5 ms (x) | share before / a=0 / a=0.5 "
        "| a=0.5: originals derived / sketched ms |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        ms, x, sh = r["cpu_ms_per_sync"], r["ratio_after_before"], r["share_of_window"]
        print(
            f"| {r['model']} | {r['params_fragment0']:,} | {ms['before']:.2f} | {ms['after, alpha 0']:.2f} "
            f"({x['after, alpha 0']:.2f}x) | {ms['after, alpha 0.5']:.2f} ({x['after, alpha 0.5']:.2f}x) | "
            f"{sh['before'] * 100:.2f}% / {sh['after, alpha 0'] * 100:.2f}% / {sh['after, alpha 0.5'] * 100:.2f}% | "
            f"{ms['after, alpha 0.5, originals derived']:.2f} / {ms['after, alpha 0.5, originals sketched']:.2f} |"
        )
    print(json.dumps({"sketch_cost": rows}))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40, help="inner training steps (default 40)")
    ap.add_argument("--sketch-cost", action="store_true", help="the sketches' CPU time per sync instead (no run)")
    ap.add_argument("--repeat", type=int, default=5, help="--sketch-cost: repeats (least kept; default 5)")
    ap.add_argument("--no-large", action="store_true", help="--sketch-cost: the default model only")
    ap.add_argument(
        "--large-batch",
        type=int,
        nargs=2,
        metavar=("SIZE", "SEQ_LEN"),
        help="--sketch-cost: the large model's step at this batch instead of 1 x 16 (the share of a step of that size)",
    )
    args = ap.parse_args()
    if args.sketch_cost:
        return sketch_cost_main(args.repeat, not args.no_large, tuple(args.large_batch) if args.large_batch else None)
    with tempfile.TemporaryDirectory(prefix="bench-numerics-") as tmp:
        cmd = [sys.executable, "-m", "ftrun", "train", "--steps", str(args.steps), "--profile", "none"]
        cmd += ["--out", tmp, "--run-name", "clean", "--json"]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
        try:
            summary = json.loads(proc.stdout)
        except json.JSONDecodeError:
            print(f"ftrun train failed (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
            return 1
    n = summary.get("numerics") or {}
    tol = n.get("tolerance") or {}
    out = {
        "status": n.get("status"),
        "checked": n.get("checked"),
        "replica_syncs_checked": n.get("replica_syncs_checked"),
        "largest_error": tol.get("largest_error"),
        "z": tol.get("z"),
        "problems": len(n.get("problems") or []),
        "ok": summary.get("ok"),
        "steps": args.steps,
    }
    le = out["largest_error"] or {}
    print(
        f"{out['checked']} sync(s) checked; largest error {le.get('error')} against tolerance {le.get('tolerance')} "
        f"(ratio {le.get('ratio')}) in '{le.get('check')}' at {le.get('where')}; problems {out['problems']}"
    )
    print(json.dumps(out))
    return 0 if summary.get("ok") and n else 1


if __name__ == "__main__":
    sys.exit(main())
