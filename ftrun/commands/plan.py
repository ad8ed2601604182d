"""``ftrun plan``: predict streaming vs plain DiLoCo on links (``ftrun.plan``), or check the model
against measured runs (``--check``). Torch-free.

Inputs come from flags (``--params``, ``--dtype``, ``--step-ms``) or from a run dir
(``--from``): its manifest's fragment bytes, replicas and schedule, and its event logs' compute
time per step — the loop time minus the exposed data and control time, per step, averaged over
the replica groups (what ``ftrun compare`` calls compute time). ``--check DIR`` reads a compare
dir (``report.json``) or a sweep dir (``sweep.json``) and predicts every run from its own run dir
on the link it was trained on.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ftrun import layout
from ftrun.errors import BadInput
from ftrun.event_log import read_event_log, seconds, stepped
from ftrun.link_spec import LinkSpec, parse_link
from ftrun.plan import Workload, data_hidden_bandwidth, hiding_bandwidth, plain, simulate, smallest_fragments, smallest_tau
from ftrun.schedule import Schedule, ScheduleError

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
SWEEP_POINTS_PER_DECADE = 4
LOOPBACK = LinkSpec(1e12, 0.0)  # a run without an emulated link: the model's link costs nothing
EXPOSED_FLOOR_MS = 5.0  # an exposed-time error this small always passes --check


@dataclass(frozen=True)
class RunInputs:
    """What the model needs from one measured run."""

    name: str
    work: Workload
    schedule: Schedule
    steps: int
    link: Optional[LinkSpec]


def _manifest(run_dir: Path) -> layout.Manifest:
    if not (run_dir / layout.MANIFEST).is_file():
        raise BadInput(f"{run_dir}: not an ftrun run dir (no {layout.MANIFEST})")
    return layout.read_train_manifest(run_dir)


def compute_step_s(dirs: list[Path], replicas: int) -> float:
    """Mean compute time per step over the replica groups' rank-0 event logs (loop - exposed)."""
    per_replica = []
    for r in range(replicas):
        recs = next((got for d in dirs if (got := read_event_log(layout.event_log(d, r, 0)))), [])
        recs = stepped(recs)
        if not recs:
            continue
        loop = sum(x.step_time_s for x in recs)
        data = sum(seconds(x.exposed_s) for x in recs if x.synced is not None)
        control = sum(seconds(x.quorum_s) + seconds(x.commit_s) for x in recs)
        per_replica.append((loop - data - control) / len(recs))
    if not per_replica:
        raise BadInput(f"{dirs[0]}: no event logs with step times under {layout.EVENT_LOGS}/")
    return sum(per_replica) / len(per_replica)


def read_run(dirs: list[Path], name: Optional[str] = None) -> RunInputs:
    """Fragment bytes, replicas, schedule and link from the manifest; compute step from the event logs."""
    m = _manifest(dirs[0])
    sched = m.schedule
    try:
        schedule = Schedule(sched.fragments, sched.sync_every, sched.fragment_sync_delay)
    except ScheduleError as e:
        raise BadInput(f"{dirs[0] / layout.MANIFEST}: schedule {e}") from None
    replicas = m.replicas
    nbytes = tuple(f.bytes for f in sorted(m.fragments, key=lambda f: f.id))
    link = m.link
    spec = LinkSpec(link.bandwidth_bps, link.latency_s) if link and link.emulated else None
    steps = sched.steps
    if not nbytes:
        raise BadInput(f"{dirs[0] / layout.MANIFEST}: lists no fragments")
    work = Workload(compute_step_s(dirs, replicas), nbytes, replicas)
    return RunInputs(name or dirs[0].name, work, schedule, steps, spec)


def parse_sweep(text: str) -> tuple[list[LinkSpec], float]:
    """``LO..HI[,LATENCY]`` -> log-spaced links (``SWEEP_POINTS_PER_DECADE``), and the latency."""
    m = re.match(r"^\s*([^.,]+(?:\.\d+)?[^.,]*)\.\.([^,]+)(?:,(.+))?$", text or "")
    if not m:
        raise BadInput(f"--sweep-link {text!r}: expected LO..HI[,LATENCY], e.g. 10mbit..10gbit,20ms")
    lat = parse_link(f"1gbit,{m[3]}", f"--sweep-link {text!r}: latency").latency_s if m[3] else 0.0
    lo = parse_link(m[1], f"--sweep-link {text!r}: low end").bandwidth_bps
    hi = parse_link(m[2], f"--sweep-link {text!r}: high end").bandwidth_bps
    if hi <= lo:
        raise BadInput(f"--sweep-link {text!r}: the high end must be above the low end")
    n = max(2, round(math.log10(hi / lo) * SWEEP_POINTS_PER_DECADE) + 1)
    return [LinkSpec(lo * (hi / lo) ** (i / (n - 1)), lat) for i in range(n)], lat


