#!/usr/bin/env python3
"""Benchmark ``ftrun inspect-trace`` against stdlib ``json.load`` and HTA's ``TraceAnalysis`` load.

    python scripts/bench_inspect.py                       # synthesize ~20 MB from a fresh torchft trace
    python scripts/bench_inspect.py --source RUN_DIR       # replicate one trace of an ftrun run dir
    python scripts/bench_inspect.py --trace BIG.json --fragments 2 --sync-every 8 --fragment-sync-delay 2

Synthesis: the source trace's events are repeated, each copy shifted in time and in step
numbers by a multiple of H (so the copies follow the same schedule), until the file reaches
``--size-mb``. Each measurement runs in its own subprocess on the same file, in the same run:
``ftrun inspect-trace --json`` end to end (wall, incl. interpreter start), ``analyze()``
in-process (time, tracemalloc peak, RSS growth), ``json.load``, and HTA (optional: skipped
when ``hta`` is not importable). Prints the ratios and the peak memory vs the trace size.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEP_RE = re.compile(r"^(ProfilerStep#)(\d+)$")
FTRUN_RE = re.compile(r"^(ftrun::step#)(\d+)( manager_step=)(\d+)$")


def read_json(path: Path) -> dict:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def synthesize(src: Path, out: Path, size_mb: float, sync_every: int, fragments: int) -> Path:
    """Write ``out`` (plain JSON) by replicating ``src`` until it is about ``size_mb`` MB."""
    d = read_json(src)
    events = d["traceEvents"]
    xs = [e for e in events if e.get("ph") == "X"]
    steps = [int(m[2]) for e in xs if (m := STEP_RE.match(e.get("name", "")) or FTRUN_RE.match(e.get("name", "")))]
    n_steps = max(steps) - min(steps) + 1
    shift_steps = -(-n_steps // sync_every) * sync_every  # whole rounds: same fragments, same places
    t0 = min(e["ts"] for e in xs)
    t_span = max(e["ts"] + e.get("dur", 0) for e in xs) - t0 + 1000.0
    one = len(json.dumps(events))
    copies = max(1, round(size_mb * 1e6 / one))
    out_events = [e for e in events if e.get("ph") != "X"]
    for k in range(copies):
        for e in xs:
            c = dict(e)
            c["ts"] = e["ts"] + k * t_span
            name = c.get("name", "")
            if (m := STEP_RE.match(name)) is not None:
                c["name"] = f"{m[1]}{int(m[2]) + k * shift_steps}"
            elif (m := FTRUN_RE.match(name)) is not None:
                c["name"] = f"{m[1]}{int(m[2]) + k * shift_steps}{m[3]}{int(m[4]) + k * shift_steps // sync_every * fragments}"
            out_events.append(c)
    d["traceEvents"] = out_events
    d.pop("distributedInfo", None)
    out.write_text(json.dumps(d))
    return out


# Peak RSS: VmHWM of the child itself (ru_maxrss survives exec on Linux: it would show the parent's).
HWM = """
def hwm():
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
"""

CHILD_ANALYZE = HWM + """
import resource, sys, time, tracemalloc
from ftrun.check.analyze import analyze
kw = dict(fragments=int(sys.argv[2]), sync_every=int(sys.argv[3]), fragment_sync_delay=int(sys.argv[4]))
rss0 = hwm()
t = time.perf_counter()
r = analyze([sys.argv[1]], **kw)
dt = time.perf_counter() - t
rss1 = hwm()
t = time.perf_counter()
analyze([sys.argv[1]], **kw)
dt2 = time.perf_counter() - t
tracemalloc.start()
analyze([sys.argv[1]], **kw)
peak = tracemalloc.get_traced_memory()[1]
print(dt, min(dt, dt2), peak, (rss1 - rss0) * 1024, r.verdict, len(r.events))
"""

CHILD_JSON = HWM + """
import json, resource, sys, time
rss0 = hwm()
t = time.perf_counter()
with open(sys.argv[1]) as f:
    d = json.load(f)
