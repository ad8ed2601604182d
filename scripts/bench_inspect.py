#!/usr/bin/env python3
"""Benchmark ``ftrun inspect-trace`` against stdlib ``json.load`` and HTA's ``TraceAnalysis`` load.

    python scripts/bench_inspect.py                       # synthesize ~20 MB from a fresh torchft trace
    python scripts/bench_inspect.py --source RUN_DIR       # replicate one trace of an ftrun run dir
    python scripts/bench_inspect.py --trace BIG.json --fragments 2 --sync-every 8 --fragment-sync-delay 2

    python scripts/bench_inspect.py --large               # ~300 MB: MB/s, peak RSS / file, gzip vs bare zlib
    python scripts/bench_inspect.py --parallelism --size-mb 10   # folder / gzip / large: ratios vs one process
    python scripts/bench_inspect.py --ftrun "python -m ftrun"   # time another ftrun (e.g. PYTHONPATH=OTHER_TREE)

ftrun's .pyc files are written first (``compileall``), as any install has them: under
PYTHONDONTWRITEBYTECODE every run would otherwise compile ftrun's sources again.

The last line is one JSON object: ``ratio`` (HTA load / inspect-trace, goal >= 20) and
``goal_met`` (null, with ``ratio``, when HTA is not installed: nothing was compared;
``trace_verdict`` is what inspect-trace said of the trace itself), or with
``--large`` ``mb_per_s`` (goal >= 500), ``rss_per_file`` (goal <= 1), ``gz_vs_zlib`` (the gz
trace's inspect-trace time over a bare streaming zlib decompress of it; ``inflate_s``: the same
stream through ftrun's own inflater, ``ftrun.gunzip``'s ISA-L, 3-4x zlib's pace) and ``gz_vs_plain`` (over
the plain file's: 1.0 = the inflating, done in a thread, entirely hidden behind the decoding);
``load_avg`` says how busy the machine was.

Synthesis: the source trace's events are repeated, each copy shifted in time and in step
numbers by a multiple of H (so the copies follow the same schedule), until the file reaches
``--size-mb``. Each measurement runs in its own subprocess on the same file, in the same run:
``ftrun inspect-trace --json`` end to end (wall, incl. interpreter start; best of ``--repeat``;
peak RSS of that process alone), ``analyze()``
in-process (time, tracemalloc peak, RSS growth), ``json.load``, and HTA (optional: skipped
when ``hta`` is not importable). Prints the ratios and the peak memory vs the trace size.

HTA is the ``traceinsight`` release (the ``HolisticTraceAnalysis`` name stops at 0.5.0). It
pulls in jupyterlab, plotly and ~60 other packages, so it is installed beside the venv, not in it:
``pip install --target DIR traceinsight==0.6.1``, then ``--hta-path DIR`` (or ``$FTRUN_HTA_PATH``):
only the HTA child gets DIR on its PYTHONPATH. ``hta`` in the JSON names the release measured.
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling module, however this runs
from bench_inspect_children import (  # noqa: E402
    CHILD_ANALYZE,
    CHILD_GZIP,
    CHILD_HTA,
    CHILD_JSON,
    CHILD_PARALLEL,
    CHILD_RUN,
    CHILD_ZLIB,
    HTA_VERSION,
)

ROOT = Path(__file__).resolve().parent.parent
STEP_RE = re.compile(r"^(ProfilerStep#)(\d+)$")
FTRUN_RE = re.compile(r"^(ftrun::step#)(\d+)( manager_step=)(\d+)$")


def read_json(path: Path) -> dict:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def synthesize(src: Path, out: Path, size_mb: float, sync_every: int, fragments: int, shift_us: float = 0.0) -> Path:
    """Write ``out`` (plain JSON) by replicating ``src`` until it is about ``size_mb`` MB, every
    timestamp moved by ``shift_us`` (distinct traces of the same size)."""
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
            c["ts"] = e["ts"] + k * t_span + shift_us
            name = c.get("name", "")
            if (m := STEP_RE.match(name)) is not None:
                c["name"] = f"{m[1]}{int(m[2]) + k * shift_steps}"
            elif (m := FTRUN_RE.match(name)) is not None:
                c["name"] = (
                    f"{m[1]}{int(m[2]) + k * shift_steps}{m[3]}{int(m[4]) + k * shift_steps // sync_every * fragments}"
                )
            out_events.append(c)
    d["traceEvents"] = out_events
    d.pop("distributedInfo", None)
    out.write_text(json.dumps(d))
    return out


def child(code: str, *args: str, timeout: int = 900, env: dict[str, str] | None = None) -> list[str]:
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout, env=env)
    if res.returncode != 0:
        raise RuntimeError(res.stderr[-2000:])
    return res.stdout.split()


def hta_env(path: str | None) -> dict[str, str] | None:
    """The HTA child's environment: ``path`` (a ``pip install --target`` folder) first on its
    PYTHONPATH, so HTA and its dependencies stay out of the venv ftrun is timed in."""
    if not path:
        return None
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (path, os.environ.get("PYTHONPATH")) if p)}


def have_hta(env: dict[str, str] | None = None) -> str | None:
    """HTA's distribution and release (``traceinsight 0.6.1``), None when ``hta`` does not import."""
    res = subprocess.run(
        [sys.executable, "-c", "import hta.trace_analysis\n" + HTA_VERSION], capture_output=True, text=True, env=env
    )
    return (res.stdout.strip() or "hta (release unknown)") if res.returncode == 0 else None


