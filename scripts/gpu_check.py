"""The GPU check: train on NCCL, inspect, and print one JSON summary of what matters on a GPU.

``python scripts/gpu_check.py [--out DIR] [--budget-s 360]`` — on a host without CUDA it prints
``{"cuda": false, ...}`` and exits 0 (nothing to check). With CUDA it runs, each under a time
limit and with ``NCCL_DEBUG=INFO``, nothing fetched from the network:

1. ``streaming``: NCCL streaming DiLoCo, R=2, 60 steps, width 512 (one GPU per group when there
   are two, else shared with NCCL_HOSTID);
2. ``bucketized``: the same with ``--bucketize`` (kernel duration against bytes, per kernel);
3. ``link``: plain DiLoCo (tau=0) on ``--link 1gbit,20ms``: hold spans present and every sync's
   time on the training thread (issuing its send + exposed) >= bytes*8/bandwidth + latency;
4. ``quantize``: ``--quantize`` for 10 steps (commits, replicas agreeing on fingerprints, and the
   numeric check: every checked sync a quantized one, i.e. torchft's ``allreduce_quantized`` ran and
   ftrun's wrapper sketched it, SUM within the fp8 e4m3 budget, average = SUM / participants);
5. ``baby-nccl``: ``--backend baby-nccl`` for 10 steps, judged as a sweep cell (``cell_verdict``):
   ``failed-commits`` where the release's Baby groups fail every commit (torchft 0.2's known
   defect), else ``pass`` (``expected_verdict``);
6. ``quantize-corrupt``: the ``quantize`` run with ``--corrupt-allreduce 1@6:wrong-count``: must
   fail, its numeric problem naming the divide by participants + 1 (last: skipped when time is short).

Every run reports its numeric check (``numerics``: status, syncs checked, quantized ones, problems,
the report's line); ``streaming`` and ``bucketized`` (NCCL, not quantized) and ``quantize`` must pass
it (``numerics_requirement``), else the check fails. A run skipped for time is listed in
``not_checked`` and the summary is not ``ok`` (``overall``): a check that did not run passes nothing.

``python scripts/gpu_check.py analyze RUN_DIR`` prints the trace part of the summary for one run
dir (also what the unit test runs on a CUDA-shaped fixture). Timings are one run's, not a benchmark.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ftrun import grid  # noqa: E402
from ftrun.check import comm, gpu_comm  # noqa: E402
from ftrun.check.analyze import analyze  # noqa: E402
from ftrun.check.numerics import QUANTIZED_NOT_CHECKED_PREFIX  # noqa: E402
from ftrun.check.overlap import gpu_overlap  # noqa: E402
from ftrun.errors import BadInput  # noqa: E402
from ftrun.layout import NumericsCheck  # noqa: E402
from ftrun.report.numerics_view import numerics_line  # noqa: E402
from ftrun.sweep.evaluate import evaluate  # noqa: E402
from ftrun.trace.load import load_trace  # noqa: E402
from ftrun.trace.spans import compute_launches  # noqa: E402

STEP_RE = re.compile(r"^(ProfilerStep#|ftrun::step#)")
KERNEL_RE = re.compile(r"^(ncclDevKernel_|ncclKernel_)([A-Za-z]+)")
TRANSPORT_RE = re.compile(r"NCCL INFO .*(via |Using network|NET/|P2P|SHM|Channel \d+/\d+ :)")
LINK = ("1gbit,20ms", 1e9, 0.020)
CORRUPT = "1@6:wrong-count"  # a sync step of the quantize run (H/F = 2: syncs at 2, 4, ...)


def _stats(xs: list[float]) -> dict | None:
    if not xs:
        return None
    return {"n": len(xs), "median": round(statistics.median(xs), 3), "max": round(max(xs), 3), "min": round(min(xs), 3)}


def _group(cat: str, name: str) -> str | None:
    """The name a (cat, name) count goes under, or None when the check does not count it."""
    m = STEP_RE.match(name)
    if m:
        return m[1] + "*"
    if name in ("torchft::local_sgd::prepare_sync", "torchft::local_sgd::perform_sync", "ftrun::link::hold"):
        return name
    if name.startswith(("nccl:", "gloo:")):
        return name
    m = KERNEL_RE.match(name)
    if m and cat == "kernel":
        return m[1] + m[2] + "*"
    return None


def trace_counts(path: Path) -> dict[str, int]:
    """Counts by (cat, name) of steps, prepare/perform_sync, NCCL/Gloo CPU spans and NCCL kernels."""
    data = path.read_bytes()
    d = json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
    c: Counter = Counter()
    for e in d.get("traceEvents", []):
        if e.get("ph") != "X":
            continue
        g = _group(e.get("cat", ""), e.get("name", ""))
        if g is not None:
            c[(e.get("cat", ""), g)] += 1
    return {f"{cat} {name}": n for (cat, name), n in sorted(c.items())}


def analyze_run(run_dirs: list[Path]) -> dict:
    """The trace part of the summary for one run (one or more run dirs of one job)."""
    try:
        rep = analyze(run_dirs)
    except BadInput as e:
        return {"inspect": {"verdict": "bad input", "problems": [str(e)]}}
    problems = (
        [e.problem for e in rep.events if e.problem]
        + [c.problem for c in rep.cross_replica if c.problem]
        + rep.run_problems
    )
    out: dict = {
        "inspect": {
            "verdict": rep.verdict,
            "events": len(rep.events),
            "problems": problems[:5],
            "notes": rep.notes[:5],
        },
        "traces": {},
    }
    manifest = run_dirs[0] / "manifest.json"
    if manifest.exists():
        out["devices"] = json.loads(manifest.read_text()).get("devices")
    durs, per_byte, starts, per_send, queue, causes, kinds, gaps = [], [], [], [], [], Counter(), Counter(), []
    serialized = 0
    overlap: dict = {}  # per trace: ftrun.check.overlap.gpu_overlap
    later = [0, 0]  # kernels that started once the device ran work launched in a later step, kernels placed
    for path, sp in rep.spans.items():
        out["traces"][Path(path).name] = trace_counts(Path(path))
        # kinds and sizes from what the trace states (kernel args, record_param_comms, nccl:/c10d:: ops);
        # a kernel's step from its launch (kineto copies no step span to the GPU side)
        shapes = [a.shapes for s in sp.sends for a in s.allreduces]
        comms = comm.attribute(sp.sends, sp.collectives)
        by_stream: dict = {}
        for k in sp.kernels:
            kinds[f"{k.kind or '?'} from {k.comm.source}"] += 1
            if k.launch is not None:
                starts.append(k.span.ts - k.launch.ts)
                prev = by_stream.get(k.stream)
                if prev is not None and k.launch.ts < prev.span.end:  # queued behind the stream's previous kernel
                    gaps.append(k.span.ts - prev.span.end)
            by_stream[k.stream] = k
            if k.call is not None and k.kind == "allreduce":
                durs.append(k.span.dur)
                b = _bytes(shapes[k.call], k.comm.itemsize)
                if b:
                    per_byte.append(k.span.dur / (b / 1e6))
        first = 0
        for s in sp.sends:
            calls = set(range(first, first + len(s.allreduces)))
            first += len(s.allreduces)
            per_send.append({"allreduce_calls": len(s.allreduces), "kernels": sum(k.call in calls for k in sp.kernels)})
        compute = compute_launches(load_trace(Path(path)))
        # issue 25: do compute kernels run slower while NCCL kernels share the GPU?
        if (ov := gpu_overlap(sp, compute)) is not None:
            overlap[Path(path).name] = msgspec.to_builtins(ov)
        for launch_step, dev_step in gpu_comm.kernel_steps(sp, compute):
            if launch_step is not None and dev_step is not None:
                later[1] += 1
                later[0] += dev_step > launch_step
        for q in gpu_comm.queueing(sp, comms):
            queue.append(q.delay_us / 1000.0)
            causes[q.cause or "none"] += 1
            serialized += q.serialized
    syncs = [e.sync for e in rep.events if e.sync is not None and e.observed_step is not None]
    commit = sum(s.should_commit_ms or 0.0 for s in syncs)
    csync = sum(s.commit_sync_ms or 0.0 for s in syncs)
    out.update(
        nccl_allreduce_kernel_us=_stats(durs),
        nccl_allreduce_kernel_us_per_mb=_stats(per_byte),
        kernels_per_send=per_send,
        min_kernel_start_minus_launch_us=round(min(starts), 3) if starts else None,
        nccl_kernel_kinds=dict(kinds),
        queued_start_minus_previous_end_us=_stats(gaps),
        queue_delay_ms=_stats(queue),
        queue_causes=dict(causes),
        serialized_collectives=serialized,
        kernels_in_a_later_step={"later": later[0], "placed": later[1]},
        compute_kernel_overlap_slowdown=_stats([v["slowdown"] for v in overlap.values() if v["slowdown"] is not None]),
        compute_kernel_overlap=overlap,
        should_commit_sync_share=round(csync / commit, 3) if commit else None,
        exposed_ms=_stats([s.exposed_comm_ms for s in syncs if s.exposed_comm_ms is not None]),
    )
    return out


def _bytes(shapes, itemsize: int | None) -> int | None:
    if not shapes:
        return None
    n = 0
    for s in shapes:
        k = 1
        for d in s:
            k *= d
        n += k
    return (itemsize or 4) * n  # the kernel's stated dtype, else float32 pseudo-gradients


def link_check(run_dir: Path, bandwidth_bps: float, latency_s: float) -> dict:
    """Hold spans present; every sync's time on the training thread (issuing its send + exposed: at
    tau = 0 nothing else overlaps it) >= its send's bytes*8/bandwidth + latency."""
    rep = analyze([run_dir])
    holds = sum(1 for sp in rep.spans.values() for c in sp.collectives if c.hold)
    rows, ok = [], bool(holds)
    last_send: dict = {}
    for e in sorted(rep.events, key=lambda e: (e.replica, e.rank, e.observed_step or 0, e.kind == "sync")):
        key = (e.replica, e.rank)
        if e.kind == "send":
            last_send[key] = e
        elif e.sync is not None and key in last_send and last_send[key].send is not None and last_send[key].send.bytes:
            need = (last_send[key].send.bytes * 8 / bandwidth_bps + latency_s) * 1000.0
            exposed = e.sync.exposed_comm_ms + (e.sync.issuing_comm_ms or 0.0)
            good = exposed >= need
            ok = ok and good
            rows.append(
                {
                    "replica": e.replica,
                    "step": e.observed_step,
                    "issuing_plus_exposed_ms": round(exposed, 3),
                    "wire_plus_latency_ms": round(need, 3),
                }
            )
    return {"hold_spans": holds, "syncs": rows, "ok": ok and bool(rows), "verdict": rep.verdict}


