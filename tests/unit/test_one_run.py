"""One run's traces only (issue 40 item 4): run identity judged on evidence, at the run's own pace.

Two runs trained one after the other (each 10 s long, the second's window 23 s after the
first's) are refused, one replica's trace from each in a folder or swapped into a run dir; one
run's traces with normal jitter, and a run on a slow machine (2 s steps), are accepted. The
tolerance is a few step times (``provenance.tolerance_us``), never a fixed slack wider than a
short run. Hand-made traces and event records; ``check_one_run`` is called directly.
"""

from __future__ import annotations

import gzip
import json
import random
import shutil
from pathlib import Path

import pytest

from ftrun.check import provenance
from ftrun.check.provenance import Header, check_one_run
from ftrun.check.workers import Worker
from ftrun.errors import NotChecked
from ftrun.layout import EventRecord
from ftrun.trace.spans import Span, StepSpan, TraceSpans
from train_fixtures import inspect as cli, one_line

T0 = 1_790_857_026.0  # unix seconds: run A's first step starts here
STEPS = range(1, 41)  # 40 steps of 0.25 s: a 10 s run, profiled whole
GAP = 23.0  # run B's first step starts 23 s after run A's last ended


def _run(start: float, step_s: float = 0.25, jitter_s: float = 0.0, seed: int = 0) -> list[tuple[int, float, float]]:
    """(step, start, end) in unix seconds: one replica's steps, each ``step_s`` +- ``jitter_s``."""
    rng, t, out = random.Random(seed), start, []
    for k in STEPS:
        dur = step_s + rng.uniform(-jitter_s, jitter_s)
        out.append((k, t, t + dur))
        t += dur
    return out


def _trace(path: str, steps: list[tuple[int, float, float]], base_s: float) -> tuple[TraceSpans, Header]:
    """An ftrun trace of ``steps``, its ts relative to ``base_s`` (its baseTimeNanoseconds)."""
    spans = [StepSpan(k, k, Span((a - base_s) * 1e6, (b - base_s) * 1e6, 1)) for k, a, b in steps]
    return TraceSpans(Path(path), "ftrun", spans, [], [], []), Header(base_s * 1e6, path, 1, ())


def _log(steps: list[tuple[int, float, float]], lag_s: float = 0.0005) -> list[EventRecord]:
    """The event log of ``steps``: one record each, written ``lag_s`` after the step's end."""
    return [EventRecord(k, k, k, 2, 0, 1.0, b - a, 0, None, None, None, None, b + lag_s) for k, a, b in steps]


def _check(traces: dict[int, tuple[TraceSpans, Header]], logs=None, merge_jobs: bool = False) -> None:
    workers = [Worker(r, 0, "file name", [t]) for r, (t, _) in sorted(traces.items())]
    check_one_run(workers, {t.path: h for t, h in traces.values()}, logs, merge_jobs)


# run A: replicas 0 and 1 from T0, 10 s; run B: the same, its first step 23 s after A's last
A0, A1 = _run(T0, seed=1), _run(T0 + 0.01, seed=2)
B_START = A0[-1][2] + GAP
B0, B1 = _run(B_START, seed=3), _run(B_START + 0.01, seed=4)


def test_back_to_back_runs_in_a_folder_are_refused_naming_files_steps_and_distance():
    traces = {0: _trace("a/replica0_rank0.json", A0, T0 - 1), 1: _trace("b/replica1_rank0.json", B1, B_START - 1)}
    with pytest.raises(NotChecked) as e:
        _check(traces)
    line = str(e.value)
    assert "\n" not in line and line.startswith("traces of different runs")
    assert "a/replica0_rank0.json" in line and "b/replica1_rank0.json" in line
    assert "steps 1-40 do not overlap in time: 23 s apart" in line, line
    assert "--merge-jobs" in line
    _check(traces, merge_jobs=True)  # the escape: checked together, as asked


def test_back_to_back_runs_swapped_into_a_run_dir_are_refused():
    """Run B's replica 1 trace in run A's run dir, A's event logs untouched: the pair of traces
    says so; alone (replica 0's trace not given), the event log does, naming the step."""
    logs = {(0, 0): _log(A0), (1, 0): _log(A1)}
    swapped = _trace("run/traces/replica1_rank0.json", B1, B_START - 1)
    with pytest.raises(NotChecked, match="steps 1-40 do not overlap in time: 23 s apart"):
        _check({0: _trace("run/traces/replica0_rank0.json", A0, T0 - 1), 1: swapped}, logs)
    with pytest.raises(NotChecked) as e:
        _check({1: swapped}, logs)
    line = str(e.value)
    assert line.startswith("run/traces/replica1_rank0.json: not this run's trace: its step ")
    assert "the event log of replica 1 rank 0 says" in line and "33 s apart" in line and "--merge-jobs" in line
    _check({1: swapped}, logs, merge_jobs=True)


