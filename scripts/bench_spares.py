"""``bench_recovery.py --spares-compare``: kill -> first commit with and without warm spares.

Five trainings of the default model (3 groups, ``KILLS`` one after another, each a send step so the
survivors ask for a quorum at once): without spares, with ``--spares 1``, with ``--spares 1``
plus the lighthouse's heartbeat timeout at each of ``SPARE_HEARTBEAT_MS`` (a ``--config`` key:
torchft's lighthouse holds a new incarnation's first quorum until the dead one's heartbeats have
been missing that long, so the join follows it), and with ``--spares 2`` at the shortest of them:
a dead group's relaunch becomes the next spare, and with one spare a kill that comes before that
relaunch is warm (``KILLS`` are 60 steps apart, a few seconds beside three training groups on
two cores) finds none and waits for it. Each kill's ``total_s`` and phases come from
``ftrun train --json``'s ``recovery`` (the summary's own breakdown); the memory of every replica
group's and waiting spare's process tree (PSS) is sampled once replica 0 logged ``MEMORY_AT_STEP``
steps (before the first kill)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KILLS = ("1@25", "2@85", "0@145", "1@205", "2@265")
STEPS = 320
MEMORY_AT_STEP = 20
SPARE_HEARTBEAT_MS = (500, 250)
STDERR_TAIL = 2000  # characters of a failed training's stderr kept in the record
PHASES = ("detect", "relaunch", "join", "reconfigure", "heal", "catch_up")
VARIANTS = (  # (label, extra train flags, heartbeat_timeout_ms or None: ftrun's default)
    ("no spares", (), None),
    ("--spares 1", ("--spares", "1"), None),
    *((f"--spares 1, heartbeat_timeout_ms {ms}", ("--spares", "1"), ms) for ms in SPARE_HEARTBEAT_MS),
    (f"--spares 2, heartbeat_timeout_ms {min(SPARE_HEARTBEAT_MS)}", ("--spares", "2"), min(SPARE_HEARTBEAT_MS)),
)


def _pss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _job_label(log: str, logs: Path) -> str | None:
    """``replica R`` or ``spare K`` for a process writing its stdout to ``log`` (a path), when that
    is the group's or spare's log in ``logs`` (``logs/replica{r}.log``, ``logs/spare{k}.log``)."""
    path = Path(log)
    if path.parent != logs or path.suffix != ".log":
        return None
    for prefix, label in (("replica", "replica"), ("spare", "spare")):
        if path.stem.startswith(prefix) and path.stem[len(prefix) :].isdigit():
            return f"{label} {path.stem[len(prefix) :]}"
    return None


def memory_by_job(run_dir: Path) -> dict[str, float]:
    """MB of PSS per replica group and waiting spare of the run: every process whose stdout is the
    group's (the spare's) log in ``run_dir/logs``, its launcher and the ranks it forked alike, whether
    the launcher started as a fresh interpreter or was forked from the training's zygote (whose
    children show its command line and its environment at start, not the group's)."""
    logs = (run_dir / "logs").resolve()
    out: dict[str, float] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            label = _job_label(os.readlink(d / "fd" / "1"), logs)
        except OSError:
            continue
        if label is not None:
            out[label] = out.get(label, 0.0) + _pss_kb(int(d.name)) / 1024
    return {k: round(v, 1) for k, v in sorted(out.items())}


def _steps_logged(run_dir: Path) -> int:
    try:
        return len((run_dir / "events" / "replica0_rank0.jsonl").read_text().splitlines())
    except OSError:
        return 0


def steps_in(run_dir: Path, rec: dict) -> dict:
    """The replaced group's own steps inside its join and catch-up spans (rank 0's step log) and
    their median step time: what those two phases are made of (torchft's DiLoCo asks for the
    first quorum at local step H/F - tau, and syncs tau steps later)."""
    try:
        lines = (run_dir / "events" / f"replica{rec['replica']}_rank0.jsonl").read_text().splitlines()
    except OSError:
        return {}
    records = [json.loads(x) for x in lines if x.strip()]
    out: dict = {}
    for phase in ("join", "catch_up"):
        span = rec["spans"].get(phase)
        if span is None:
            continue
        a, b = rec["fault_at"] + span[0], rec["fault_at"] + span[1]
        inside = [x["step_time_s"] for x in records if a < x["t"] <= b + 1e-6]
        out[f"{phase}_steps"] = len(inside)
        out[f"{phase}_median_step_s"] = round(statistics.median(inside), 3) if inside else None
    return out