def nccl_transport(run_dir: Path, limit: int = 20) -> list[str]:
    lines: list[str] = []
    for log in sorted((run_dir / "logs").glob("*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if TRANSPORT_RE.search(line):
                short = re.sub(r"^.*NCCL INFO ", "", line).strip()
                if short not in lines:
                    lines.append(short)
            if len(lines) >= limit:
                return lines
    return lines


def _ftrun() -> list[str]:
    exe = Path(sys.executable).parent / "ftrun"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "ftrun"]


def train(out: Path, name: str, args: list[str], timeout_s: float) -> dict:
    # this checkout first on the path, the caller's own entries after it (e.g. another torchft)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET,GRAPH", "PYTHONPATH": path}
    cmd = [*_ftrun(), "train", *args, "--out", str(out), "--run-name", name, "--overwrite", "--json"]
    t0 = time.monotonic()
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout_s:.0f} s", "run_dir": str(out / name)}
    got: dict = {"exit": res.returncode, "wall_s": round(time.monotonic() - t0, 1), "run_dir": str(out / name)}
    got["_stderr"] = res.stderr[-4000:]  # for ``cell_verdict``'s error line (not printed)
    try:
        summ = json.loads(res.stdout)
        got.update(
            ok=summ.get("ok"),
            commits=[r.get("commits") for r in summ.get("replicas", [])],
            agreement=summ.get("agreement", {}).get("ok"),
            commits_checked=summ.get("agreement", {}).get("commits_checked"),
            devices=summ.get("devices"),
            numerics=numerics_brief(summ.get("numerics")),
            verdict=(summ.get("check") or {}).get("verdict"),
            check_line=(summ.get("check") or {}).get("line"),  # its first problem, e.g. torchft's error
            recovered_s=[f.get("recovered_s") for f in (summ.get("faults") or {}).get("faults", [])],
            _numerics=summ.get("numerics"),  # the whole check, for numerics_requirement (not printed)
        )
    except json.JSONDecodeError:
        got.update(ok=False, error=(res.stderr.strip().splitlines() or ["no output"])[-1][:300])
    return got


