"""Render ``ftrun plan``: the prediction table, the ``--check`` table, and utilisation vs bandwidth (PNG)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from rich.table import Table

from ftrun.output import atomic_path
from ftrun.console import console, fits, line, styled


def bw(bps: Optional[float]) -> str:
    if bps is None:
        return "-"
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.3g} {unit}"
    return f"{bps:.3g} bit/s"


def _ms(v: Optional[float]) -> str:
    if v is None:
        return "-"
    return f"{v:.1f}" if abs(v) < 100 else f"{v:,.0f}"


def _pct(v: Optional[float]) -> str:
    return "-" if v is None else f"{v * 100:.1f}%"


LABELS = {"streaming": "streaming", "plain": "plain", "data_parallel": "DP"}
LONG = {"streaming": "streaming", "plain": "plain DiLoCo", "data_parallel": "data-parallel"}


def _tb(nbytes: Optional[float]) -> str:
    if nbytes is None:
        return "-"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.3g} B"


def _table(*heads: str, left: int = 2) -> Table:
    """Columns that never wrap (a number is never cut); the first ``left`` left-aligned."""
    t = Table()
    for i, h in enumerate(heads):
        t.add_column(h, no_wrap=True, justify="left" if i < left else "right")
    return t


def print_plan(result: dict, c: Any = None) -> None:
    """The plan: one row per link and schedule when that fits the console, else (80 columns,
    a pipe) one block per link, the schedules side by side: numbers are never cut."""
    c = c or console()
    inp = result["inputs"]
    size = f"{inp['model_bytes'] / 1e9:.3g} GB" if inp["model_bytes"] >= 1e9 else f"{inp['model_bytes'] / 1e6:.3g} MB"
    dp = " vs DP (data-parallel: an allreduce every step)" if inp.get("data_parallel_bytes") else ""
    c.print(f"ftrun plan · {result['source']} · model {size} · R={inp['replicas']} · "
            f"step {inp['step_ms']:.3g} ms · streaming F={inp['fragments']} H={inp['sync_every']} tau={inp['fragment_sync_delay']} "
            f"vs plain F=1 H={inp['sync_every']} tau=0{dp}")
    if inp.get("overlap_slowdown", 1.0) != 1.0:
        c.print(f"steps between a send and its sync compute {inp['overlap_slowdown']:.3g}x as long (overlap slowdown)")
    if inp.get("step_jitter_ms") or inp.get("lighthouse_rpc_ms") or inp.get("stalls"):
        c.print(f"groups drift apart: step jitter {inp['step_jitter_ms']:.3g} ms per step, {inp['stalls']} stall(s); "
                f"lighthouse reply {inp['lighthouse_rpc_ms']:.3g} ms on top of the held round trip")
    # with training totals, hours and bytes take the place of the split, the mean bandwidth and
    # the smallest tau / F (all in --json)
    totals = inp.get("train_steps") is not None
    heads = ["exposed ms/sync"] + ([] if totals else ["data+ctrl"]) + ["exposed ms/step", "util", "peak bw"]
    heads += ["hours", "sent/replica"] if totals else ["mean bw"]
    per_link = [] if totals else [f"min tau F={inp['fragments']}", "min F (tau)"]

    def values(p: dict) -> list:
        row = [_ms(p["exposed_ms_per_sync"])]
        row += [] if totals else [f"{_ms(p['exposed_data_ms_per_sync'])}+{_ms(p['exposed_control_ms_per_sync'])}"]
        row += [_ms(p["exposed_ms_per_step"]),
                styled(_pct(p["compute_utilisation"]), "green" if p["compute_utilisation"] >= inp["target_util"] else "red"),
                bw(p["peak_bandwidth_bps"])]
        row += [f"{p['train_hours']:.3g}", _tb(p["sent_bytes_per_replica"])] if totals else [bw(p["mean_bandwidth_bps"])]
        return row

    def link(cfg: dict) -> str:
        return f"{bw(cfg['link']['bandwidth_bps'])}, {cfg['link']['latency_s'] * 1e3:g} ms"

    def mins(cfg: dict) -> list[str]:
        if totals:
            return []
        frag = cfg["smallest_fragments"]
        return ["none" if cfg["smallest_tau"] is None else str(cfg["smallest_tau"]),
                "none" if frag is None else f"{frag['fragments']} ({frag['tau']})"]

    keys_all = [k for k in ("streaming", "plain", "data_parallel") if any(k in cfg for cfg in result["configs"])]
    t = _table("link", "", *heads, *per_link)
    for cfg in result["configs"]:
        for key in (k for k in keys_all if k in cfg):
            first = key == "streaming"
            t.add_row(link(cfg) if first else "", LABELS[key], *values(cfg[key]), *(mins(cfg) if first else [""] * len(per_link)))
    if not fits(c, t):  # stacked: a block per link, a row per figure, the schedules side by side
        t = _table("link / figure", *(LABELS[k] for k in keys_all), left=1)
        for i, cfg in enumerate(result["configs"]):
            if i:
                t.add_section()
            t.add_row(styled(link(cfg), "bold"), *[""] * len(keys_all))
            cols = [values(cfg[k]) if k in cfg else [""] * len(heads) for k in keys_all]
            for j, head in enumerate(heads):
                t.add_row(f"  {head}", *(col[j] for col in cols))
            for head, v in zip(per_link, mins(cfg)):
                t.add_row(f"  {head}", v, *[""] * (len(keys_all) - 1))
    c.print(t)
    hides = result["hides_from_bps"]
    target = f"{inp['target_util'] * 100:g}%"
    for key in ("streaming", "plain", "data_parallel"):
        if key not in result["data_hidden_from_bps"]:
            continue
        v = hides[key]
        where = "on no link up to 1 Tbit/s" if v is None else f"from {bw(v)} up"
        d = result["data_hidden_from_bps"][key]
        data = "never hides its data (every sync waits for it)" if d is None else f"hides all its data from {bw(d)} up"
        c.print(f"{LONG[key]} {data}; keeps compute utilisation >= {target} {where} (latency {hides['latency_s'] * 1e3:g} ms)")
    c.print("model: compute per step; at each quorum the slowest group's arrival, the lighthouse's reply and the held "
            "round trip; each fragment's ring allreduce queued on the uplink (ftrun.linkcost, as the emulator); the sync "
            "blocks for the rest. Not modelled: the real collectives' own CPU cost on loopback (ftrun plan --check shows "
            "how much it weighs)")
    if result.get("png"):
        c.print(f"plot: {result['png']}")


def print_check(result: dict, c: Any = None) -> None:
    """Predicted against measured, a row per run when that fits, else a block per run."""
    c = c or console()

    def err(run: dict, key: str) -> Any:
        e = run["error"][key]
        ok = run["within_tolerance"][key]
        text = "-" if e is None else f"{e * 100:+.0f}%"
        return styled(text, "red") if ok is False else text

    def name(r: dict) -> str:
        return r["name"] + ("" if r["planes"] == "data+control" else " (data only)")

    t = _table("run", "link", "exposed ms/sync", "measured", "error", "data (pred/meas)", "control (pred/meas)",
               "steps/s", "measured", "error")
    for r in result["runs"]:
        p, m = r["predicted"], r["measured"]
        t.add_row(
            name(r), str((r.get("link") or {}).get("describe", "-")),
            _ms(p["exposed_ms_per_sync"]), _ms(m["exposed_ms_per_sync"]), err(r, "exposed_ms_per_sync"),
            f"{_ms(p['exposed_data_ms_per_sync'])} / {_ms(m['exposed_data_ms_per_sync'])}",
            f"{_ms(p['exposed_control_ms_per_sync'])} / {_ms(m['exposed_control_ms_per_sync'])}",
            f"{p['steps_per_s']:.2f}", "-" if m["steps_per_s"] is None else f"{m['steps_per_s']:.2f}", err(r, "steps_per_s"),
        )
    if not fits(c, t):  # stacked: a block per run, a row per figure
        t = _table("run / figure", "predicted", "measured", "error")
        t.columns[1].justify = "right"
        for i, r in enumerate(result["runs"]):
            p, m = r["predicted"], r["measured"]
            if i:
                t.add_section()
            t.add_row(styled(f"{name(r)} · {(r.get('link') or {}).get('describe', '-')}", "bold"), "", "", "")
            t.add_row("  exposed ms/sync", _ms(p["exposed_ms_per_sync"]), _ms(m["exposed_ms_per_sync"]), err(r, "exposed_ms_per_sync"))
            t.add_row("  data ms/sync", _ms(p["exposed_data_ms_per_sync"]), _ms(m["exposed_data_ms_per_sync"]), "")
            t.add_row("  control ms/sync", _ms(p["exposed_control_ms_per_sync"]), _ms(m["exposed_control_ms_per_sync"]), "")
            t.add_row("  steps/s", f"{p['steps_per_s']:.2f}", "-" if m["steps_per_s"] is None else f"{m['steps_per_s']:.2f}",
                      err(r, "steps_per_s"))
    c.print(t)
    c.print(f"tolerance {result['tolerance'] * 100:g}% (exposed time: or {result['exposed_floor_ms']:g} ms); "
            "measured = what the compare/sweep reported; predicted from each run's manifest and event logs on its link")
    if result["outside_tolerance"]:
        c.print(line(("FAIL", "bold red"), " outside tolerance: " + ", ".join(result["outside_tolerance"])))
    else:
        c.print(line(("PASS", "bold green"), " every prediction within tolerance"))


def draw_utilisation(result: dict, path: Path) -> Path:
    """Utilisation vs bandwidth for streaming and plain DiLoCo, each schedule's hiding point marked."""
    import matplotlib.pyplot as plt

    fig = utilisation_figure(result)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_path(path, "--png", overwrite=True) as tmp:  # plan already refused a target that is not a PNG
            fig.savefig(tmp, dpi=110, format="png")
    finally:
        plt.close(fig)
    return path