def _schedule(fragments: int, sync_every: int, delay: int) -> Schedule:
    try:
        return Schedule(fragments, sync_every, delay)
    except ScheduleError as e:
        flag = {"fragments": "--fragments", "sync_every": "--sync-every", "fragment_sync_delay": "--fragment-sync-delay"}[e.field]
        raise BadInput(f"{flag} {e.value}: {e.rule}") from None


def plan_inputs(from_dir: Optional[str], params: Optional[int], dtype: Optional[str], step_ms: Optional[float],
                replicas: Optional[int], fragments: Optional[int], sync_every: Optional[int],
                delay: Optional[int]) -> tuple[Workload, Schedule, Optional[LinkSpec], str]:
    """The workload and streaming schedule to plan, and the run's own link (``--from``)."""
    if from_dir is not None:
        if params is not None or step_ms is not None or dtype is not None:
            raise BadInput("--from: give either a run dir or --params/--dtype/--step-ms, not both")
        run = read_run([Path(from_dir)])
        work, sched, link, source = run.work, run.schedule, run.link, f"run {from_dir}"
    else:
        if params is None or step_ms is None:
            raise BadInput("plan: give --from RUN_DIR, or --params N and --step-ms MS (and --dtype)")
        if params < 1:
            raise BadInput(f"--params {params}: must be at least 1")
        if not (step_ms > 0 and math.isfinite(step_ms)):
            raise BadInput(f"--step-ms {step_ms}: must be a number > 0")
        dtype = dtype or "fp32"
        if dtype not in DTYPE_BYTES:
            raise BadInput(f"--dtype {dtype!r}: expected one of {', '.join(DTYPE_BYTES)}")
        work = Workload(step_ms / 1e3, (params * DTYPE_BYTES[dtype],), 2)
        sched, link, source = Schedule(2, 20, 5), None, f"{params:,} params x {dtype}, step {step_ms:g} ms"
    if replicas is not None:
        if replicas < 1:
            raise BadInput(f"--replicas {replicas}: must be at least 1")
        work = Workload(work.step_s, work.fragment_bytes, replicas)
    sched = _schedule(fragments if fragments is not None else sched.fragments,
                      sync_every if sync_every is not None else sched.sync_every,
                      delay if delay is not None else sched.fragment_sync_delay)
    return work.split(sched.fragments), sched, link, source


def predict(work: Workload, sched: Schedule, links: list[LinkSpec], target: float) -> list[dict]:
    """Per link: streaming (``sched``) and plain DiLoCo predictions, and the smallest tau / F."""
    out = []
    for link in links:
        bw, lat = link.bandwidth_bps, link.latency_s
        tau = smallest_tau(work, sched.fragments, sched.sync_every, bw, lat, target)
        frag = smallest_fragments(work, sched.sync_every, bw, lat, target)
        out.append({
            "link": {"bandwidth_bps": bw, "latency_s": lat, "describe": link.describe()},
            "streaming": simulate(work, sched, bw, lat).as_dict(),
            "plain": simulate(work, plain(sched), bw, lat).as_dict(),
            "smallest_tau": tau,
            "smallest_fragments": {"fragments": frag[0], "tau": frag[1]} if frag else None,
        })
    return out


