"""Measure one inner step of the configured model on this machine (for compare's default link).

``python -m ftrun.worker.calibrate CONFIG_JSON THREADS`` prints ``{"step_s", "model_bytes"}``:
the median time of a forward+backward+AdamW step (after warm-up) with the run's batch, and the
bytes of one full-model pseudo-gradient (float32), i.e. what plain DiLoCo sends per sync.
When the run would use NCCL (CUDA available, backend auto/nccl/baby-nccl) the step runs on the GPU,
timed between two ``torch.cuda.synchronize()`` calls, so the figure is the GPU step.
"""

from __future__ import annotations

import json
import statistics
import sys
import time


def measure(cfg: dict, threads: int, steps: int = 6) -> dict:
    import torch
    import torch.nn.functional as F

    from ftrun.worker.data import Batches
    from ftrun.worker.models import TokenModel

    torch.set_num_threads(threads)
    torch.manual_seed(cfg["seed"])
    cuda = torch.cuda.is_available() and cfg.get("backend", "auto") in ("auto", "nccl", "baby-nccl")
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    model = TokenModel(cfg["model"], cfg["vocab"], cfg["width"], cfg["blocks"], cfg["seq_len"]).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["inner_lr"])
    data = Batches(cfg["data"], cfg["vocab"], cfg["seq_len"], cfg["batch_size"], cfg["seed"], 0)
    times = []
    for i in range(steps + 2):
        x, y = data.next()
        x, y = x.to(device), y.to(device)
        sync()
        t0 = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
        opt.step()
        sync()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"step_s": statistics.median(times), "model_bytes": model_bytes, "device": str(device)}


if __name__ == "__main__":
    print(json.dumps(measure(json.loads(sys.argv[1]), int(sys.argv[2]))))
