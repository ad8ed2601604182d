"""Measure one inner step of the configured model with the run's own layout (for compare's default link).

``python -m ftrun.worker.calibrate CONFIG_JSON THREADS [RANKS]`` starts RANKS measuring
processes at once (the run's replica groups x ranks, each with the run's THREADS), so the step
is measured with the cores shared as the training will share them; each one times a
forward+backward+AdamW step with the run's batch (median after warm-up). It prints one
``Calibrated`` record as JSON: ``step_s`` is the median over the ranks, ``model_bytes`` the bytes
of one full-model pseudo-gradient (float32), i.e. what plain DiLoCo sends per sync. What it does
not include: Gloo's threads, the profiler, DiLoCo's own work — compare reports the baseline
run's measured median step next to it.
When the run would use NCCL (CUDA available, backend auto/nccl/baby-nccl) the step runs on the GPU,
timed between two ``torch.cuda.synchronize()`` calls, so the figure is the GPU step.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

import msgspec

from ftrun.config import RunConfig


class StepTime(msgspec.Struct):
    """One measuring process's figures (``measure``): its median step, the model's bytes, its device."""

    step_s: float
    model_bytes: int
    device: str = "cpu"


class Calibrated(msgspec.Struct):
    """What the calibration found (``measure_layout``, read by ``ftrun.launch.calibrate``): the
    median step over the ``ranks`` concurrent processes (``per_rank_s``: each one's), each with
    ``threads`` threads, and the model's bytes and device as the first one measured them."""

    step_s: float
    per_rank_s: list[float]
    ranks: int
    threads: int
    model_bytes: int
    device: str = "cpu"


def measure(cfg: RunConfig, threads: int, steps: int = 8) -> StepTime:
    """The median time of one inner step (``ftrun.worker.setup.train_step``) of ``cfg``'s model."""
    import torch

    from ftrun.worker.setup import make_data, make_inner, make_model, train_step

    torch.set_num_threads(threads)
    cuda = torch.cuda.is_available() and cfg.hosts.backend in ("auto", "nccl", "baby-nccl")
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    model = make_model(cfg.model_spec(), device)
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
    return StepTime(statistics.median(times), model_bytes, str(device))


def measure_layout(cfg_json: str, threads: int, ranks: int, timeout_s: float = 300) -> Calibrated:
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
        got.append(msgspec.json.decode(out.strip().splitlines()[-1], type=StepTime))
    per_rank = [g.step_s for g in got]
    return Calibrated(statistics.median(per_rank), per_rank, ranks, threads, got[0].model_bytes, got[0].device)


if __name__ == "__main__":
    cfg_arg, threads_arg = sys.argv[1], int(sys.argv[2])
    if len(sys.argv) > 3:
        print(msgspec.json.encode(measure_layout(cfg_arg, threads_arg, int(sys.argv[3]))).decode())
    else:
        print(msgspec.json.encode(measure(msgspec.json.decode(cfg_arg, type=RunConfig), threads_arg)).decode())