def plan(from_dir: Optional[str], params: Optional[int], dtype: Optional[str], step_ms: Optional[float],
         links: list[str], sweep_link: Optional[str], replicas: Optional[int], fragments: Optional[int],
         sync_every: Optional[int], delay: Optional[int], target_util: float, json_out: bool, png: Optional[str]) -> int:
    from ftrun.output import atomic_write
    from ftrun.report.plan_view import draw_utilisation, print_plan

    if not 0.0 < target_util <= 1.0:
        raise BadInput(f"--target-util {target_util}: must be in (0, 1]")
    specs = [parse_link(x) for x in links]
    sweep_lat = None
    if sweep_link is not None:
        swept, sweep_lat = parse_sweep(sweep_link)
        specs += swept
    if png is not None and not png.endswith(".png"):
        raise BadInput(f"--png {png}: the file name must end in .png")
    work, sched, run_link, source = plan_inputs(from_dir, params, dtype, step_ms, replicas, fragments, sync_every, delay)
    if not specs:
        if run_link is None:
            raise BadInput("plan: give --link BW,LAT (repeatable) or --sweep-link LO..HI[,LAT]")
        specs = [run_link]
    specs = sorted(set(specs), key=lambda s: (s.bandwidth_bps, s.latency_s))
    configs = predict(work, sched, specs, target_util)
    lat = sweep_lat if sweep_lat is not None else specs[0].latency_s
    lo, hi = min(s.bandwidth_bps for s in specs), max(s.bandwidth_bps for s in specs)
    both = (("streaming", sched), ("plain", plain(sched)))
    hides = {name: hiding_bandwidth(work, s, lat, target_util, min(lo, 1e3), max(hi, 1e12)) for name, s in both}
    data_hidden = {name: data_hidden_bandwidth(work, s, lat, min(lo, 1e3), max(hi, 1e12)) for name, s in both}
    result: dict[str, Any] = {
        "source": source,
        "inputs": {"step_ms": work.step_s * 1e3, "fragment_bytes": list(work.fragment_bytes), "model_bytes": work.model_bytes,
                   "replicas": work.replicas, "fragments": sched.fragments, "sync_every": sched.sync_every,
                   "fragment_sync_delay": sched.fragment_sync_delay, "target_util": target_util},
        "configs": configs,
        "hides_from_bps": {**hides, "latency_s": lat},  # utilisation >= target from here up
        "data_hidden_from_bps": data_hidden,  # no sync waits for its data from here up
    }
    if png is not None:
        path = Path(png)
        if path.is_dir():
            raise BadInput(f"--png {png}: is a directory")
        if path.exists() and path.read_bytes()[:8] != b"\x89PNG\r\n\x1a\n":
            raise BadInput(f"--png {png}: exists and is not a PNG; not overwriting it")
        result["png"] = str(draw_utilisation(result, path))
    if json_out:
        print(json.dumps(result, indent=1))
    else:
        print_plan(result)
    return 0


# --- --check ---------------------------------------------------------------------------------


def _run_dirs(root: Path, given: Any) -> list[Path]:
    """Run dirs as a report recorded them; a dir that moved is looked up next to the report."""
    dirs = []
    for d in (given.split(",") if isinstance(given, str) else list(given or [])):
        p = Path(d)
        if not (p / layout.MANIFEST).is_file() and (root / p.name / layout.MANIFEST).is_file():
            p = root / p.name
        if not (p / layout.MANIFEST).is_file():
            raise BadInput(f"--check {root}: run dir {d} is missing (no {layout.MANIFEST})")
        dirs.append(p)
    if not dirs:
        raise BadInput(f"--check {root}: a run names no run dir")
    return dirs


def _measured_runs(root: Path) -> list[dict]:
    """[{name, dirs: [[run dir, ...] per repeat], link, measured}] from report.json or sweep.json."""
    def load(path: Path) -> dict:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise BadInput(f"{path}: unreadable ({e})") from None

    if (root / "report.json").is_file():
        rep = load(root / "report.json")
        out = []
        for r in rep.get("runs", []):
            repeats = r.get("repeat_runs") or [r]
            data, ctrl = r.get("per_sync_exposed_ms"), r.get("per_sync_exposed_control_ms")
            out.append({
                "name": r["name"],
                "dirs": [_run_dirs(root, x.get("run_dirs") or x.get("run_dir")) for x in repeats],
                "link": r.get("link") or rep.get("link"),
                "measured": {"exposed_ms_per_sync": None if data is None or ctrl is None else data + ctrl,
                             "exposed_data_ms_per_sync": data, "exposed_control_ms_per_sync": ctrl,
                             "steps_per_s": r.get("steps_per_s")},
            })
        return out
    if (root / "sweep.json").is_file():
        cells = load(root / "sweep.json").get("cells", [])
        out = []
        for i, c in enumerate(cells):
            dirs = _run_dirs(root, c.get("run_dir"))
            data, ctrl = c.get("exposed_comm_per_sync_ms"), c.get("exposed_control_per_sync_ms")
            name = c.get("name") or (Path(c["run_dir"]).name if isinstance(c.get("run_dir"), str) else f"cell{i}")
            out.append({
                "name": name, "dirs": [dirs], "link": None,
                # a sweep reports the data plane (compare's exposed_comm); control only when it says so
                "measured": {"exposed_ms_per_sync": data + ctrl if data is not None and ctrl is not None else data,
                             "exposed_data_ms_per_sync": data, "exposed_control_ms_per_sync": ctrl,
                             "steps_per_s": c.get("steps_per_s")},
                "planes": "data+control" if ctrl is not None else "data",
            })
        return out
    raise BadInput(f"--check {root}: neither a compare dir (report.json) nor a sweep dir (sweep.json)")