def cell_verdict(name: str, r: dict) -> dict:
    """``train``'s result ``r`` with the run judged as an ``ftrun sweep`` cell is (``ftrun.sweep.evaluate``,
    whose ``grid.verdict`` tells ``failed-commits``, the schedule held but commits failed, from
    ``fail``): ``cell_verdict`` and ``cell_problem``. The train check's own ``verdict`` is "fail"
    for both; a run that did not finish (``error``) is left as it is."""
    stderr = r.pop("_stderr", "")
    if r.get("error") is None:
        row = evaluate(grid.Cell(name, {}), Path(r["run_dir"]), r.get("exit", 1), stderr)
        r.update(cell_verdict=row.verdict, cell_problem=row.problem)
    return r


def expected_verdict(backend: str, baby_fails: bool) -> str:
    """The cell verdict (``cell_verdict``) a run on ``backend`` must show: ``failed-commits`` for
    Baby-NCCL where the release's Baby groups fail every commit (``baby_fails``: torchft 0.2's
    known defect, ``ftrun.torchft_compat.baby_pg_fails_commits``), else ``pass``."""
    return "failed-commits" if baby_fails and backend == "baby-nccl" else "pass"


def verdict_problem(r: dict, expected: str) -> str | None:
    """Why a run's cell verdict is not ``expected`` (None: it is); a run that did not finish: its error."""
    if r.get("error") is not None:
        return str(r["error"])
    if r.get("cell_verdict") != expected:
        why = f": {r['cell_problem']}" if r.get("cell_problem") else ""
        return f"verdict {r.get('cell_verdict')}, not {expected} (exit {r.get('exit')}){why}"
    return None


