"""What each benchmark record's result says, as (figure, value) rows for docs/benchmarks.md.

One reader per benchmark id (``FIGURES``), each taking the JSON result its script printed;
``rows`` falls back to every top-level value for a benchmark without one, or for an older
script's result that a reader cannot read. Used by ``gen_benchmarks_page.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def _scalars(result: Any) -> list[tuple[str, str]]:
    """Any result: its top-level numbers, strings and booleans (a list: each item's, numbered)."""
    items = result if isinstance(result, list) else [result]
    rows = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        prefix = f"[{i}] " if len(items) > 1 else ""
        shown = [(k, v) for k, v in item.items() if k != "bench" and isinstance(v, (int, float, str, bool))]
        rows += [(prefix + k, json.dumps(v)) for k, v in shown]
    return rows


def _inspect(r: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [
        (f"inspect-trace, {r['trace_mb']} MB trace, end to end", f"{r['inspect_s']} s"),
        ("json.load of the same trace", f"{r['json_load_s']} s"),
    ]
    if r.get("ratio") is None:
        return [*rows, ("HTA TraceAnalysis load / inspect-trace", "not compared: HTA was not installed")]
    hta = r.get("hta") or "HTA"
    return [
        *rows,
        (f"HTA TraceAnalysis load ({hta})", f"{r['hta_s']} s"),
        ("HTA load / inspect-trace (goal >= 20x)", f"{r['ratio']}x"),
    ]


def _interval(p: dict[str, Any] | None) -> str:
    """A paired ratio (bench_overhead's ``paired``): geometric mean, 95% interval, its verdict."""
    if not p:
        return "not measured"
    lo, hi = p.get("ci95") or [None, None]
    ci = "no interval (one repeat)" if lo is None else f"95% interval {lo}-{hi}"
    return f"{p['ratio']}x over {p['repeats']} repeats, {ci}: {p['verdict']}"


def _overhead(r: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        ("bare torchft DiLoCo loop, wall ms per step (median of repeats)", f"{r['bare_ms_per_step']} ms"),
        ("ftrun train, wall ms per step (median of repeats)", f"{r['ftrun_ms_per_step']} ms"),
        ("ftrun / bare, wall time, paired per repeat (goal 1.00-1.02)", _interval(r.get("paired_ratio"))),
        ("ftrun / bare, CPU time of all processes, paired per repeat", _interval(r.get("paired_cpu_ratio"))),
        ("ftrun's time per step outside the step body", f"{r['outside_step_body_ms_per_step']} ms"),
        ("comparison valid (ftrun measured >= 0.98x the bare loop)", json.dumps(r["valid"])),
    ]


def _compare(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    out = []
    for r in rows:
        s, b = r["per_sync_exposed_ms"], r["per_sync_exposed_control_ms"]
        out += [
            (f"{r['link']}: exposed data, streaming / plain DiLoCo (goal <= 0.10)", f"{r['exposed_ratio']:.3f}"),
            (f"{r['link']}: exposed data ms per sync, streaming / plain", f"{s[0]:.1f} / {s[1]:.1f}"),
            (f"{r['link']}: exposed control ms per sync, streaming / plain", f"{b[0]:.1f} / {b[1]:.1f}"),
            (
                f"{r['link']}: peak bytes per sync, streaming / plain x F (goal 1 +- 0.10)",
                f"{r['peak_vs_1_over_f']:.3f} (F = {r['fragments']})",
            ),
            (
                f"{r['link']}: hidden share of data communication, streaming / plain",
                f"{r['hidden_share'][0]:.0%} / {r['hidden_share'][1]:.0%}",
            ),
            (f"{r['link']}: steps/s, streaming / plain", f"{r['steps_per_s'][0]:.1f} / {r['steps_per_s'][1]:.1f}"),
            (f"{r['link']}: both schedules checked", r["verdict"]),
        ]
    return out


def _numerics(r: dict[str, Any]) -> list[tuple[str, str]]:
    le = r.get("largest_error") or {}
    return [
        ("syncs checked (replica syncs)", f"{r['checked']} ({r['replica_syncs_checked']})"),
        (
            f"largest error / tolerance ({le.get('check')}, {le.get('where')})",
            f"{le.get('ratio'):.3g} (error {le.get('error'):.3g}, tolerance {le.get('tolerance'):.3g})",
        ),
        ("tolerance: Z x the rounding budget, Z", f"{r['z']:g}"),
        ("numeric problems on the clean run", str(r["problems"])),
    ]


def _sketch_cost(r: dict[str, Any]) -> list[tuple[str, str]]:
    rows = []
    for m in r["sketch_cost"]:
        ms, x, sh = m["cpu_ms_per_sync"], m["ratio_after_before"], m["share_of_window"]
        name = f"{m['model']} ({m['params_fragment0']:,} elements in fragment 0, {m['threads']} thread)"
        rows += [
            (f"{name}: CPU ms per sync, before", f"{ms['before']:.3g}"),
            *[(f"{name}: CPU ms per sync, {k} (x before)", f"{ms[k]:.3g} ({x[k]:.2f}x)") for k in x],
            (
                f"{name}: share of the {m['window_steps']} steps between syncs ({m['step_cpu_ms']:.4g} CPU ms each), "
                "before / " + " / ".join(x),
                " / ".join(f"{v * 100:.2f}%" for v in sh.values()),
            ),
        ]
    return rows


def _worker_memory(r: dict[str, Any]) -> list[tuple[str, str]]:
    g = r["growth_bytes_per_step"]
    rows = [
        (f"verdict ({r['steps']} steps, {r['replicas']} groups)", f"{r['verdict']}, plateau: {r['plateau']}"),
        ("share of the first half's heap growth that is free chunks kept", f"{r['retained_share']}"),
        *[
            (
                f"growth per step, bytes, all workers, first / second half: {f}",
                f"{g['first_half'][f]:+.0f} / {g['second_half'][f]:+.0f}",
            )
            for f in ("rss", "arena", "held", "free")
        ],
    ]
    for w in r["workers"]:
        if "quarters" not in w:
            rows.append((w["replica"], f"{w['samples']} sample(s): too few"))
            continue
        q, (a, b) = w["quarters"], w["steps"]
        rows += [
            (f"{w['replica']}, steps {a}-{b}: {f}, MB, first / last quarter's median", f"{q[f][0]} / {q[f][1]}")
            for f in ("rss", "arena", "held", "free")
        ]
        g = w["growth_bytes_per_step"]
        rows.append(
            (
                f"{w['replica']}: heap growth per step, bytes, first / second half",
                f"{g['first_half']['arena']:+.0f} / {g['second_half']['arena']:+.0f}",
            )
        )
    return rows


def _recovery(r: dict[str, Any]) -> list[tuple[str, str]]:
    def s(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    rows = []
    for f in r["faults"]:
        for phase, (pred, meas, err, *judged) in f["phases"].items():
            if judged and judged[0] is None and pred is not None and pred == meas:  # an input, not a prediction
                rows.append((f"{f['fault']}, replica {f['replica']}: {phase}, measured s", f"{s(meas)} (plan's input)"))
                continue
            e = "" if err is None else f" ({err * 100:+.0f}%)"
            name = f"{f['fault']}, replica {f['replica']}: {phase}, predicted / measured s"
            rows.append((name, f"{'not predicted' if pred is None else s(pred)} / {s(meas)}{e}"))
    out = ", ".join(r.get("outside_tolerance") or []) or "none"
    tol = f"{r['tolerance'] * 100:g}% or {r['floor_s']:g} s per phase"
    return [*rows, (f"plan --check verdict (tolerance {tol})", f"{r['verdict']}; outside tolerance: {out}")]


def _spares(r: dict[str, Any]) -> list[tuple[str, str]]:
    rows = []
    for v in r["spares_compare"]:
        if v.get("median_total_s") is None:
            rows.append((v["variant"], f"no recovery measured (exit {v.get('exit_code')}: {v.get('error', '')})"))
            continue
        each = ", ".join("-" if k["total_s"] is None else f"{k['total_s']:.2f}" for k in v["kills"])
        phases = ", ".join(f"{p} {x:.2f}" for p, x in v["median_phases_s"].items() if x is not None)
        rows.append(
            (f"{v['variant']}: kill -> first commit, median s ({v['back']} back)", f"{v['median_total_s']:.2f}")
        )
        rows.append((f"{v['variant']}: each kill, s", each))
        rows.append((f"{v['variant']}: median phases, s", phases))
        mem = f"group {v['group_pss_mb']}" + (f", waiting spare {v['spare_pss_mb']}" if v.get("spare_pss_mb") else "")
        rows.append((f"{v['variant']}: PSS per process tree, MB", mem))
        if v.get("exit_code"):  # the training itself failed after its recoveries (its summary says why)
            rows.append((f"{v['variant']}: ftrun train's exit code", str(v["exit_code"])))
    return rows


def _chaos(r: dict[str, Any]) -> list[tuple[str, str]]:
    c, g, pc = r["chaos_summary"], r["compare"]["goodput"] or {}, r.get("plan_check") or {}
    rec = c["recoveries"]
    phases = ", ".join(f"{k} {v:.2f}" for k, v in rec["phases_median_s"].items() if v is not None)
    # the acceptance case's length: the chaos clock's start to the last commit, against what it required
    met = "met" if r.get("min_chaos_s_met") else "not met"
    need = f" (required ≥ {r['min_chaos_s']:g}: {met})" if "min_chaos_s" in r else ""
    rows = [
        (f"chaos part, s{need}", f"{c.get('chaos_s')}"),
        ("replica groups × steps", f"{r.get('replicas')} × {r.get('steps')}"),
        (
            "--quorum-timeout, both runs",
            f"{r['quorum_timeout_s']:g} s" if r.get("quorum_timeout_s") else "train's default",
        ),
        ("faults injected (requested)", f"{c['fired']} ({c['requested']}): {json.dumps(c['by_kind'])}"),
        ("drawn / realized MTBF, s", f"{c['mtbf_s']} / {c['realized_mtbf_s']}"),
        ("recoveries back, median / p90 s", f"{rec['count']}, {rec['median_s']} / {rec['p90_s']}"),
        ("recovery phases, median s", phases),
        ("run steps missed per fault", f"{c['missed_steps_per_fault']}"),
        ("goodput chaos / twin, steps/s", f"{g.get('chaos_steps_per_s')} / {g.get('twin_steps_per_s')}"),
        ("goodput retained, measured", f"{g.get('retained')}"),
    ]
    if pc:
        rows.append(("goodput retained, predicted (plan)", f"{pc['prediction']['retained']}"))
        rows.append(("plan --check (tolerance 10%)", f"{pc['verdict']}, error {pc['relative_error']}"))
    if r.get("timeline"):  # the chaos run's whole-run picture, kept beside the docs
        t = r["timeline"]  # relative to the checkout; the page is in docs/
        rows.append(("whole-run timeline (faults, recoveries)", f"[{t}]({t.removeprefix('docs/')})"))
    return rows


def _validation(r: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f"rows within tolerance {r['tolerance']:g}", f"{r['passed']} of {r['rows']}")]


def _large(r: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [
        (f"inspect-trace, {r['trace_mb']} MB trace", f"{r['inspect_s']} s = {r['mb_per_s']} MB/s"),
        ("peak RSS / trace size", f"{r['rss_per_file']} ({r['rss_mb']} MB)"),
    ]
    if "gz_mb" not in r:
        return rows
    return [
        *rows,
        (f"gzipped ({r['gz_mb']} MB): inspect-trace", f"{r['gz_inspect_s']} s = {r['gz_vs_plain']}x the plain file's"),
        ("gzipped: inspect-trace / a bare zlib stream of it", f"{r['gz_vs_zlib']}x ({r['zlib_s']} s)"),
    ]


def _paper(r: dict[str, Any]) -> list[tuple[str, str]]:
    c = r["configs"][0]
    s, p = c["streaming"], c["plain"]
    return [
        (f"compute utilisation on {c['link']['describe']}, streaming", f"{s['compute_utilisation']:.3f}"),
        ("compute utilisation, plain DiLoCo", f"{p['compute_utilisation']:.3f}"),
        ("exposed ms per sync, streaming / plain", f"{s['exposed_ms_per_sync']:.1f} / {p['exposed_ms_per_sync']:.1f}"),
    ]


def _warm_start(r: dict[str, Any]) -> list[tuple[str, str]]:
    rows = []
    for side in ("cold", "warm"):
        x = r[side]
        rows.append(
            (
                f"{side}: median cell wall s / steps s / check s (ratio)",
                f"{x['median_wall_s']:.3g} / {x['median_steps_s']:.3g} / {x['median_check_s']:.3g} "
                f"({x['median_wall_over_steps_and_check']:.3g}x)",
            )
        )
        if "median_wall_over_cold_steps_and_check" in x:  # recorded since the zygote forks a warm cell's agents
            rows.append(
                (
                    "warm: median cell wall over the cold cells' steps + check",
                    f"{x['median_wall_over_cold_steps_and_check']:.3g}x",
                )
            )
        rows.append((f"{side}: the whole sweep of {r['cells']} cells", f"{x['sweep_wall_s']} s"))
        if "sweep_cpu_s" in x:  # recorded since the bench reads its sweeps' CPU
            rows.append((f"{side}: CPU s of the whole sweep, all its processes", f"{x['sweep_cpu_s']:.2f}"))
    if "bytecode_cache" in r:
        rows.append(("Python bytecode cache of the sweeps' processes", r["bytecode_cache"]))
    g, share = r["memory"]["per_group_mb"], r["sharing"]
    rows.append(
        (
            "one replica group parked, its agent a fresh interpreter (agent + rank): PSS / RSS / private MB",
            f"{g['pss']} / {g['rss']} / {g['private']}",
        )
    )
    park = r["memory"].get("park_cpu_s")
    if park:  # recorded since ranks are forked from their agent
        rows.append(
            (
                "CPU s to park the training's groups, fresh agents: agents + ranks",
                f"{park['groups']} ({park['agent']} + {park['rank']})",
            )
        )
    z = r.get("memory_zygote")
    if z:  # a warm cell's training: its agents forked by the sweep's zygote
        zg, zp, own = z["per_group_mb"], z["park_cpu_s"], z["zygote"]
        rows.append(
            (
                "one replica group parked, its agent forked by the zygote: PSS / RSS / private MB",
                f"{zg['pss']} / {zg['rss']} / {zg['private']}",
            )
        )
        rows.append(
            (
                "CPU s to park the training's groups, agents forked by the zygote: agents + ranks",
                f"{zp['groups']} ({zp['agent']} + {zp['rank']})",
            )
        )
        if "total_pss_mb" in z:  # every process of the parked training, the zygote's share included
            rows.append(
                (
                    "a parked 2-group training, PSS of all its processes MB: fresh agents / forked by the zygote",
                    f"{r['memory']['total_pss_mb']} / {z['total_pss_mb']}",
                )
            )
        rows.append(
            (
                "the zygote (once per sweep), before it forks: PSS / private MB, CPU s of its imports",
                f"{own['pss']} / {own['private']}, {own['cpu_s']:.2f}",
            )
        )
    rows.append(
        (
            "private MB of a process that imported a rank's modules: fresh / forked from a pre-imported parent",
            f"{share['fresh_import_private_mb']} / {share['forked_child_private_mb']}",
        )
    )
    return rows


def _median(stat: dict[str, Any] | None, unit: str) -> str:
    return "not measured" if not stat else f"{stat['median']:g} {unit} (median of {stat['n']})"


def _gpu_run(name: str, run: dict[str, Any]) -> list[tuple[str, str]]:
    """One ``gpu_check`` training: its verdict, commits, numerics, and what the trace measured."""
    if "exit" not in run:
        return [(f"{name}", run.get("error") or "not run")]
    commits = "/".join(str(c) for c in run.get("commits") or []) or "-"
    rows = [(f"{name}: verdict, commits per replica", f"{run.get('verdict')}, {commits} (exit {run['exit']})")]
    if run.get("verdict") not in (None, "pass") and run.get("check_line"):
        rows.append((f"{name}: check", run["check_line"]))
    n = run.get("numerics") or {}
    rows.append((f"{name}: numerics", n.get("line") or n.get("status") or "not reported"))
    if "kernels_per_send" in run:
        sends = run["kernels_per_send"]
        linked = sum(s["kernels"] for s in sends)
        calls = sum(s["allreduce_calls"] for s in sends)
        rows.append((f"{name}: NCCL kernels placed in torchft allreduce calls", f"{linked} of {calls} call(s)"))
        rows.append((f"{name}: NCCL allreduce kernel", _median(run.get("nccl_allreduce_kernel_us"), "µs")))
        rows.append((f"{name}: sync exposed time", _median(run.get("exposed_ms"), "ms")))
    for key in ("numerics_problem", "corrupt_problem"):
        if run.get(key):
            rows.append((f"{name}: requirement not met", run[key]))
    if "link_check" in run:
        rows.append(
            (f"{name}: every sync exposed >= bytes/bandwidth + latency", json.dumps(run["link_check"].get("ok")))
        )
    return rows


def _gpu(r: dict[str, Any]) -> list[tuple[str, str]]:
    if not r.get("cuda"):
        return _scalars(r)
    rows = [("device", r["device"])]
    for name, run in (r.get("runs") or {}).items():
        rows += _gpu_run(name, run)
    rows.append(
        (
            "all GPU checks held",
            f"{json.dumps(r.get('ok'))}; not checked: {', '.join(r.get('not_checked') or []) or 'none'}",
        )
    )
    return rows


def _gpu_pgs(r: dict[str, Any]) -> list[tuple[str, str]]:
    if not r.get("cuda"):
        return _scalars(r)
    rows = [("device", r["device"])]
    for name, cell in (r.get("cells") or {}).items():
        commits = "/".join(str(c) for c in cell.get("commits") or []) or "-"
        rec = cell.get("recovered_s") or []
        extra = f"; recovered in {', '.join(f'{x:g} s' for x in rec if x is not None)}" if any(rec) else ""
        verdict = cell.get("cell_verdict") or cell.get("verdict")  # as a sweep cell reads (train's own check apart)
        rows.append((f"{name}: verdict, commits per replica", f"{verdict}, {commits}{extra}"))
        if cell.get("problem"):
            rows.append((f"{name}: requirement not met", cell["problem"]))
    rows += [(f"{b}: unavailable", why) for b, why in (r.get("unavailable") or {}).items()]
    rows += [(f"{c}: not run", why) for c, why in (r.get("not_run") or {}).items()]
    rows.append(("the matrix held", json.dumps(r.get("ok"))))
    return rows


FIGURES: dict[str, Callable[[dict[str, Any]], list[tuple[str, str]]]] = {
    "warm-start": _warm_start,
    "inspect": _inspect,
    "inspect-large": _large,
    "paper": _paper,
    "overhead": _overhead,
    "compare": _compare,  # type: ignore[dict-item]  # its result is a list of rows
    "plan-validation": _validation,
    "numerics": _numerics,
    "recovery": _recovery,
    "recovery-spares": _spares,
    "sketch-cost": _sketch_cost,
    "worker-memory": _worker_memory,
    "chaos": _chaos,
    "gpu": _gpu,
    "gpu-pgs": _gpu_pgs,
}


def rows(bench: str, result: Any) -> list[tuple[str, str]]:
    """The figures of one benchmark's result: its reader's, else every top-level value."""
    try:
        return FIGURES[bench](result) if bench in FIGURES else _scalars(result)
    except (KeyError, TypeError, IndexError):
        return _scalars(result)  # an older script's result: show what it holds