def error_of(pred: Optional[float], meas: Optional[float]) -> Optional[float]:
    """Relative error (pred - meas) / meas; None when either is missing or meas is 0."""
    if pred is None or meas is None or meas == 0:
        return None
    return (pred - meas) / meas


def within(key: str, pred: Optional[float], meas: Optional[float], tolerance: float) -> Optional[bool]:
    """Exposed times pass within ``tolerance`` or ``EXPOSED_FLOOR_MS``; rates within ``tolerance``."""
    if pred is None or meas is None:
        return None
    if key.startswith("exposed") and abs(pred - meas) <= EXPOSED_FLOOR_MS:
        return True
    return meas != 0 and abs(pred - meas) <= tolerance * abs(meas)


CHECKED = ("exposed_ms_per_sync", "exposed_data_ms_per_sync", "exposed_control_ms_per_sync", "steps_per_s")
GATED = ("exposed_ms_per_sync", "steps_per_s")  # exit 1 when one is outside tolerance; the split is diagnosis


def check(dir_: str, tolerance: float, json_out: bool) -> int:
    from ftrun.report.plan_view import print_check

    if not 0.0 < tolerance < 10.0:
        raise BadInput(f"--tolerance {tolerance}: must be a fraction > 0, e.g. 0.25")
    root = Path(dir_)
    if not root.is_dir():
        raise BadInput(f"--check {dir_}: not a directory")
    runs = []
    for mr in _measured_runs(root):
        preds = []
        for dirs in mr["dirs"]:
            inp = read_run(dirs)
            link = inp.link or LOOPBACK
            if mr["link"] is None:
                mr["link"] = {"bandwidth_bps": link.bandwidth_bps, "latency_s": link.latency_s,
                              "describe": link.describe() if inp.link else "loopback (no emulated link)"}
            preds.append(simulate(inp.work, inp.schedule, link.bandwidth_bps, link.latency_s, inp.steps).as_dict())
        # compare reports the median of its repeats: predict each repeat, take the median too
        pred_all = {k: statistics.median(p[k] for p in preds) for k in CHECKED}
        planes = mr.get("planes", "data+control")
        if planes == "data":
            pred_all["exposed_ms_per_sync"] = pred_all["exposed_data_ms_per_sync"]
        meas = mr["measured"]
        predicted = {k: pred_all[k] for k in CHECKED}
        errors = {k: error_of(predicted[k], meas.get(k)) for k in CHECKED}
        ok = {k: within(k, predicted[k], meas.get(k), tolerance) for k in CHECKED}
        runs.append({"name": mr["name"], "planes": planes, "link": mr["link"], "repeats": len(preds),
                     "predicted": predicted, "measured": {k: meas.get(k) for k in CHECKED},
                     "error": errors, "within_tolerance": ok})
    if not runs:
        raise BadInput(f"--check {dir_}: no runs to check")
    failed = [f"{r['name']}: {k}" for r in runs for k in GATED if r["within_tolerance"][k] is False]
    result = {"check": str(root), "tolerance": tolerance, "exposed_floor_ms": EXPOSED_FLOOR_MS, "runs": runs,
              "verdict": "fail" if failed else "pass", "outside_tolerance": failed}
    if json_out:
        print(json.dumps(result, indent=1))
    else:
        print_check(result)
    return 1 if failed else 0