def numerics_brief(num: dict | None) -> dict | None:
    """The numeric check of a train summary (``Numerics.to_json``), short."""
    if not num:
        return None
    problems = num.get("problems") or []
    return {
        "status": num.get("status"),
        "why": num.get("why"),
        "checked": num.get("checked"),
        "quantized_checked": num.get("quantized_checked"),
        "not_checked": num.get("not_checked"),
        "paths": num.get("paths"),
        "problems": len(problems),
        "first_problem": problems[0]["text"] if problems else None,
        "first_cause": problems[0].get("cause") if problems else None,
        "largest_error": (num.get("tolerance") or {}).get("largest_error"),
        "line": numerics_line(msgspec.convert(num, NumericsCheck)),
    }


def numerics_requirement(num: dict | None, quantized: bool) -> str | None:
    """Why a clean NCCL run's numeric check does not pass the GPU check (None: it does). ``quantized``:
    a ``--quantize`` run, whose every checked sync must be a quantized one (torchft's quantized
    allreduce sketched at its boundary), none left "quantized rounds: not checked"."""
    if not num:
        return "no numeric check in the run's summary"
    if num.get("status") != "checked":
        return f"numerics not checked: {num.get('why')}"
    problems = num.get("problems") or []
    if problems:
        return f"{len(problems)} numeric problem(s); first: {problems[0]['text']}"
    checked, q = num.get("checked") or 0, num.get("quantized_checked") or 0
    if not checked:
        return "no sync checked"
    if quantized:
        skipped = {
            w: n for w, n in (num.get("not_checked") or {}).items() if w.startswith(QUANTIZED_NOT_CHECKED_PREFIX)
        }
        if skipped:
            return f"{sum(skipped.values())} quantized replica-sync(s) not checked: {next(iter(skipped))}"
        if q != checked:
            return f"{checked - q} of {checked} checked syncs were not quantized (torchft ran its plain allreduce)"
    elif q:
        return f"{q} sync(s) checked as quantized in a run without --quantize"
    return None


def corrupt_requirement(r: dict) -> str | None:
    """The quantize-corrupt run must fail (exit 1) on a numeric problem naming the wrong divide."""
    num = r.get("numerics") or {}
    if r.get("exit") != 1:
        return f"exit {r.get('exit')}, not 1"
    cause = num.get("first_cause") or ""
    if not cause.startswith("divided by participants + 1"):
        return f"the first numeric problem's cause is {cause or 'missing'!r}, not the divide by participants + 1"
    return None


def cuda_available() -> tuple[bool, str]:
    try:
        import torch
    except ImportError:
        return False, "torch not importable"
    if not torch.cuda.is_available():
        return False, f"torch {torch.__version__}: CUDA not available"
    return True, f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}, torch {torch.__version__}"


