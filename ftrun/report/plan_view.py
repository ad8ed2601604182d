"""Render ``ftrun plan``: the prediction table, the ``--check`` table, and utilisation vs bandwidth (PNG)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import UnsetType
from rich.table import Table
from rich.text import Text

from ftrun.console import console, fits, line, styled
from ftrun.output import atomic_path

if TYPE_CHECKING:  # the records it renders (report only renders: nothing of plan/ is imported to run)
    from matplotlib.figure import Figure

    from ftrun.plan.check_result import RecoveryCheck, RunCheck, RunsCheck
    from ftrun.plan.result import Figures, LinkPlan, PlanResult, RecoveryPlan


def bw(bps: float | None) -> str:
    if bps is None:
        return "-"
    for unit, scale in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.3g} {unit}"
    return f"{bps:.3g} bit/s"


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.1f}" if abs(v) < 100 else f"{v:,.0f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.1f}%"


LABELS = {"streaming": "streaming", "plain": "plain", "data_parallel": "DP"}
LONG = {"streaming": "streaming", "plain": "plain DiLoCo", "data_parallel": "data-parallel"}


def _tb(nbytes: float | None) -> str:
    if nbytes is None:
        return "-"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.3g} B"


def _tbit(nbits: float | None) -> str:
    if nbits is None:
        return "-"
    for unit, scale in (("Tbit", 1e12), ("Gbit", 1e9), ("Mbit", 1e6)):
        if nbits >= scale:
            return f"{nbits / scale:.3g} {unit}"
    return f"{nbits:.3g} bit"


def _table(*heads: str, left: int = 2) -> Table:
    """Columns that never wrap (a number is never cut); the first ``left`` left-aligned."""
    t = Table()
    for i, h in enumerate(heads):
        t.add_column(h, no_wrap=True, justify="left" if i < left else "right")
    return t


def _header(result: PlanResult, c: Any) -> None:
    """What was planned: the source, model, schedules, and what the groups do beside computing."""
    inp = result.inputs
    size = f"{inp.model_bytes / 1e9:.3g} GB" if inp.model_bytes >= 1e9 else f"{inp.model_bytes / 1e6:.3g} MB"
    dp = " vs DP (data-parallel: an allreduce every step)" if inp.data_parallel_bytes else ""
    c.print(
        f"ftrun plan · {result.source} · model {size} · R={inp.replicas} · "
        f"step {inp.step_ms:.3g} ms · streaming F={inp.fragments} H={inp.sync_every} "
        f"tau={inp.fragment_sync_delay} vs plain F=1 H={inp.sync_every} tau=0{dp}"
    )
    if inp.overlap_slowdown != 1.0:
        c.print(f"steps between a send and its sync compute {inp.overlap_slowdown:.3g}x as long (overlap slowdown)")
    real = inp.real_collectives
    if real.ms_per_round is not None:
        c.print(
            f"real collectives (the backend's own, under the link's hold): {real.ms_per_round:.3g} ms per round "
            f"on {real.threads} thread(s), {real.how}"
        )
    elif real.how.startswith("not measured"):
        c.print(f"real collectives: {real.how}")
    if inp.step_jitter_ms or inp.lighthouse_rpc_ms or inp.stalls or inp.sync_spread_ms:
        spread = f", {inp.sync_spread_ms:.3g} ms leaving a sync" if inp.sync_spread_ms else ""
        c.print(
            f"groups drift apart: step jitter {inp.step_jitter_ms:.3g} ms per step{spread}, "
            f"{inp.stalls} stall(s); "
            f"lighthouse reply {inp.lighthouse_rpc_ms:.3g} ms on top of the held round trip"
        )


class _Rows:
    """The plan table's columns: with training totals, hours and bytes take the place of the
    split, the mean bandwidth and the smallest tau / F (all in --json)."""

    def __init__(self, result: PlanResult) -> None:
        inp = result.inputs
        self.target, self.fragments = inp.target_util, inp.fragments
        self.totals = inp.train_steps is not None
        totals = self.totals
        self.heads = ["exposed ms/sync"] + ([] if totals else ["data+ctrl"]) + ["exposed ms/step", "util", "peak bw"]
        self.heads += ["hours", "sent/replica", "exchanged/replica"] if totals else ["mean bw"]
        self.per_link = [] if totals else [f"min tau F={inp.fragments}", "min F (tau)"]

    def values(self, p: Figures) -> list[str | Text]:
        row: list[str | Text] = [_ms(p.exposed_ms_per_sync)]
        row += [] if self.totals else [f"{_ms(p.exposed_data_ms_per_sync)}+{_ms(p.exposed_control_ms_per_sync)}"]
        util = styled(_pct(p.compute_utilisation), "green" if p.compute_utilisation >= self.target else "red")
        row += [_ms(p.exposed_ms_per_step), util, bw(p.peak_bandwidth_bps)]
        if self.totals:
            hours = p.train_hours if isinstance(p.train_hours, float) else None
            sent = p.sent_bytes_per_replica if isinstance(p.sent_bytes_per_replica, float) else None
            bits = p.exchanged_bits_per_replica if isinstance(p.exchanged_bits_per_replica, float) else None
            return row + ["-" if hours is None else f"{hours:.3g}", _tb(sent), _tbit(bits)]
        return row + [bw(p.mean_bandwidth_bps)]

    @staticmethod
    def link(cfg: LinkPlan) -> str:
        return f"{bw(cfg.link.bandwidth_bps)}, {cfg.link.latency_s * 1e3:g} ms"

    def mins(self, cfg: LinkPlan) -> list[str]:
        if self.totals:
            return []
        frag = cfg.smallest_fragments
        return [
            "none" if cfg.smallest_fragment_sync_delay is None else str(cfg.smallest_fragment_sync_delay),
            "none" if frag is None else f"{frag.fragments} ({frag.fragment_sync_delay})",
        ]


def _plan_table(result: PlanResult, c: Any) -> Table:
    """A row per link and schedule when that fits the console, else (80 columns, a pipe) a block
    per link, the schedules side by side: numbers are never cut."""
    rows = _Rows(result)
    keys_all = [k for k in LABELS if any(k in cfg.figures() for cfg in result.configs)]
    t = _table("link", "", *rows.heads, *rows.per_link)
    for cfg in result.configs:
        for key, figs in cfg.figures().items():
            first = key == "streaming"
            t.add_row(
                rows.link(cfg) if first else "",
                LABELS[key],
                *rows.values(figs),
                *(rows.mins(cfg) if first else [""] * len(rows.per_link)),
            )
    if fits(c, t):
        return t
    t = _table("link / figure", *(LABELS[k] for k in keys_all), left=1)
    for i, cfg in enumerate(result.configs):
        if i:
            t.add_section()
        t.add_row(styled(rows.link(cfg), "bold"), *[""] * len(keys_all))
        figures = cfg.figures()
        cols = [rows.values(figures[k]) if k in figures else [""] * len(rows.heads) for k in keys_all]
        for j, head in enumerate(rows.heads):
            t.add_row(f"  {head}", *(col[j] for col in cols))
        for head, v in zip(rows.per_link, rows.mins(cfg), strict=True):
            t.add_row(f"  {head}", v, *[""] * (len(keys_all) - 1))
    return t


def print_plan(result: PlanResult, c: Any = None) -> None:
    """The plan: what was planned, the table, where each schedule hides, the recovery."""
    c = c or console()
    _header(result, c)
    c.print(_plan_table(result, c))
    hides, data_hidden = result.hides_from_bps, result.data_hidden_from_bps
    target = f"{result.inputs.target_util * 100:g}%"
    for key in LABELS:
        d = getattr(data_hidden, key)
        if isinstance(d, UnsetType):
            continue
        v = getattr(hides, key)
        where = "on no link up to 1 Tbit/s" if v is None else f"from {bw(v)} up"
        data = "never hides its data (every sync waits for it)" if d is None else f"hides all its data from {bw(d)} up"
        c.print(
            f"{LONG[key]} {data}; keeps compute utilisation >= {target} {where} (latency {hides.latency_s * 1e3:g} ms)"
        )
    print_recovery(result.recovery, c)
    c.print(
        "model: compute per step; at each quorum the slowest group's arrival, the lighthouse's reply and the held "
        "round trip; each fragment's ring allreduce queued on the uplink from the send's start (ftrun.linkcost, as the "
        "emulator); the sync blocks for the rest, then runs its callbacks and sketches. With --from a run: its drift "
        "per lag and its CPU work per send and sync; ftrun plan --check also replays its steps and its real loopback "
        "collectives"
    )
    if isinstance(result.png, str):
        c.print(f"plot: {result.png}")


def _err(run: RunCheck, key: str) -> Any:
    e = getattr(run.error, key)
    text = "-" if e is None else f"{e * 100:+.0f}%"
    return styled(text, "red") if getattr(run.within_tolerance, key) is False else text


def _run_name(r: RunCheck) -> str:
    return r.name + ("" if r.planes == "data+control" else " (data only)")


def _run_link(r: RunCheck) -> str:
    return r.link.description if r.link is not None else "-"


def _rate(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _check_figures(r: RunCheck) -> list[tuple[str, str, str, Any]]:
    """(figure, predicted, measured, error) of one checked run: both layouts show these."""
    p, m = r.predicted, r.measured
    return [
        ("exposed ms/sync", _ms(p.exposed_ms_per_sync), _ms(m.exposed_ms_per_sync), _err(r, "exposed_ms_per_sync")),
        ("data ms/sync", _ms(p.exposed_data_ms_per_sync), _ms(m.exposed_data_ms_per_sync), ""),
        ("control ms/sync", _ms(p.exposed_control_ms_per_sync), _ms(m.exposed_control_ms_per_sync), ""),
        ("steps/s", _rate(p.steps_per_s), _rate(m.steps_per_s), _err(r, "steps_per_s")),
    ]


def _check_table(result: RunsCheck, c: Any) -> Table:
    """A row per run when that fits, else a block per run, a row per figure."""
    t = _table(
        "run",
        "link",
        "exposed ms/sync",
        "measured",
        "error",
        "data (pred/meas)",
        "control (pred/meas)",
        "steps/s",
        "measured",
        "error",
    )
    for r in result.runs:
        exposed, data, control, steps = _check_figures(r)
        t.add_row(
            _run_name(r),
            _run_link(r),
            *exposed[1:],
            f"{data[1]} / {data[2]}",
            f"{control[1]} / {control[2]}",
            *steps[1:],
        )
    if fits(c, t):
        return t
    t = _table("run / figure", "predicted", "measured", "error")
    t.columns[1].justify = "right"
    for i, r in enumerate(result.runs):
        if i:
            t.add_section()
        t.add_row(styled(f"{_run_name(r)} · {_run_link(r)}", "bold"), "", "", "")
        for head, *cells in _check_figures(r):
            t.add_row(f"  {head}", *cells)
    return t


def print_check(result: RunsCheck, c: Any = None) -> None:
    """Predicted against measured, a row per run when that fits, else a block per run."""
    c = c or console()
    c.print(_check_table(result, c))
    c.print(
        f"tolerance {result.tolerance * 100:g}% (exposed time: or {result.exposed_floor_ms:g} ms); "
        "measured = what the compare/sweep reported; predicted from each run's manifest and event logs on its link"
    )
    if result.outside_tolerance:
        c.print(line(("FAIL", "bold red"), " outside tolerance: " + ", ".join(result.outside_tolerance)))
    elif result.verdict == "not checked":
        c.print(line(("NOT CHECKED", "bold yellow"), " no run reported a measured figure to compare with"))
    else:
        c.print(line(("PASS", "bold green"), " every measured prediction within tolerance"))
    if result.not_checked and result.verdict != "not checked":
        c.print(f"not checked: {', '.join(result.not_checked)} (no measured exposed time or steps/s)")


def draw_utilisation(result: PlanResult, path: Path) -> Path:
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


TITLE_CHARS = 100  # characters of a 9-point title across the 8-inch figure, with its margins


def utilisation_figure(result: PlanResult) -> Figure:
    """``draw_utilisation``'s figure (the caller closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    inp = result.inputs
    xs = [c.link.bandwidth_bps for c in result.configs]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for key, label, colour in (
        ("streaming", f"streaming F={inp.fragments} tau={inp.fragment_sync_delay}", "#1f77b4"),
        ("plain", "plain DiLoCo F=1 tau=0", "#d62728"),
    ):
        ys = [c.figures()[key].compute_utilisation for c in result.configs]
        ax.plot(xs, ys, marker="o", color=colour, label=label)
        for at, style, text, y in (
            (getattr(result.hides_from_bps, key), ":", "reaches target from", inp.target_util),
            (getattr(result.data_hidden_from_bps, key), "-.", "hides all data from", 0.05),
        ):
            if isinstance(at, float) and min(xs) <= at <= max(xs):
                ax.axvline(at, color=colour, linestyle=style, linewidth=1)
                ax.annotate(
                    f"{text} {bw(at)}",
                    (at, y),
                    textcoords="offset points",
                    xytext=(4, -14 if y > 0.5 else 4),
                    color=colour,
                    fontsize=8,
                )
    ax.axhline(inp.target_util, color="grey", linestyle="--", linewidth=1, label=f"target {inp.target_util * 100:g}%")
    ax.set_xscale("log")
    ax.set_xlabel("bandwidth per replica (bit/s)")
    ax.set_ylabel("compute utilisation (predicted)")
    ax.set_ylim(0, 1.02)
    title = (
        f"{result.source} · R={inp.replicas} H={inp.sync_every} · latency {result.hides_from_bps.latency_s * 1e3:g} ms"
    )
    # wrapped to the figure's width (a long source, e.g. a run dir's path, was clipped on both sides)
    ax.set_title(textwrap.fill(title, TITLE_CHARS, break_long_words=True, break_on_hyphens=False), fontsize=9)
    # under the axes, not in them: the marks' labels sit anywhere along both edges of the plot
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, frameon=False)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