def test_both_traces_of_the_next_run_under_this_run_dirs_logs_are_refused():
    logs = {(0, 0): _log(A0), (1, 0): _log(A1)}
    traces = {0: _trace("r0.json", B0, B_START), 1: _trace("r1.json", B1, B_START)}
    _check(traces)  # one consistent pair: one run by the traces alone
    with pytest.raises(NotChecked, match=r"r0.json: not this run's trace: .*\(33 s apart, more than 2.0 s\)"):
        _check(traces, logs)


def test_one_runs_traces_with_jitter_are_accepted():
    """Steps 0.25 s +- 0.1 s, the replicas' clocks 40 ms apart, one replica 0.5 s behind at its
    window's start; the event log written a few ms after each step."""
    r0, r1 = _run(T0, jitter_s=0.1, seed=5), _run(T0 + 0.5, jitter_s=0.1, seed=6)
    traces = {0: _trace("r0.json", r0, T0 - 3), 1: _trace("r1.json", r1, T0 - 3.04)}
    _check(traces, {(0, 0): _log(r0, 0.004), (1, 0): _log(r1, 0.007)})


def test_a_run_on_a_slow_machine_is_accepted():
    """Steps of 2 s: one replica 3 s behind the other on the same steps, the event logs written
    4 s after the steps' ends: within 3 step times (6 s), beyond the 2 s floor."""
    r0, r1 = _run(T0, step_s=2.0, jitter_s=0.3, seed=7), _run(T0 + 3.0, step_s=2.0, jitter_s=0.3, seed=8)
    fast = {0: _trace("r0.json", r0[:20], T0), 1: _trace("r1.json", r1[:20], T0)}
    _check(fast, {(0, 0): _log(r0, 4.0), (1, 0): _log(r1, 4.0)})
    assert provenance.tolerance_us(2e6) == 6e6


def test_windows_of_the_same_steps_must_overlap_within_a_few_step_times():
    """The boundary: the same steps 3 step times apart are one run, further apart are not."""
    r0 = _run(T0, step_s=2.0)
    r1 = [(k, a + 80.0 + 5.5, b + 80.0 + 5.5) for k, a, b in r0]  # window 80 s long: 5.5 s apart
    _check({0: _trace("r0.json", r0, T0), 1: _trace("r1.json", r1, T0)})
    r1 = [(k, a + 80.0 + 6.5, b + 80.0 + 6.5) for k, a, b in r0]
    with pytest.raises(NotChecked, match=r"6.5 s apart \(more than 6.0 s: 3 step times of ~2.00 s"):
        _check({0: _trace("r0.json", r0, T0), 1: _trace("r1.json", r1, T0)})


# --- the recorded CPU run (tests/data/cpu_run: profiled steps 21-40, ~2.8 s), through the CLI ------

DATA = Path(__file__).parent.parent / "data" / "cpu_run"


def _next_run(run: Path, replicas: tuple[int, ...]) -> None:
    """Replace these replicas' traces with the same run's trained again right after: its
    windows start 23 s after this run's ended."""
    for r in replicas:
        p = run / "traces" / f"replica{r}_rank0.21.pt.trace.json.gz"
        d = json.loads(gzip.decompress(p.read_bytes()))
        steps = [e for e in d["traceEvents"] if e.get("name", "").startswith("ftrun::step")]
        window_s = (max(e["ts"] + e["dur"] for e in steps) - min(e["ts"] for e in steps)) / 1e6
        d["baseTimeNanoseconds"] += int((window_s + GAP) * 1e9)
        d["trace_id"] = "F" * 32
        p.write_bytes(gzip.compress(json.dumps(d).encode()))


@pytest.mark.parametrize(
    ("replicas", "needle"),
    [((1,), "steps 21-40 do not overlap in time: 23 s apart"), ((0, 1), "not this run's trace: its step")],
)
def test_the_next_run_swapped_into_a_recorded_run_dir_is_refused(tmp_path, replicas, needle):
    run = tmp_path / "run"
    shutil.copytree(DATA, run)
    assert cli(str(run)).exit_code == 0
    _next_run(run, replicas)
    res = cli(str(run))
    line = one_line(res, needle)
    assert "fingerprints" not in res.output and "PASS" not in res.output, line
    assert cli(str(run), "--merge-jobs").exit_code == 0


def test_interleaved_step_ranges_without_a_common_step_are_not_compared():
    """Ranges that overlap with no step in common (1-5 and 30-40 vs 10-20): nothing says when."""
    r0 = [s for s in _run(T0) if s[0] <= 5 or s[0] >= 30]
    r1 = [(k, a + 500.0, b + 500.0) for k, a, b in _run(T0) if 10 <= k <= 20]
    _check({0: _trace("r0.json", r0, T0), 1: _trace("r1.json", r1, T0)})
