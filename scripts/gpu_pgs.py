"""The GPU check's process-group matrix: NCCL, Baby-NCCL, nccl2 and torchcomms, where this host runs them.

``bash scripts/gpu_check.sh pgs`` (or ``python scripts/gpu_pgs.py``) — on a host without CUDA it
prints ``{"cuda": false, ...}`` and exits 0 (nothing to check). With CUDA, each of the four process
groups the installed torchft, torch and torchcomms offer on this host (``ftrun.torchft_compat``'s
table, with CUDA) gets, in this order across the groups (so every group gets its first cell before
any group gets its second): a streaming run, a kill of group 1 at step 15 with one relaunch (three
groups: heal over the group), a plain DiLoCo run and a bucketized streaming run. Each cell is an
``ftrun train`` with its verdict as a sweep cell's (``gpu_check.cell_verdict``: ``pass``, ``fail``,
``failed-commits``, ...), numeric check, agreement and, for the kill, the recovery time. A group
the host cannot run is listed with the table's one-line reason (``unavailable``); a cell the time
budget cannot hold is listed as not run, and the summary is then not ``ok``.

The plan (``plan_cells``) is pure: cells are admitted in order while the sum of their estimated
seconds (``ESTIMATE_S``: estimates for one H200, not measurements) stays within the budget
(``GPU_CHECK_BUDGET_S``, 350 s: 6 minutes with the margin ``gpu_check.sh``'s timeout keeps); at run
time a cell is still skipped when less than its estimate is left, and each gets at most twice its
estimate. Timings are one run's, not a benchmark.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from gpu_check import (  # noqa: E402
    cell_verdict,
    cuda_available,
    expected_verdict,
    numerics_requirement,
    train,
    verdict_problem,
)

from ftrun.grid import KILL  # noqa: E402  (the pgs preset's recovery cell: group 1 killed at step 15)

GPU_BACKENDS = ("nccl", "baby-nccl", "nccl2", "torchcomms")
BASE = ["--replicas", "2", "--width", "256", "--steps", "20"]
RECOVERY = [
    *("--replicas", "3", "--fragments", "2", "--sync-every", "10", "--fragment-sync-delay", "3"),
    *("--step-sleep-ms", "100", "--steps", "40", "--kill", KILL, "--restarts", "1"),
    *("--profile", "4:13", "--profile-recovery", "off"),
]
# (cell kind, its ``ftrun train`` arguments besides the backend), in the order a group gets them
KINDS: tuple[tuple[str, list[str]], ...] = (
    ("streaming", [*BASE, "--mode", "streaming"]),
    ("kill", ["--width", "256", *RECOVERY]),
    ("baseline", [*BASE, "--mode", "baseline"]),
    ("bucketized", [*BASE, "--mode", "streaming", "--bucketize"]),
)
# seconds one cell is expected to take on one H200 (start-up, CUDA and NCCL init, the steps,
# the inspection): estimates to plan by, not measured
ESTIMATE_S = {"streaming": 25.0, "kill": 75.0, "baseline": 20.0, "bucketized": 25.0}
MARGIN_S = 10.0  # the summary and the stop
NOT_RUN = "not run: the matrix's time budget is spent"


@dataclass(frozen=True)
class Cell:
    backend: str
    kind: str
    args: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.backend}-{self.kind}"


@dataclass
class Plan:
    cells: list[Cell]  # to run, in order
    not_run: list[Cell]  # planned but over the budget
    unavailable: dict[str, str]  # backend -> why this host cannot run it (one line)
    estimate_s: float  # of ``cells``


def plan_cells(why_not: dict[str, str | None], budget_s: float) -> Plan:
    """The matrix for the groups of ``GPU_BACKENDS`` (``why_not``: each one's refusal, None
    when it runs here), within ``budget_s`` (module rules)."""
    unavailable = {b: why for b in GPU_BACKENDS if (why := why_not.get(b)) is not None}
    runnable = [b for b in GPU_BACKENDS if b not in unavailable]
    cells, not_run, total = [], [], 0.0
    for kind, args in KINDS:
        for b in runnable:
            cell = Cell(b, kind, ["--backend", b, *args])
            if total + ESTIMATE_S[kind] <= budget_s - MARGIN_S:
                cells.append(cell)
                total += ESTIMATE_S[kind]
            else:
                not_run.append(cell)
    return Plan(cells, not_run, unavailable, total)


def availability() -> dict[str, str | None]:
    """Each GPU process group's refusal on this host with CUDA (``ftrun.torchft_compat``), None: runs."""
    from ftrun.torchft_compat import backend_unavailable, installed

    rel = installed()
    return {b: backend_unavailable(b, rel, cuda=True) for b in GPU_BACKENDS}


def cell_result(cell: Cell, r: dict, baby_fails: bool) -> dict:
    """What the summary keeps of one cell's ``train`` result (its ``cell_verdict`` set), and
    ``problem``: why it does not pass (None: it passes). ``baby_fails``: the release's Baby groups
    fail every commit (torchft 0.2's known defect, ``baby_pg_fails_commits``), so a Baby-NCCL
    cell must show exactly that: ``failed-commits`` (``gpu_check.expected_verdict``)."""
    raw = r.pop("_numerics", None)
    expected = expected_verdict(cell.backend, baby_fails)
    problem = verdict_problem(r, expected)
    if problem is None and expected == "pass":
        problem = numerics_requirement(raw, quantized=False)
    if problem is None and cell.kind == "kill" and (not r.get("recovered_s") or None in r["recovered_s"]):
        problem = "the killed group did not commit again"
    return {**r, "problem": problem}


def main(argv: list[str]) -> int:
    out = Path(os.environ.get("OUT", "/tmp/ftrun-gpu")) / "pgs"
    budget = float(os.environ.get("GPU_CHECK_BUDGET_S", "350"))
    ok, what = cuda_available()
    summary: dict = {"cuda": ok, "device": what}
    if not ok:
        summary["note"] = "no CUDA: the GPU process groups are not checked on this host"
        print(json.dumps(summary, indent=1))
        return 0
    from ftrun.torchft_compat import baby_pg_fails_commits, installed

    baby_fails = baby_pg_fails_commits(installed())
    plan = plan_cells(availability(), budget)
    t_end = time.monotonic() + budget - MARGIN_S
    cells: dict = {}
    skipped = [c.name for c in plan.not_run]
    for cell in plan.cells:
        est = ESTIMATE_S[cell.kind]
        left = t_end - time.monotonic()
        if left < est:
            skipped.append(cell.name)
            continue
        got = cell_verdict(cell.name, train(out, cell.name, cell.args, min(left, 2 * est)))
        cells[cell.name] = cell_result(cell, got, baby_fails)
    summary.update(
        cells=cells,
        unavailable=plan.unavailable,
        not_run={name: NOT_RUN for name in skipped},
        ok=bool(cells) and not skipped and all(c["problem"] is None for c in cells.values()),
    )
    print(json.dumps(summary, indent=1))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