RECOVERY_ROWS = ("detect", "relaunch", "join", "reconfigure", "heal", "catch_up", "total")


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def print_recovery_check(result: RecoveryCheck, c: Any = None) -> None:
    """``--check RUN_DIR`` of a kill run: a block per fault, a row per phase (each its own interval)."""
    c = c or console()
    t = _table("fault / phase", "predicted s", "measured s", "error", "how", left=1)
    t.columns[4].justify = "left"
    t.columns[4].no_wrap = False
    link = result.link.describe if result.link is not None else "no emulated link"
    for i, r in enumerate(result.recovery):
        if i:
            t.add_section()
        t.add_row(styled(f"{r.fault} · replica {r.replica} · {link}", "bold"), "", "", "", "")
        for k in RECOVERY_ROWS:
            p, m, e, ok = r.predicted.get(k), r.measured.get(k), r.error.get(k), r.within_tolerance.get(k)
            err = "-" if e is None or ok is None else f"{e * 100:+.0f}%"
            how = "relaunch + join + reconfigure (measured) + heal + catch-up" if k == "total" else r.how.get(k, "")
            t.add_row(f"  {k}", _s(p), _s(m), styled(err, "red") if ok is False else err, how)
        hb = r.heal_bytes
        t.add_row(
            "  heal bytes",
            f"{hb.predicted:,}",
            "-" if hb.measured is None else f"{hb.measured:,}",
            "",
            "model + AdamW moments and steps + DiLoCo's global copy + outer momentum (torchft's HTTP transport)",
        )
    c.print(t)
    c.print(
        f"tolerance {result.tolerance * 100:g}% or {result.floor_s:g} s per phase (each phase's own interval, "
        "ftrun.check.recovery); relaunch, join and reconfigure are this run's own measurements, not predictions"
    )
    if result.outside_tolerance:
        c.print(line(("FAIL", "bold red"), " outside tolerance: " + ", ".join(result.outside_tolerance)))
    elif result.verdict == "not checked":
        c.print(line(("NOT CHECKED", "bold yellow"), " no predicted phase of any fault was measured"))
    else:
        c.print(line(("PASS", "bold green"), " every predicted phase within tolerance"))


