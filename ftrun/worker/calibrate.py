"""Measure one inner step of the configured model with the run's own layout (for compare's default link).

``python -m ftrun.worker.calibrate CONFIG_JSON THREADS [RANKS]`` starts RANKS measuring
processes at once (the run's replica groups x ranks, each with the run's THREADS), so the step
is measured with the cores shared as the training will share them; each one times a
forward+backward+AdamW step with the run's batch (median after warm-up). It prints
``{"step_s", "per_rank_s", "ranks", "threads", "model_bytes"}``: ``step_s`` is the median over
the ranks, ``model_bytes`` the bytes of one full-model pseudo-gradient (float32), i.e. what
plain DiLoCo sends per sync. What it does not include: Gloo's threads, the profiler, DiLoCo's
own work — compare reports the baseline run's measured median step next to it.
When the run would use NCCL (CUDA available, backend auto/nccl/baby-nccl) the step runs on the GPU,
timed between two ``torch.cuda.synchronize()`` calls, so the figure is the GPU step.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import msgspec

from ftrun.config import RunConfig


def measure(cfg: RunConfig, threads: int, steps: int = 8) -> dict:
    """The median time of one inner step (``ftrun.worker.setup.train_step``) of ``cfg``'s model."""
    import torch

    from ftrun.worker.setup import make_data, make_inner, make_model, train_step

    torch.set_num_threads(threads)
    cuda = torch.cuda.is_available() and cfg.hosts.backend in ("auto", "nccl", "baby-nccl")
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    model = make_model(cfg, device)
    opt = make_inner(model, cfg)
    data = make_data(cfg, 0)
    times = []
    for i in range(steps + 2):
        sync()
        t0 = time.perf_counter()
        train_step(model, opt, data, device)
        sync()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"step_s": statistics.median(times), "model_bytes": model_bytes, "device": str(device)}


def measure_layout(cfg_json: str, threads: int, ranks: int, timeout_s: float = 300) -> dict:
    """RANKS concurrent ``measure`` processes; their median step."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    cmd = [sys.executable, "-m", "ftrun.worker.calibrate", cfg_json, str(threads)]
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(ranks)
    ]
    got = []
    for p in procs:
        out, err = p.communicate(timeout=timeout_s)
        if p.returncode != 0:
            raise RuntimeError(err.strip().splitlines()[-1] if err.strip() else f"exit {p.returncode}")
        got.append(json.loads(out.strip().splitlines()[-1]))
    per_rank = [g["step_s"] for g in got]
    return {
        "step_s": statistics.median(per_rank),
        "per_rank_s": per_rank,
        "ranks": ranks,
        "threads": threads,
        "model_bytes": got[0]["model_bytes"],
        "device": got[0].get("device", "cpu"),
    }


if __name__ == "__main__":
    cfg_arg, threads_arg = sys.argv[1], int(sys.argv[2])
    if len(sys.argv) > 3:
        print(json.dumps(measure_layout(cfg_arg, threads_arg, int(sys.argv[3]))))
    else:
        print(json.dumps(measure(msgspec.json.decode(cfg_arg, type=RunConfig), threads_arg)))