dt = time.perf_counter() - t
print(dt, (hwm() - rss0) * 1024)
"""

CHILD_HTA = HWM + """
import resource, sys, time, logging
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
rss0 = hwm()
t = time.perf_counter()
TraceAnalysis(trace_dir=sys.argv[1])
dt = time.perf_counter() - t
print(dt, (hwm() - rss0) * 1024)
"""


def child(code: str, *args: str, timeout: int = 900) -> list[str]:
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        raise RuntimeError(res.stderr[-2000:])
    return res.stdout.split()


def have_hta() -> bool:
    return subprocess.run([sys.executable, "-c", "import hta.trace_analysis"], capture_output=True).returncode == 0


def source_trace(args, tmp: Path) -> tuple[Path, int, int, int]:
    if args.source is not None and (args.source / "manifest.json").is_file():
        m = json.loads((args.source / "manifest.json").read_text())
        s = m["schedule"]
        return args.source / m["traces"][0]["path"], s["fragments"], s["sync_every"], s["fragment_sync_delay"]
    if args.source is not None:
        return args.source, args.fragments, args.sync_every, args.fragment_sync_delay
    out = tmp / "foreign"
    subprocess.run(
        [sys.executable, str(ROOT / "tests" / "foreign_diloco.py"), "--out", str(out), "--steps", "12",
         "--fragments", "2", "--sync-every", "8", "--delay", "2", "--repeat", "1"],
        check=True, capture_output=True, timeout=300,
    )
    return next((out / "r0").glob("step-*.json")), 2, 8, 2


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", type=Path, help="benchmark this trace as is (needs the schedule flags)")
    p.add_argument("--source", type=Path, help="run dir or trace file to replicate (default: fresh torchft trace)")
    p.add_argument("--size-mb", type=float, default=20.0)
    p.add_argument("--fragments", type=int, default=2)
    p.add_argument("--sync-every", type=int, default=8)
    p.add_argument("--fragment-sync-delay", type=int, default=2)
    p.add_argument("--no-hta", action="store_true")
    args = p.parse_args()

    with tempfile.TemporaryDirectory() as tmpd:
        tmp = Path(tmpd)
        if args.trace is not None:
            trace, F, H, T = args.trace, args.fragments, args.sync_every, args.fragment_sync_delay
        else:
            src, F, H, T = source_trace(args, tmp)
            (tmp / "big").mkdir()
            trace = synthesize(src, tmp / "big" / "rank0.json", args.size_mb, H, F)
        size = trace.stat().st_size
        raw_size = len(gzip.decompress(trace.read_bytes())) if trace.name.endswith(".gz") else size
        print(f"trace {trace.name}: {size / 1e6:.1f} MB on disk, {raw_size / 1e6:.1f} MB JSON; F={F} H={H} tau={T}")

        flags = ["--fragments", str(F), "--sync-every", str(H), "--fragment-sync-delay", str(T)]
        exe = Path(sys.executable).parent / "ftrun"
        walls = []
        for _ in range(3):
            t = time.perf_counter()
            res = subprocess.run([str(exe), "inspect-trace", str(trace), *flags, "--json"], capture_output=True, timeout=900)
            walls.append(time.perf_counter() - t)
        verdict = json.loads(res.stdout)["verdict"] if res.stdout else f"exit {res.returncode}"
        cli_s = min(walls)
        a1, a2, peak, rss, v2, nev = child(CHILD_ANALYZE, str(trace), str(F), str(H), str(T))
        js, js_rss = child(CHILD_JSON, str(trace))
        rows = [
            ("ftrun inspect-trace (CLI, end to end)", cli_s, None),
            ("ftrun analyze() in-process", float(a2), float(rss)),
            ("stdlib json.load", float(js), float(js_rss)),
        ]
        hta_s = None
        if not args.no_hta and have_hta():
            if trace.parent.name != "big" or len(list(trace.parent.iterdir())) != 1:
                (tmp / "hta").mkdir(exist_ok=True)
                os.symlink(trace.resolve(), tmp / "hta" / trace.name)
                hta_dir = tmp / "hta"
            else:
                hta_dir = trace.parent
            try:
                hs, hrss = child(CHILD_HTA, str(hta_dir))
                hta_s = float(hs)
                rows.append(("HTA TraceAnalysis load", hta_s, float(hrss)))
            except RuntimeError as e:
                print(f"HTA failed: {str(e).strip().splitlines()[-1]}")
        else:
            print("HTA: not installed (pip install HolisticTraceAnalysis) or --no-hta; skipped")

        print(f"verdict {verdict} ({nev} events)")
        print(f"{'what':42s} {'seconds':>9s} {'peak RSS growth MB':>19s}")
        for name, s, mem in rows:
            print(f"{name:42s} {s:9.3f} {('' if mem is None else f'{mem / 1e6:.1f}'):>19s}")
        print(f"analyze tracemalloc peak: {int(peak) / 1e6:.1f} MB = {int(peak) / raw_size:.2f}x the JSON size")
        print(f"json.load / inspect (CLI) = {float(js) / cli_s:.2f}x")
        if hta_s is not None:
            print(f"HTA load / inspect (CLI) = {hta_s / cli_s:.1f}x  (goal >= 10x)")


if __name__ == "__main__":
    main()
