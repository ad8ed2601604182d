"""``ftrun compare A B``: train two configurations (or read two run dirs), inspect both, report.

Train mode: A and B are presets (``streaming``, ``baseline``) or config TOML files; both runs
share model, data, seed, replicas, steps and link, and live under ``<out>/compare-<time>/``.
Read mode: A and B are existing run dirs; a comma-separated list of run dirs (``A-group0,A-group1``)
is the replica groups of one multi-host job, read as one run (as ``inspect-trace DIR...`` does).
Either way each run is checked with the very
``inspect-trace`` analysis (``ftrun.check.analyze.analyze``), and the report adds what the
event logs measured over the whole run. Writes report.json, report.md and timeline.png.

Metric definitions (per run; event logs of rank 0 of each replica, averaged over replicas):
* ``exposed_comm_s`` = ``exposed_data_s``: sum over the run of each sync's blocking time on its
  fragment's collectives (event log ``exposed_s``). ``per_sync_exposed_ms`` = that / syncs.
* ``exposed_control_s``: the control plane's blocking time: every ``start_quorum`` (the training
  thread waits for the quorum torchft runs before each send) and ``should_commit`` (event log
  ``quorum_s`` + ``commit_s``). ``per_sync_exposed_control_ms`` = that / syncs. Like the data
  plane's, it includes waiting for the slowest replica to arrive, not only the link's round trips.
* ``compute_utilisation``: compute time / loop wall time, where loop wall time = the sum of
  the steps' times and compute time = that minus exposed data and control time.
* ``median_step_s``: the median time of the steps with neither send nor sync (pure compute,
  as the run really ran them), next to the link's ``calibrated_step_s``.
* ``hidden_comm_share``: over the profiled syncs whose send was captured,
  sum(hidden) / sum(send->done), from the traces.
* ``peak_sync_bytes``: the largest fragment payload sent in one sync (trace evidence, else the
  manifest's fragment sizes); ``total_bytes``: payload of every send in the run, per replica.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

from ftrun import layout
from ftrun.config import PRESETS, RunConfig, build, load_toml
from ftrun.errors import BadInput, RunFailed
from ftrun.output import atomic_write, check_name, check_target, removed_if_empty_on_error
from ftrun.launch.progress import read_all
from ftrun import linkcost
from ftrun.link_spec import LinkSpec, parse_link

SYNC_SHARE = 0.25  # default link: plain DiLoCo's sync costs this share of H steps of compute

# Per-run figures that --repeat reports as median and spread (min, max) over the repeats.
FIGURES = ("steps_per_s", "tokens_per_s", "wall_s", "exposed_comm_s", "exposed_data_s", "exposed_control_s",
           "per_sync_exposed_ms", "per_sync_exposed_control_ms", "hidden_comm_share", "compute_utilisation",
           "median_step_s", "final_loss")
PER_REPLICA_FIGURES = ("steps_per_s_per_replica", "tokens_per_s_per_replica")


def _is_run_dir(p: Path) -> bool:
    return (p / layout.MANIFEST).is_file()


def split_spec(spec: str) -> list[Path]:
    """The run dirs of one read-mode spec: ``DIR`` or ``DIR,DIR,...`` (groups of one job)."""
    return [Path(x) for x in spec.split(",") if x.strip()]


def run_name_of(dirs: list[Path]) -> str:
    """A run's display name: the dir name, or the job's name for several group dirs (``job-group0`` -> ``job``)."""
    if len(dirs) == 1:
        return dirs[0].name
    names = {re.sub(r"-group\d+$", "", d.name) for d in dirs}
    return names.pop() if len(names) == 1 else "+".join(d.name for d in dirs)


def _spec_kind(s: str) -> str:
    p = Path(s)
    if s in PRESETS or (p.suffix == ".toml" and p.is_file()):
        return "train"
    if "," in s:
        dirs = split_spec(s)
        if not dirs:
            raise BadInput(f"compare: {s!r} names no run dir")
        for d in dirs:
            if not d.exists():
                raise BadInput(f"compare: {d} (in {s}) is not an existing run dir")
            if not (d.is_dir() and _is_run_dir(d)):
                raise BadInput(f"compare: {d} (in {s}) is not an ftrun run dir (no {layout.MANIFEST})")
        return "read"
    if p.is_dir() and _is_run_dir(p):
        return "read"
    if p.suffix == ".toml":
        raise BadInput(f"compare: config file {s} not found")
    if p.exists():
        raise BadInput(f"compare: {s} is not an ftrun run dir (no {layout.MANIFEST})")
    raise BadInput(f"compare: {s} is neither a preset ({', '.join(PRESETS)}), a config .toml, nor an existing run dir")


def resolve_specs(specs: list[str]) -> str:
    """'train' when every spec is a preset or TOML file, 'read' when every spec is a run dir
    (or a comma-separated list of the run dirs of one job's replica groups)."""
    if len(specs) != 2:
        raise BadInput(f"compare: expected two runs (presets, config files or run dirs), got {len(specs)}")
    kinds = [_spec_kind(s) for s in specs]
    if kinds[0] != kinds[1]:
        raise BadInput("compare: give two presets/config files (to train) or two run dirs (to read), not a mix")
    return kinds[0]


def config_for(spec: str, flags: dict[str, Any]) -> RunConfig:
    if spec in PRESETS:
        return build(preset=spec, mode=spec, **flags)
    values = load_toml(spec)
    return build(file_values=values, **flags)


def link_for(step_s: float, model_bytes: int, replicas: int, sync_every: int) -> LinkSpec:
    """The link on which plain DiLoCo's sync (quorum + full-model ring allreduce, ``ftrun.linkcost``)
    costs about ``SYNC_SHARE`` of ``sync_every`` steps of ``step_s`` compute: the slow-link regime.

    Latency: 10 ms, or less so that latency terms take at most a quarter of that budget.
    """
    budget = SYNC_SHARE * sync_every * step_s
    lat = min(0.01, budget / (8 * max(replicas, 2)))
    lat = float(f"{lat:.2g}")
    bw = float(f"{linkcost.bandwidth_for(budget, model_bytes, max(replicas, 2), lat):.2g}")
    return LinkSpec(bw, lat)


def default_link(cfg: RunConfig, threads: int) -> tuple[LinkSpec, dict]:
    """Calibrate where it runs: the step measured with the run's layout, then ``link_for``."""
    ranks = cfg.replicas * cfg.nproc_per_replica
    code = [sys.executable, "-m", "ftrun.worker.calibrate", json.dumps(cfg.resolved()), str(threads), str(ranks)]
    out = subprocess.run(code, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RunFailed(f"calibration failed: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}")
    m = json.loads(out.stdout.strip().splitlines()[-1])
    spec = link_for(m["step_s"], m["model_bytes"], cfg.replicas, cfg.sync_every)
    sync_s = spec.plain_sync_s(m["model_bytes"], max(cfg.replicas, 2))
    return spec, {
        "calibrated_step_s": round(m["step_s"], 5),
        "calibration": f"{ranks} concurrent process(es) x {threads} thread(s), as the run's ranks",
        "model_bytes": m["model_bytes"],
        "plain_sync_s": round(sync_s, 4),
        "plain_sync_share_of_h": round(sync_s / (cfg.sync_every * m["step_s"]), 3),
    }


def _mean(xs: list[float]) -> Optional[float]:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def run_metrics(name: str, run_dir: Path | list[Path], report) -> dict[str, Any]:
    """Metrics of one run: a run dir, or the run dirs of one job's replica groups (merged)."""
    dirs = [run_dir] if isinstance(run_dir, Path) else list(run_dir)
    manifests = [json.loads((d / layout.MANIFEST).read_text()) for d in dirs]
    manifest = manifests[0]
    cfg = manifest["config"]
    frag_bytes = {f["id"]: f["bytes"] for f in manifest.get("fragments", [])}
    per_replica = []
    for r in range(manifest["replicas"]):
        recs = next((got for d in dirs if (got := read_all(layout.event_log(d, r, 0)))), [])
        recs = [x for x in recs if x.get("step") is not None]  # records while rejoining have no step
        if not recs:
            continue
        train_s = sum(x["step_time_s"] for x in recs)
        syncs = [x for x in recs if x.get("synced") is not None]
        data_s = sum(x.get("exposed_s", 0.0) for x in syncs)
        control_s = sum(x.get("quorum_s", 0.0) + x.get("commit_s", 0.0) for x in recs)
        plain = sorted(x["step_time_s"] for x in recs if x.get("sent") is None and x.get("synced") is None and not x.get("quorums"))
        per_replica.append(
            {
                "replica": r,
                "steps": len(recs),
                "steps_per_s": len(recs) / train_s if train_s else None,
                "train_s": train_s,
                "syncs": len(syncs),
                "commits": sum(1 for x in syncs if x.get("commit")),
                "exposed_comm_s": data_s,
                "exposed_control_s": control_s,
                "compute_utilisation": (train_s - data_s - control_s) / train_s if train_s else None,
                "median_step_s": plain[len(plain) // 2] if plain else None,
                "total_bytes": sum(frag_bytes.get(x["sent"], 0) for x in recs if x.get("sent") is not None),
                "losses": {x["step"]: x["loss"] for x in recs},
            }
        )
    if not per_replica:
        raise BadInput(f"compare: {', '.join(map(str, dirs))} has no event logs")
    walls = [m.get("wall_s") for m in manifests if m.get("wall_s") is not None]
    sync_events = [e for e in report.events if e.kind == "sync" and e.send_to_done_ms is not None and e.observed_step is not None]
    comm = sum(e.send_to_done_ms for e in sync_events)
    hidden = sum(e.hidden_comm_ms or 0.0 for e in sync_events)
    send_bytes = [e.bytes for e in report.events if e.kind == "send" and e.bytes]
    peak = max(send_bytes) if send_bytes else max(frag_bytes.values(), default=0)
    steps = cfg["steps"]
    checkpoints = sorted({max(1, steps * q // 4) for q in (1, 2, 3, 4)})
    tokens_per_step = cfg["batch_size"] * cfg["seq_len"] * manifest.get("nproc_per_replica", 1)
    sps = _mean([p["steps_per_s"] for p in per_replica])
    syncs = _mean([p["syncs"] for p in per_replica]) or 0
    exposed = _mean([p["exposed_comm_s"] for p in per_replica]) or 0.0
    control = _mean([p["exposed_control_s"] for p in per_replica]) or 0.0
    return {
        "name": name,
        "run_dir": str(dirs[0]) if len(dirs) == 1 else ",".join(map(str, dirs)),
        "run_dirs": [str(d) for d in dirs],
        "schedule": manifest["schedule"],
        "verdict": report.verdict,
        "problems": report.problems()[:20],
        "steps_per_s": sps,
        "steps_per_s_per_replica": [p["steps_per_s"] for p in per_replica],
        "tokens_per_s": sps * tokens_per_step if sps else None,
        "tokens_per_s_per_replica": [p["steps_per_s"] * tokens_per_step if p["steps_per_s"] else None for p in per_replica],
        "wall_s": max(walls) if walls else None,
        "syncs": syncs,
        "commits": _mean([p["commits"] for p in per_replica]),
        "exposed_comm_s": exposed,
        "exposed_data_s": exposed,
        "exposed_control_s": control,
        "per_sync_exposed_ms": exposed / syncs * 1e3 if syncs else None,
        "per_sync_exposed_control_ms": control / syncs * 1e3 if syncs else None,
        "compute_utilisation": _mean([p["compute_utilisation"] for p in per_replica]),
        "median_step_s": _mean([p["median_step_s"] for p in per_replica]),
        "profiled_syncs": len(sync_events),
        "profiled_comm_ms": comm,
        "profiled_hidden_ms": hidden,
        "hidden_comm_share": hidden / comm if comm else None,
        "peak_sync_bytes": peak,
        "total_bytes": _mean([p["total_bytes"] for p in per_replica]),
        "final_loss": _mean([p["losses"].get(steps) for p in per_replica]),
        "loss_at_steps": {str(s): _mean([p["losses"].get(s) for p in per_replica]) for s in checkpoints},
        "link": manifest.get("link"),
        "recovery": recovery_of(dirs),
    }


def recovery_of(dirs: list[Path]) -> dict[str, Any] | None:
    """Faults and recovery, from each run dir's summary.json (None when no fault was injected)."""
    recs = []
    for d in dirs:
        try:
            recs.append(json.loads((d / layout.SUMMARY).read_text()).get("recovery") or {})
        except (OSError, ValueError):
            continue
    faults = [f for r in recs for f in r.get("faults", [])]
    if not faults:
        return None
    return {
        "faults": [f"{f['action']} {f['replica']}@{f['step']}" for f in faults],
        "restarts": sum(r.get("restarts", 0) for r in recs),
        "heals": sum(len(r.get("heals", [])) for r in recs),
        "commits_lost": sum(r.get("commits_lost", 0) for r in recs),
        "recovered_s": [f.get("recovered_s") for f in faults],
    }


def repeat_plan(names: list[str], repeat: int) -> list[tuple[int, str]]:
    """The trainings of ``--repeat N``, in order: (config index, run name). The order alternates
    (A then B, B then A, ...) so that drift in the machine's load does not favour one side."""
    plan = []
    for i in range(repeat):
        for k in ((0, 1) if i % 2 == 0 else (1, 0)):
            plan.append((k, names[k] if repeat == 1 else f"{names[k]}-{i + 1}"))
    return plan


def aggregate(reps: list[dict]) -> dict:
    """One run's figures over its repeats: median per figure (``FIGURES``), ``spread`` = [min, max];
    per-replica figures: the median per replica.

    The first repeat gives every other field; the verdict passes only if every repeat passed.
    """
    import statistics

    out = dict(reps[0])
    out["repeats"] = len(reps)
    out["spread"] = {}
    if len(reps) == 1:
        return out
    for key in FIGURES:
        vals = [r.get(key) for r in reps]
        if all(isinstance(v, (int, float)) for v in vals):
            out[key] = statistics.median(vals)
            out["spread"][key] = [min(vals), max(vals)]
    for key in PER_REPLICA_FIGURES:  # element-wise median, per replica
        lists = [r.get(key) or [] for r in reps]
        if lists and all(len(x) == len(lists[0]) for x in lists):
            out[key] = [statistics.median(col) if all(isinstance(v, (int, float)) for v in col) else None for col in zip(*lists)]
    out["verdict"] = "pass" if all(r["verdict"] == "pass" for r in reps) else "fail"
    out["problems"] = [f"{Path(r['run_dir']).name}: {p}" for r in reps for p in r["problems"]][:20]
    out["repeat_runs"] = [{"run_dir": r["run_dir"], "verdict": r["verdict"], **{k: r.get(k) for k in FIGURES}} for r in reps]
    return out


def throughput_claim(a: dict, b: dict) -> str:
    """The throughput clause: a difference is claimed only when the ranges over repeats do not overlap."""
    ratio = a["steps_per_s"] / b["steps_per_s"]
    n = min(a.get("repeats", 1), b.get("repeats", 1))
    sa, sb = (a.get("spread") or {}).get("steps_per_s"), (b.get("spread") or {}).get("steps_per_s")
    if n < 2 or not sa or not sb:
        return f"throughput {ratio:.2f}x from one run each (spread not measured: use --repeat 3)"
    if sa[0] > sb[1] or sb[0] > sa[1]:
        return f"throughput {ratio:.2f}x, beyond the spread of {n} runs each"
    return (f"throughput {ratio:.2f}x is within the spread of {n} runs each ({a['name']} {sa[0]:.2f}-{sa[1]:.2f}, "
            f"{b['name']} {sb[0]:.2f}-{sb[1]:.2f} steps/s): no difference claimed")


def conclusion(runs: list[dict]) -> str:
    parts = []
    for r in runs:
        share = r["hidden_comm_share"]
        ctrl = r.get("exposed_control_s")
        text = f"{r['name']} hid {share * 100:.0f}% of its data communication and " if share is not None else f"{r['name']} "
        text += f"exposed {r['exposed_comm_s']:.2f} s of data"
        if ctrl is not None:
            text += f" and {ctrl:.2f} s of control"
        if r["per_sync_exposed_ms"] is not None:
            text += f" ({r['per_sync_exposed_ms']:.0f}"
            text += f" + {r['per_sync_exposed_control_ms']:.0f} ms per sync)" if r.get("per_sync_exposed_control_ms") is not None else " ms per sync)"
        if r.get("compute_utilisation") is not None:
            text += f", computing {r['compute_utilisation'] * 100:.0f}% of its loop time"
        parts.append(text)
    a, b = runs
    text = "; ".join(parts) + "."
    ta = a["exposed_comm_s"] + (a.get("exposed_control_s") or 0.0)
    tb = b["exposed_comm_s"] + (b.get("exposed_control_s") or 0.0)
    if ta and tb:
        text += f" {a['name']}'s exposed communication (data + control) is {ta / tb * 100:.0f}% of {b['name']}'s"
        if a["peak_sync_bytes"] and b["peak_sync_bytes"]:
            text += f"; its peak bytes per sync are {a['peak_sync_bytes'] / b['peak_sync_bytes']:.2f}x"
        if a["steps_per_s"] and b["steps_per_s"]:
            text += "; " + throughput_claim(a, b)
        text += "."
    return text


def compare(
    specs: list[str],
    flags: dict[str, Any],
    link: Optional[str],
    out: Optional[str],
    json_out: bool,
    expect_hidden: Optional[float],
    overwrite: bool = False,
    name: Optional[str] = None,
    repeat: int = 1,
) -> int:
    from ftrun.check.analyze import analyze
    from ftrun.report.compare_view import print_report, write_markdown
    from ftrun.report.timeline import draw, lanes_for_run

    if repeat < 1:
        raise BadInput(f"--repeat {repeat}: must be at least 1")
    if expect_hidden is not None and not 0.0 <= expect_hidden <= 1.0:
        raise BadInput(f"--expect-hidden {expect_hidden}: must be between 0 and 1")
    if name is not None:
        check_name("--name", name)  # one directory under --out, never elsewhere
    # Parse --link up front so that a bad one is exit 2 in read mode too (it used to be ignored there).
    link_spec = parse_link(link) if link else None
    mode = resolve_specs(specs)
    out_root = Path(out or "profiles")
    link_info: dict[str, Any]
    if mode == "train":
        from ftrun.launch.run import train

        flags = {k: v for k, v in flags.items() if v is not None}
        flags.pop("run_name", None)
        flags["out"] = str(out_root)  # validated below per run
        cfgs = [config_for(s, flags) for s in specs]
        names = [Path(s).stem if s.endswith(".toml") else s for s in specs]
        if names[0] == names[1]:
            names = [f"{names[0]}-a", f"{names[1]}-b"]
        cmp_dir = out_root / (name or f"compare-{time.strftime('%Y%m%d-%H%M%S')}")
        if cmp_dir.exists() and not overwrite:
            raise BadInput(f"compare: {cmp_dir} already exists (pass --overwrite or another --name)")
        ranks = cfgs[0].replicas * cfgs[0].nproc_per_replica
        threads = max(1, (os.cpu_count() or 1) // ranks)
        if link_spec is not None:
            spec = link_spec
            link_info = {"chosen": "by --link"}
        elif cfgs[0].link:
            spec = parse_link(cfgs[0].link)
            link_info = {"chosen": "by config"}
        else:
            if not json_out:
                print(f"calibrating: one training step of the model on {ranks} concurrent process(es) ...", flush=True)
            spec, calib = default_link(cfgs[0], threads)
            link_info = {"chosen": f"default: plain DiLoCo's sync ~ {SYNC_SHARE:g} of H steps of compute", **calib}
            if not json_out:
                print(f"calibrated step {calib['calibrated_step_s'] * 1e3:.1f} ms -> link {spec.describe()}: plain DiLoCo's sync "
                      f"{calib['plain_sync_s'] * 1e3:.0f} ms = {calib['plain_sync_share_of_h']:.2f} of H={cfgs[0].sync_every} steps", flush=True)
        per_cfg: list[list[Path]] = [[], []]
        with removed_if_empty_on_error(cmp_dir):  # a failed first run leaves no empty compare dir
            for k, rn in repeat_plan(names, repeat):
                cfg = replace(cfgs[k], out=str(cmp_dir), run_name=rn, link=spec.as_flag())
                if not json_out:
                    print(f"training {rn}: F={cfg.fragments} H={cfg.sync_every} tau={cfg.fragment_sync_delay}, "
                          f"{cfg.replicas} replica groups x {cfg.steps} steps, emulated link {spec.describe()} ...", flush=True)
                train(cfg, overwrite=overwrite, json_out=False, quiet=True)
                per_cfg[k].append(cmp_dir / rn)
        run_dirs = per_cfg
        link_info.update(bandwidth_bps=spec.bandwidth_bps, latency_s=spec.latency_s, emulated=True, describe=spec.describe())
    else:
        if link_spec is not None:
            raise BadInput(f"--link {link}: applies only when compare trains; run dirs keep the link they were trained with")
        if repeat != 1:
            raise BadInput(f"--repeat {repeat}: applies only when compare trains; give run dirs without it")
        run_dirs = [[split_spec(s)] for s in specs]
        names = [run_name_of(p[0]) for p in run_dirs]
        if names[0] == names[1]:
            names = [f"{names[0]}-a", f"{names[1]}-b"]
        cmp_dir = out_root / (name or f"compare-{names[0]}-vs-{names[1]}")
        if (cmp_dir / "report.json").exists() and not overwrite:
            raise BadInput(f"compare: {cmp_dir} already holds a report (pass --overwrite or another --name)")
        links = [json.loads((p[0][0] / layout.MANIFEST).read_text()).get("link") for p in run_dirs]
        l0 = links[0] or {}
        link_info = {
            "bandwidth_bps": l0.get("bandwidth_bps"),
            "latency_s": l0.get("latency_s"),
            "emulated": bool(l0.get("emulated")),
            "describe": l0.get("describe", "loopback (no emulation)"),
            "chosen": "as recorded in the runs" if links[0] == links[1] else "DIFFERENT links in the two runs",
        }
    reading = [q for reps in run_dirs for d in reps for q in (d if isinstance(d, list) else [d])]
    check_target(cmp_dir, "--name", reading=reading)  # never write into a run dir being compared
    # run_dirs[k]: the repeats of config k; each a run dir (train) or a job's group dirs (read)
    reports = [[analyze(d if isinstance(d, list) else [d]) for d in reps] for reps in run_dirs]
    cmp_dir.mkdir(parents=True, exist_ok=True)
    runs = [aggregate([run_metrics(n, d, r) for d, r in zip(reps, reps_reports)])
            for n, reps, reps_reports in zip(names, run_dirs, reports)]
    calibrated = link_info.get("calibrated_step_s")
    if calibrated is not None:
        link_info["measured_median_step_s"] = {r["name"]: r.get("median_step_s") for r in runs}
        # the regime the runs were really in: plain DiLoCo's sync over H measured steps
        link_info["plain_sync_share_of_measured_h"] = {
            r["name"]: round(link_info["plain_sync_s"] / (r["schedule"]["sync_every"] * r["median_step_s"]), 3)
            for r in runs if r.get("median_step_s")}
    lanes = [lane for n, r in zip(names, reports) for lane in lanes_for_run(n, r[0])]
    timeline = draw(lanes, cmp_dir / "timeline.png", f"{names[0]} vs {names[1]} · link {link_info.get('describe')}" + (" (emulated)" if link_info.get("emulated") else ""))
    result = {
        "compare_dir": str(cmp_dir),
        "runs": runs,
        "link": link_info,
        "conclusion": conclusion(runs),
        "timeline": str(timeline),
        "verdict": "pass" if all(r["verdict"] == "pass" for r in runs) else "fail",
    }
    if expect_hidden is not None:
        share = runs[0]["hidden_comm_share"]
        result["expect_hidden"] = {"min": expect_hidden, "observed": share, "ok": share is not None and share >= expect_hidden}
    atomic_write(cmp_dir / "report.json", json.dumps(result, indent=1), "compare")
    write_markdown(result, cmp_dir / "report.md")
    if json_out:
        print(json.dumps(result, indent=1))
    else:
        print_report(result)
    if result["verdict"] != "pass":
        return 1
    if expect_hidden is not None and not result["expect_hidden"]["ok"]:
        return 1
    return 0