def source_trace(args, tmp: Path) -> tuple[Path, int, int, int]:
    if args.source is not None and (args.source / "manifest.json").is_file():
        m = json.loads((args.source / "manifest.json").read_text())
        s = m["schedule"]
        return args.source / m["traces"][0]["path"], s["fragments"], s["sync_every"], s["fragment_sync_delay"]
    if args.source is not None:
        return args.source, args.fragments, args.sync_every, args.fragment_sync_delay
    out = tmp / "foreign"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests" / "foreign_diloco.py"),
            "--out",
            str(out),
            "--steps",
            "12",
            "--fragments",
            "2",
            "--sync-every",
            "8",
            "--fragment-sync-delay",
            "2",
            "--repeat",
            "1",
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return next((out / "r0").glob("step-*.json")), 2, 8, 2


FTRUN: list[str] = [str(Path(sys.executable).parent / "ftrun")]  # --ftrun replaces it


def compile_ftrun() -> str:
    """Write the .pyc files of the ftrun being measured, as any install has them (pip compiles on
    install; an editable checkout on its first run). Without them, under PYTHONDONTWRITEBYTECODE
    every run compiles ftrun's sources again (~40 ms here), while HTA's site-packages are compiled:
    the ratio would time Python's compiler. Returns the package's folder."""
    code = (
        "import compileall, pathlib, sys, ftrun; d = pathlib.Path(ftrun.__file__).parent; "
        "ok = compileall.compile_dir(str(d), quiet=1); print(d); sys.exit(0 if ok else 1)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        raise RuntimeError(f"compileall failed: {res.stdout[-500:]} {res.stderr[-500:]}")
    return res.stdout.strip()


def run_cli(trace: Path, flags: list[str], repeat: int) -> tuple[float, int]:
    """(best wall seconds of ``ftrun inspect-trace --json``, end to end in a fresh process; its peak RSS in bytes).
    Run under a small wrapper process so the RSS is the CLI's own, not this script's: the larger of
    the largest process's peak and the sampled sum over the CLI and its children (a large trace's
    second half is decoded by a forked child; their shared pages are counted twice: an upper bound).
    The RSS is taken in one more run of its own: the sampler reads /proc every 2 ms, CPU taken
    from the two processes it watches, so the timed runs are not sampled."""
    best = float("inf")
    cmd = (*FTRUN, "inspect-trace", str(trace), *flags, "--json")
    for _ in range(repeat):
        dt, _r, _rc = child(CHILD_RUN, "time", *cmd)
        best = min(best, float(dt))
    _dt, rss, _rc = child(CHILD_RUN, "rss", *cmd)
    return best, int(rss)


def parallelism(args, tmp: Path) -> None:
    """``--parallelism``: how trace reading's parallelism pays, as ratios against the one-process
    read of the same files in the same run: a folder of ``--files`` plain traces of ``--size-mb``,
    the same gzip'd, and one plain file of each ``--large-mb`` size; for each, the tree's default
    choice (``default``: a folder's files at once, ``ftrun.trace.forked.map_forked``; a large plain
    file split) and the split of every file, the files in turn (``split``). Wall is best of
    ``--repeat``, CPU (this process and its forked children) that run's: on a shared machine the
    CPU time is the steadier of the two."""
    src, F, H, T = source_trace(args, tmp)
    folder, gz = tmp / "folder", tmp / "gz"
    for d in (folder, gz):
        d.mkdir()
    for k in range(args.files):  # one trace per replica group, each its own (the same one twice is refused)
        synthesize(src, folder / f"replica{k}_rank0.json", args.size_mb, H, F, shift_us=k * 10.0)
    for f in sorted(folder.iterdir()):
        child(CHILD_GZIP, str(f), str(gz / (f.name + ".gz")), timeout=1800)
    cases = [("folder", folder), ("gzip", gz)]
    for mb in (float(x) for x in args.large_mb.split(",")):
        (big := tmp / f"large{mb:g}").mkdir()
        synthesize(src, big / "rank0.json", mb, H, F)
        cases.append((f"large{mb:g}MB", big))
    sched = [str(F), str(H), str(T)]
    out: dict = {"bench": "inspect-parallelism", "files": args.files, "size_mb": args.size_mb}
    for case, path in cases:
        out[f"{case}_mb"] = round(sum(f.stat().st_size for f in path.iterdir()) / 1e6, 1)
        runs = {m: [child(CHILD_PARALLEL, m, str(path), *sched) for _ in range(args.repeat)] for m in MODES}
        best = {m: min(runs[m], key=lambda r: float(r[0])) for m in MODES}
        base_w, base_c = float(best["one"][0]), float(best["one"][1])
        for m in MODES[1:]:
            w, c = float(best[m][0]) / base_w, float(best[m][1]) / base_c
            out[f"{case}_{m}_wall"], out[f"{case}_{m}_cpu"] = round(w, 2), round(c, 2)
            print(
                f"{case:6s} {m:7s}: wall {w:.2f}x, CPU {c:.2f}x the one-process read "
                f"({base_w:.2f} s wall, {base_c:.2f} s CPU)"
            )
    out["load_avg"] = load_avg()
    print(json.dumps(out))


MODES = ("one", "default", "split")


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def large(args, tmp: Path) -> None:
    """``--large``: a ~300 MB trace (and its gzip) end to end: MB/s, peak RSS / file, gz vs bare zlib."""
    if args.trace is not None:
        trace, F, H, T = args.trace, args.fragments, args.sync_every, args.fragment_sync_delay
    else:
        src, F, H, T = source_trace(args, tmp)
        trace = tmp / "large.json"
        subprocess.run(
            [sys.executable, __file__, "--synth", str(src), str(trace), str(args.size_mb), str(H), str(F)],
            check=True,
            timeout=1800,
        )
    flags = ["--fragments", str(F), "--sync-every", str(H), "--fragment-sync-delay", str(T)]
    size = trace.stat().st_size
    print(f"trace {trace.name}: {size / 1e6:.1f} MB; F={F} H={H} tau={T}; load {load_avg()}")
    s, rss = run_cli(trace, flags, args.repeat)
    out = {
        "bench": "inspect-large",
        "trace_mb": round(size / 1e6, 1),
        "inspect_s": round(s, 3),
        "mb_per_s": round(size / 1e6 / s, 1),
        "rss_mb": round(rss / 1e6, 1),
        "rss_per_file": round(rss / size, 3),
        "goal": {"mb_per_s": 500, "rss_per_file": 1.0},
    }
    print(
        f"inspect-trace: {s:.3f} s = {size / 1e6 / s:.0f} MB/s, "
        f"peak RSS {rss / 1e6:.0f} MB = {rss / size:.2f}x the file"
    )
    if not args.no_gz:
        gz = tmp / (trace.name + ".gz")
        if not trace.name.endswith(".gz"):
            child(CHILD_GZIP, str(trace), str(gz), timeout=1800)
        else:
            gz = trace
        zs = min(float(child(CHILD_ZLIB, str(gz), "zlib")[0]) for _ in range(args.repeat))
        inf = min(float(child(CHILD_ZLIB, str(gz), "ftrun")[0]) for _ in range(args.repeat))  # its inflater: ISA-L
        gs, grss = run_cli(gz, flags, args.repeat)
        print(
            f"gz {gz.stat().st_size / 1e6:.1f} MB: inspect-trace {gs:.3f} s, bare zlib stream {zs:.3f} s, "
            f"ftrun's inflater alone (ftrun.gunzip, ISA-L) {inf:.3f} s "
            f"(inspect / zlib = {gs / zs:.2f}x; over the plain file's {s:.3f} s: {gs - s:+.3f} s, "
            f"{min(1.0, max(0.0, 1 - (gs - s) / inf)):.0%} of ftrun's inflating hidden), peak RSS {grss / 1e6:.0f} MB"
        )
        out.update(
            gz_mb=round(gz.stat().st_size / 1e6, 1),
            gz_inspect_s=round(gs, 3),
            zlib_s=round(zs, 3),
            inflate_s=round(inf, 3),
            gz_vs_zlib=round(gs / zs, 2),
            gz_vs_plain=round(gs / s, 2),
            gz_rss_per_file=round(grss / size, 3),
        )
    out["load_avg"] = load_avg()
    print(json.dumps(out))


def main() -> None:
    if len(sys.argv) == 7 and sys.argv[1] == "--synth":  # child: synthesize without holding it in the parent
        src, out, size, sync_every, fragments = sys.argv[2:]
        synthesize(Path(src), Path(out), float(size), int(sync_every), int(fragments))
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", type=Path, help="benchmark this trace as is (needs the schedule flags)")
    p.add_argument("--source", type=Path, help="run dir or trace file to replicate (default: fresh torchft trace)")
    p.add_argument("--size-mb", type=float, default=None, help="synthesized size (default 19, --large 300)")
    p.add_argument("--fragments", type=int, default=2)
    p.add_argument("--sync-every", type=int, default=8)
    p.add_argument("--fragment-sync-delay", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3, help="runs of each timed command (best is kept)")
    p.add_argument("--large", action="store_true", help="a ~300 MB trace: MB/s, peak RSS / file, gzip vs zlib")
    p.add_argument("--no-gz", action="store_true", help="--large: skip the gzip measurement")
    p.add_argument("--no-hta", action="store_true")
    p.add_argument(
        "--parallelism",
        action="store_true",
        help="ratios against the one-process read: a folder of --files traces of --size-mb, the same gzip'd, "
        "and one --large-mb file",
    )
    p.add_argument("--files", type=int, default=8, help="--parallelism: files in the folder (default 8)")
    p.add_argument(
        "--large-mb", default="80", help="--parallelism: the large files' sizes, comma-separated (default 80)"
    )
    p.add_argument(
        "--hta-path",
        default=os.environ.get("FTRUN_HTA_PATH"),
        help="a folder HTA was installed into (pip install --target DIR traceinsight), put on the HTA "
        "child's PYTHONPATH only (default $FTRUN_HTA_PATH)",
    )
    p.add_argument("--ftrun", help="the ftrun command to time, e.g. 'python -m ftrun' (default: this venv's ftrun)")
    args = p.parse_args()
    if args.ftrun:
        FTRUN[:] = args.ftrun.split()
    print(f"compiled {compile_ftrun()} (.pyc, as an install has them); timing {' '.join(FTRUN)}")
    if args.size_mb is None:
        args.size_mb = 300.0 if args.large else 19.0

    with tempfile.TemporaryDirectory() as tmpd:
        tmp = Path(tmpd)
        if args.large:
            large(args, tmp)
            return
        if args.parallelism:
            parallelism(args, tmp)
            return
        if args.trace is not None:
            trace, F, H, T = args.trace, args.fragments, args.sync_every, args.fragment_sync_delay
        else:
            src, F, H, T = source_trace(args, tmp)
            (tmp / "big").mkdir()
            trace = synthesize(src, tmp / "big" / "rank0.json", args.size_mb, H, F)
        size = trace.stat().st_size
        raw_size = len(gzip.decompress(trace.read_bytes())) if trace.name.endswith(".gz") else size
        print(
            f"trace {trace.name}: {size / 1e6:.1f} MB on disk, {raw_size / 1e6:.1f} MB JSON; "
            f"F={F} H={H} tau={T}; load {load_avg()}"
        )

        flags = ["--fragments", str(F), "--sync-every", str(H), "--fragment-sync-delay", str(T)]
        res = subprocess.run([*FTRUN, "inspect-trace", str(trace), *flags, "--json"], capture_output=True, timeout=900)
        verdict = json.loads(res.stdout)["verdict"] if res.stdout else f"exit {res.returncode}"
        cli_s, cli_rss = run_cli(trace, flags, args.repeat)
        a1, a2, peak, rss, v2, nev = child(CHILD_ANALYZE, str(trace), str(F), str(H), str(T))
        js, js_rss = child(CHILD_JSON, str(trace))
        rows = [
            ("ftrun inspect-trace (CLI, end to end)", cli_s, float(cli_rss)),
            ("ftrun analyze() in-process", float(a2), float(rss)),
            ("stdlib json.load", float(js), float(js_rss)),
        ]
        hta_s, env = None, hta_env(args.hta_path)
        hta = None if args.no_hta else have_hta(env)
        if hta is not None:
            if trace.parent.name != "big" or len(list(trace.parent.iterdir())) != 1:
                (tmp / "hta").mkdir(exist_ok=True)
                os.symlink(trace.resolve(), tmp / "hta" / trace.name)
                hta_dir = tmp / "hta"
            else:
                hta_dir = trace.parent
            try:
                runs = [child(CHILD_HTA, str(hta_dir), env=env) for _ in range(min(2, args.repeat))]
                hta_s = min(float(hs) for hs, _ in runs)
                rows.append((f"HTA TraceAnalysis load ({hta})", hta_s, max(float(r) for _, r in runs)))
            except RuntimeError as e:
                print(f"HTA failed: {str(e).strip().splitlines()[-1]}")
        else:
            print("HTA: not importable (pip install --target DIR traceinsight; --hta-path DIR) or --no-hta: skipped")

        print(f"verdict {verdict} ({nev} events)")
        print(f"{'what':42s} {'seconds':>9s} {'peak RSS (growth) MB':>21s}")
        for name, s, mem in rows:
            print(f"{name:42s} {s:9.3f} {('' if mem is None else f'{mem / 1e6:.1f}'):>21s}")
        print(f"analyze tracemalloc peak: {int(peak) / 1e6:.1f} MB = {int(peak) / raw_size:.2f}x the JSON size")
        print(f"json.load / inspect (CLI) = {float(js) / cli_s:.2f}x")
        out = {
            "bench": "inspect",
            "trace_mb": round(size / 1e6, 1),
            "inspect_s": round(cli_s, 3),
            "json_load_s": round(float(js), 3),
            "hta": hta,  # HTA's distribution and release, None when it was not importable
            "hta_s": None if hta_s is None else round(hta_s, 3),
            "ratio": None if hta_s is None else round(hta_s / cli_s, 1),
            "goal": 20,
            # the benchmark's own verdict: null when HTA was not measured (nothing to compare)
            "goal_met": None if hta_s is None else hta_s / cli_s >= 20,
            "trace_verdict": verdict,  # what inspect-trace said of the trace (not the benchmark)
            "load_avg": load_avg(),
        }
        if hta_s is not None:
            print(f"HTA load / inspect (CLI) = {hta_s / cli_s:.1f}x  (goal >= 20x)")
        print(json.dumps(out))


if __name__ == "__main__":
    main()