def print_recovery(rec: RecoveryPlan, c: Any) -> None:
    """The predicted recovery of one killed group, a row per link (``ftrun.plan.recovery``)."""
    if not rec.links:
        return
    t = _table(
        "recovery of one killed group",
        "detect s",
        "heal s",
        "catch-up s",
        "relaunch+join+reconfigure s",
        "total s",
        left=1,
    )
    rows = []
    for r in rec.links:
        ph = r.phases
        given = [x for k in ("relaunch", "join", "reconfigure") if (x := ph[k]) is not None]
        rows.append(
            (
                r.link,
                _s(ph["detect"]),
                _s(ph["heal"]),
                _s(ph["catch_up"]),
                "not predicted" if len(given) < 3 else f"{sum(given):.2f} (measured)",
                _s(r.total_s),
            )
        )
        t.add_row(*rows[-1])
    if not fits(c, t):  # stacked: a block per link, a row per phase
        t = _table("recovery · link / phase", "seconds", left=1)
        for i, row in enumerate(rows):
            if i:
                t.add_section()
            t.add_row(styled(row[0], "bold"), "")
            for head, v in zip(("detect", "heal", "catch-up", "relaunch+join+reconf.", "total"), row[1:], strict=True):
                t.add_row(f"  {head}", v)
    c.print(t)
    src = (
        f"relaunch, join and reconfigure measured in {rec.measured_from}"
        if rec.measured_from
        else (
            "relaunch, join and reconfigure not predicted "
            "(a process start and torchft's rendezvous: give --from a kill run)"
        )
    )
    c.print(
        f"recovery: heal = {_tb(rec.state_bytes)} of float32 model + AdamW + DiLoCo state (what torchft's HTTP "
        f"checkpoint transport sends) over the link; detect = the {rec.heartbeat_timeout_s:g} s heartbeat timeout + "
        f"half a lighthouse tick + the held round trip; {src}"
    )