def why_failed(summary: dict) -> dict:
    """What a failed training's summary says went wrong: the supervisor's failures, the replicas'
    agreement, the numeric problems and the check's verdict and problems (each list cut at 5)."""
    check = summary.get("check") or {}
    numerics = summary.get("numerics") or {}
    agreement = summary.get("agreement") or {}
    return {
        "failures": (summary.get("failures") or [])[:5],
        "agreement_ok": agreement.get("ok"),
        "numerics_problems": (numerics.get("problems") or [])[:5],
        "check": check.get("verdict"),
        "check_problems": (check.get("problems") or [])[:5],
    }


def one_run(tmp: Path, name: str, extra: tuple[str, ...], heartbeat_ms: int | None) -> dict:
    argv = [sys.executable, "-m", "ftrun", "train", "--replicas", "3", "--steps", str(STEPS), "--restarts", "2"]
    for k in KILLS:
        argv += ["--kill", k]
    argv += [*extra, "--out", str(tmp), "--run-name", name, "--json"]
    if heartbeat_ms is not None:
        toml = tmp / f"{name}.toml"
        toml.write_text(f"heartbeat_timeout_ms = {heartbeat_ms}\n")
        argv += ["--config", str(toml)]
    command = " ".join(["ftrun", *argv[3:]])
    t0 = time.monotonic()
    err_path = tmp / f"{name}.stderr"  # a file, not a pipe: nothing reads it while the run goes on
    with err_path.open("w") as err:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True)
    memory: dict[str, float] = {}
    while proc.poll() is None and not memory and time.monotonic() - t0 < 900:
        if _steps_logged(tmp / name) >= MEMORY_AT_STEP:
            memory = memory_by_job(tmp / name)
        time.sleep(0.5)
    stdout, _ = proc.communicate(timeout=900)
    stderr_tail = err_path.read_text(errors="replace")[-STDERR_TAIL:]
    try:
        summary = json.loads(stdout)
    except json.JSONDecodeError:
        return {
            "variant": name,
            "command": command,
            "exit_code": proc.returncode,
            "error": "no JSON summary",
            "stderr_tail": stderr_tail,
        }
    kills = [
        {
            "fault": x["fault"],
            "total_s": x["total_s"],
            "phases": x["phases"],
            "unaccounted_s": x["unaccounted_s"],
            **steps_in(tmp / name, x),
        }
        for x in summary.get("recovery", [])
    ]
    totals = [k["total_s"] for k in kills if k["total_s"] is not None]
    med = {p: statistics.median(v) if (v := [k["phases"][p] or 0.0 for k in kills]) else None for p in PHASES}
    groups = [v for k, v in memory.items() if k.startswith("replica")]
    spares = [v for k, v in memory.items() if k.startswith("spare")]
    return {
        "command": command,
        "exit_code": proc.returncode,
        **({} if proc.returncode == 0 else {"why_failed": why_failed(summary), "stderr_tail": stderr_tail}),
        "wall_s": round(time.monotonic() - t0, 1),
        "kills": kills,
        "back": f"{len(totals)} of {len(kills)}",
        "median_total_s": round(statistics.median(totals), 3) if totals else None,
        "median_phases_s": {p: None if v is None else round(v, 3) for p, v in med.items()},
        "memory_mb": memory,
        "group_pss_mb": round(statistics.median(groups), 1) if groups else None,
        "spare_pss_mb": round(statistics.median(spares), 1) if spares else None,
    }


def compare_spares() -> int:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-spares-") as tmp:
        for i, (label, extra, hb) in enumerate(VARIANTS):
            row = {"variant": label, **one_run(Path(tmp), f"v{i}", extra, hb)}
            rows.append(row)
            ph = ", ".join(f"{p} {v}" for p, v in (row.get("median_phases_s") or {}).items())
            print(f"{label}: median kill -> first commit {row.get('median_total_s')} s ({row.get('back')}); {ph}")
            per_kill = [(k["total_s"], k["phases"].get("relaunch")) for k in row.get("kills", [])]
            print(f"  per kill (total, relaunch) s: {per_kill}; memory MB {row.get('memory_mb')}")
    print(json.dumps({"spares_compare": rows}))
    return 0 if all(r.get("exit_code") == 0 and r.get("median_total_s") is not None for r in rows) else 1


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(compare_spares())