def plan_runs() -> list[tuple[str, list[str], float]]:
    """The trainings, in order: (name, ``ftrun train`` arguments, share of the time budget)."""
    base = ["--backend", "nccl", "--replicas", "2", "--width", "512"]
    plan = [
        ("streaming", [*base, "--mode", "streaming", "--steps", "60"], 0.25),
        ("bucketized", [*base, "--mode", "streaming", "--steps", "60", "--bucketize"], 0.2),
        ("link", [*base, "--mode", "baseline", "--steps", "40", "--link", LINK[0]], 0.2),
        (
            "quantize",
            [
                *base,
                "--quantize",
                "--steps",
                "10",
                "--sync-every",
                "4",
                "--fragment-sync-delay",
                "1",
                "--profile",
                "none",
            ],
            0.15,
        ),
        (
            "baby-nccl",
            [
                "--backend",
                "baby-nccl",
                "--replicas",
                "2",
                "--steps",
                "10",
                "--sync-every",
                "4",
                "--fragment-sync-delay",
                "1",
            ],
            0.15,
        ),
    ]
    quantize_args = next(args for name, args, _ in plan if name == "quantize")
    plan.append(("quantize-corrupt", [*quantize_args, "--corrupt-allreduce", CORRUPT], 0.1))
    return plan


SKIPPED = "skipped: the check's time budget is spent"


def overall(runs: dict) -> tuple[bool, list[str]]:
    """(every planned run ran and met its requirement, the runs that did not run). A run skipped
    for time is not a pass: the corrupted run's failing is evidence only once it has run. A run
    with an ``expected`` cell verdict other than ``pass`` (Baby-NCCL on torchft 0.2) must show
    that verdict (``verdict_problem``), not be ok."""
    not_checked = [n for n, r in runs.items() if r.get("error") == SKIPPED]
    must_pass = [r for n, r in runs.items() if n != "quantize-corrupt" and r.get("expected", "pass") == "pass"]
    ok = (
        not not_checked
        and all(r.get("ok") for r in must_pass)  # quantize-corrupt must fail
        and runs.get("streaming", {}).get("inspect", {}).get("verdict") == "pass"
        and all(
            r.get(k) is None for r in runs.values() for k in ("numerics_problem", "corrupt_problem", "verdict_problem")
        )
    )
    return ok, not_checked


def main(argv: list[str]) -> int:
    if argv[:1] == ["analyze"]:
        print(json.dumps(analyze_run([Path(p) for p in argv[1:]]), indent=1))
        return 0
    out = Path(os.environ.get("OUT", "/tmp/ftrun-gpu"))
    budget = float(os.environ.get("GPU_CHECK_BUDGET_S", "360"))
    ok, what = cuda_available()
    summary: dict = {"cuda": ok, "device": what}
    if not ok:
        summary["note"] = "no CUDA: the NCCL path is not checked on this host"
        print(json.dumps(summary, indent=1))
        return 0
    from ftrun.torchft_compat import baby_pg_fails_commits, installed

    baby_fails = baby_pg_fails_commits(installed())
    t_end = time.monotonic() + budget - 10
    plan = plan_runs()
    runs: dict = {}
    for name, args, share in plan:
        left = t_end - time.monotonic()
        if left < 20:
            runs[name] = {"ok": False, "error": SKIPPED}
            continue
        r = train(out, name, args, min(left, budget * share + 30))
        rd = Path(r["run_dir"])
        if name in ("streaming", "bucketized", "link") and (rd / "manifest.json").exists():
            r.update(analyze_run([rd]))
        if name == "link" and (rd / "manifest.json").exists():
            r["link_check"] = link_check(rd, LINK[1], LINK[2])
        if name == "streaming":
            r["nccl_transport"] = nccl_transport(rd)
        raw = r.pop("_numerics", None)
        if name == "baby-nccl":
            r["expected"] = expected_verdict("baby-nccl", baby_fails)
            r["verdict_problem"] = verdict_problem(cell_verdict(name, r), r["expected"])
        r.pop("_stderr", None)
        if name in ("streaming", "bucketized", "quantize"):
            r["numerics_problem"] = numerics_requirement(raw, name == "quantize")
        if name == "quantize-corrupt":
            r["corrupt_problem"] = corrupt_requirement(r)
        runs[name] = r
    summary["runs"] = runs
    summary["ok"], summary["not_checked"] = overall(runs)
    print(json.dumps(summary, indent=1))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