def utilisation_figure(result: dict):
    """``draw_utilisation``'s figure (the caller closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    inp = result["inputs"]
    xs = [c["link"]["bandwidth_bps"] for c in result["configs"]]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for key, label, colour in (("streaming", f"streaming F={inp['fragments']} tau={inp['fragment_sync_delay']}", "#1f77b4"),
                               ("plain", "plain DiLoCo F=1 tau=0", "#d62728")):
        ys = [c[key]["compute_utilisation"] for c in result["configs"]]
        ax.plot(xs, ys, marker="o", color=colour, label=label)
        for at, style, text, y in ((result["hides_from_bps"][key], ":", "reaches target from", inp["target_util"]),
                                   (result["data_hidden_from_bps"][key], "-.", "hides all data from", 0.05)):
            if at is not None and min(xs) <= at <= max(xs):
                ax.axvline(at, color=colour, linestyle=style, linewidth=1)
                ax.annotate(f"{text} {bw(at)}", (at, y), textcoords="offset points", xytext=(4, -14 if y > 0.5 else 4),
                            color=colour, fontsize=8)
    ax.axhline(inp["target_util"], color="grey", linestyle="--", linewidth=1, label=f"target {inp['target_util'] * 100:g}%")
    ax.set_xscale("log")
    ax.set_xlabel("bandwidth per replica (bit/s)")
    ax.set_ylabel("compute utilisation (predicted)")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"{result['source']} · R={inp['replicas']} H={inp['sync_every']} · latency "
                 f"{result['hides_from_bps']['latency_s'] * 1e3:g} ms", fontsize=9)
    # under the axes, not in them: the marks' labels sit anywhere along both edges of the plot
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, frameon=False)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig
