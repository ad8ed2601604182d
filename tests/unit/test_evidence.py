"""A verdict needs evidence (issue 24 items 5, 6; issue 21 parts 1 and 5): a trace that is not
torchft's is "not a torchft (DiLoCo/LocalSGD) trace" (exit 2, with or without schedule flags,
saying what it holds), and traces of different runs are refused in one line naming both groups
of files, unless ``--merge-jobs``. Unit tests: the CLI runs in-process.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from train_fixtures import inspect as cli, one_line, torchft_events

FLAGS = ["--fragments", "2", "--sync-every", "8", "--fragment-sync-delay", "2"]
DATA = Path(__file__).parent.parent / "data" / "cpu_run"
BASE_NS = 1_790_857_026_000_000_000


def write(path: Path, events: list[dict], **top) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"traceEvents": events, **top}))
    return path


def matmul_trace(steps=range(1, 9)) -> list[dict]:
    """A plain torch.profiler trace: ProfilerStep#k with an aten::mm in each, nothing of torchft."""
    ev = []
    for k in steps:
        ev.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{k}",
                "ts": 10.0 * k,
                "dur": 8.0,
                "pid": 1,
                "tid": 1,
            }
        )
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10.0 * k + 1, "dur": 5.0, "pid": 1, "tid": 1})
    return ev


def ddp_gpu_trace(steps=range(1, 9), per_step: int = 4) -> list[dict]:
    """A DDP-like CUDA trace: ProfilerStep#k, NCCL allreduces (host nccl:all_reduce, launch and
    kernel linked by correlation), no torchft span."""
    ev, corr = [], 0
    for k in steps:
        t = 1000.0 * k
        ev.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{k}",
                "ts": t,
                "dur": 900.0,
                "pid": 1,
                "tid": 1,
            }
        )
        for j in range(per_step):
            corr += 1
            a = t + 10 + 100 * j
            ev.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": "nccl:all_reduce",
                    "ts": a,
                    "dur": 20.0,
                    "pid": 1,
                    "tid": 1,
                }
            )
            ev.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "ts": a + 1,
                    "dur": 5.0,
                    "pid": 1,
                    "tid": 1,
                    "args": {"correlation": corr},
                }
            )
            ev.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": "ncclDevKernel_Generic_1",
                    "ts": a + 10,
                    "dur": 50.0,
                    "pid": 0,
                    "tid": 7,
                    "args": {"correlation": corr, "device": 0, "stream": 7},
                }
            )
    return ev


# --- not a torchft trace (items 5; issue 21 part 1) -----------------------------------------


@pytest.mark.parametrize("flags", [FLAGS, []], ids=["with schedule flags", "without"])
def test_plain_profiler_trace_is_not_a_torchft_trace(tmp_path, flags):
    t = write(tmp_path / "matmul.json", matmul_trace())
    res = cli(str(t), *flags)
    line = one_line(res)
    assert res.exit_code == 2, res.output
    assert "not a torchft (DiLoCo/LocalSGD) trace" in line and str(t) in line
    assert "8 ProfilerStep# steps" in line and "0 torchft::local_sgd spans" in line
    assert "--fragments" not in line  # no schedule would make it checkable


@pytest.mark.parametrize("flags", [FLAGS, []], ids=["with schedule flags", "without"])
def test_ddp_gpu_trace_is_not_a_torchft_trace_and_says_what_it_holds(tmp_path, flags):
    t = write(tmp_path / "ddp.json", ddp_gpu_trace(range(1, 506)))  # 505 steps x 4 = 2,020 NCCL allreduces
    res = cli(str(t), *flags)
    line = one_line(res)
    assert res.exit_code == 2, res.output
    assert "not a torchft (DiLoCo/LocalSGD) trace" in line
    assert "2,020 NCCL collectives" in line and "0 torchft::local_sgd spans" in line
    assert "FAIL" not in line and "missing at step" not in line


def test_folder_where_only_some_files_are_torchft_says_which(tmp_path):
    write(tmp_path / "replica0_rank0.1.pt.trace.json", torchft_events(range(1, 9)))
    write(tmp_path / "replica1_rank0.1.pt.trace.json", torchft_events(range(1, 9)))
    plain = write(tmp_path / "matmul.json", matmul_trace())
    res = cli(str(tmp_path), *FLAGS)
    line = one_line(res)
    assert res.exit_code == 2, res.output
    assert line.count("not torchft") + line.count("not a torchft") >= 1 and str(plain) in line
    assert "1 of 3 trace files" in line and "replica0_rank0.1.pt.trace.json" in line


def test_an_ftrun_window_without_send_or_sync_is_nothing_checked(tmp_path):
    ev = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": f"ftrun::step#{k} manager_step=0",
            "ts": 10.0 * k,
            "dur": 5.0,
            "pid": 1,
            "tid": 1,
        }
        for k in (1, 2, 3)
    ]
    t = write(tmp_path / "replica0_rank0.1.pt.trace.json", ev)
    res = cli(str(t), *FLAGS)
    line = one_line(res)
    assert res.exit_code == 2 and "hold no torchft send or sync" in line and "nothing to check" in line


def test_a_torchft_trace_still_passes(tmp_path):
    t = write(tmp_path / "replica0_rank0.1.pt.trace.json", torchft_events(range(1, 9)))
    res = cli(str(t), *FLAGS)
    assert res.exit_code == 0, res.output


# --- one run's traces (item 6; issue 21 part 5) ---------------------------------------------


def test_folder_holding_traces_of_two_runs_is_refused(tmp_path):
    """Run A's two replicas and run B's two (642 s later), foreign names: not one run of 4 replicas."""
    for name, base, t0 in (("a0", 0, 0.0), ("a1", 0, 3.0), ("b0", 642, 1.0), ("b1", 642, 2.0)):
        write(
            tmp_path / f"{name}.json",
            torchft_events(range(1, 9), t0),
            baseTimeNanoseconds=BASE_NS + base * 10**9,
            trace_id=name.upper() * 8,
        )
    res = cli(str(tmp_path), *FLAGS)
    line = one_line(res)
    assert res.exit_code == 2, res.output
    assert line.startswith("error: traces of different runs")
    a, b = line.split(" and ", 1)[0], line.split(" and ", 1)[1]
    assert "a0.json" in a and "a1.json" in a and "b0.json" in b and "b1.json" in b
    assert "642 s apart" in line and "--merge-jobs" in line
    res = cli(str(tmp_path), *FLAGS, "--merge-jobs")
    assert res.exit_code == 0, res.output  # checked together, as asked


def _copy_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(DATA, run)
    return run


def _shift(path: Path, seconds: int) -> None:
    d = json.loads(gzip.decompress(path.read_bytes()))
    d["baseTimeNanoseconds"] += seconds * 10**9
    d["trace_id"] = "F" * 32
    path.write_bytes(gzip.compress(json.dumps(d).encode()))


def test_a_replica_trace_swapped_in_from_another_run_is_refused(tmp_path):
    run = _copy_run(tmp_path)
    assert cli(str(run)).exit_code == 0
    _shift(run / "traces" / "replica1_rank0.21.pt.trace.json.gz", 642)  # the same run's shape, 642 s later
    res = cli(str(run))
    line = one_line(res)
    assert res.exit_code == 2, res.output
    assert "traces of different runs" in line and "replica0_rank0.21" in line and "replica1_rank0.21" in line
    assert "fingerprints" not in res.output and "PASS" not in res.output


def test_traces_of_another_run_under_this_run_dirs_event_logs_are_refused(tmp_path):
    """Both traces from another run (one consistent pair): the event logs' step times say so."""
    run = _copy_run(tmp_path)
    for r in (0, 1):
        _shift(run / "traces" / f"replica{r}_rank0.21.pt.trace.json.gz", 642)
    res = cli(str(run))
    line = one_line(res)
    assert res.exit_code == 2 and "not this run's trace" in line and "event log" in line, res.output


def test_rank0_traces_of_two_jobs_are_not_merged_into_one_worker(tmp_path):
    """Issue 21: two unrelated jobs' rank-0 traces (other dates, world sizes) in one folder."""
    write(
        tmp_path / "jobA_rank0.json",
        torchft_events(range(1, 9)),
        baseTimeNanoseconds=BASE_NS,
        distributedInfo={"rank": 0, "world_size": 8},
    )
    write(
        tmp_path / "jobB_rank0.json",
        torchft_events(range(9, 17)),
        baseTimeNanoseconds=BASE_NS + 86400 * 10**9 * 30,
        distributedInfo={"rank": 0, "world_size": 2},
    )
    res = cli(str(tmp_path), *FLAGS)
    line = one_line(res)
    assert res.exit_code == 2 and "traces of different runs" in line and "world_size 2 vs 8" in line, res.output
    assert "jobA_rank0.json" in line and "jobB_rank0.json" in line
    # the same world size, a month apart: the wall clock says it
    write(
        tmp_path / "jobB_rank0.json",
        torchft_events(range(9, 17)),
        baseTimeNanoseconds=BASE_NS + 86400 * 10**9 * 30,
        distributedInfo={"rank": 0, "world_size": 8},
    )
    res = cli(str(tmp_path), *FLAGS)
    line = one_line(res)
    assert res.exit_code == 2 and "traces of different runs" in line and "s apart for 1 step(s)" in line, res.output


def test_two_windows_of_one_run_are_one_run(tmp_path):
    """torchft's step-60 / step-120 windows: one worker's windows one after the other."""
    write(tmp_path / "step-8.json", torchft_events(range(1, 9)), baseTimeNanoseconds=BASE_NS)
    write(tmp_path / "step-16.json", torchft_events(range(9, 17), t0=1e6), baseTimeNanoseconds=BASE_NS)
    res = cli(str(tmp_path), *FLAGS)
    assert res.exit_code == 0, res.output
