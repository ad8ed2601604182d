"""Render a compare result: a rich table (terminal) and report.md (same rows)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from msgspec import UnsetType
from rich.table import Table

from ftrun.check.noise import (
    MAX_REPEATS,
    NO_DIFFERENCE,
    REPEAT_RULE,
    Measured,
    quadrature,
    ratio,
    repeats_needed,
    says,
)
from ftrun.check.throughput import (
    EXPLAINED_WITHIN,
    TERM_LABELS,
    TERMS,
    explained_ratio,
    largest_reason,
    machine_clause,
    per_step,
    per_step_difference,
    per_step_ms,
    slowdown_measured,
)
from ftrun.console import console as make_console, line, styled
from ftrun.layout import CompareReport, CompareRun, ExpectHidden, Explanation, RunRecovery, Told
from ftrun.output import atomic_write
from ftrun.report.goodput_view import goodput_line
from ftrun.report.numerics_view import numerics_cell
from ftrun.schedule import label as schedule_label
from ftrun.torchft_compat import describe_versions

T = TypeVar("T")


def _f(fmt: str) -> Callable[[Any], str]:
    return lambda v: "-" if v is None else format(v, fmt)


def _mb(v: Any) -> str:
    return "-" if not v else f"{v / 1e6:.2f} MB"


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v * 100:.0f}%"


def pct_against(observed: float, threshold: float) -> str:
    """``observed`` as a percentage with just enough digits to show on which side of
    ``threshold`` it lies (98.5% against 99%, never a rounded "99%" that fails)."""
    t = threshold * 100
    for d in range(0, 7):
        shown = float(f"{observed * 100:.{d}f}")
        edge = shown in (0.0, 100.0) and observed not in (0.0, 1.0)  # never "100%" for 99.5%
        if (shown < t) == (observed < threshold) and not edge:
            return f"{observed * 100:.{d}f}%"
    return f"{observed * 100!r}%"


def _list(fmt: str) -> Callable[[Any], str]:
    return lambda v: " / ".join("-" if x is None else format(x, fmt) for x in (v or []))


ROWS: list[tuple[str, str, Callable[[Any], str] | None]] = [
    ("schedule verdict", "verdict", lambda v: str(v).upper()),
    ("schedule (F, H, tau)", "schedule", lambda v: "-" if v is None else schedule_label(v)),
    ("numerics (every sync)", "numerics", numerics_cell),
    ("steps/s (mean)", "steps_per_s", _f(".2f")),
    ("steps/s per replica", "steps_per_s_per_replica", _list(".2f")),
    ("tokens/s per replica", "tokens_per_s_per_replica", _list(",.0f")),
    ("wall time", "wall_s", lambda v: "-" if v is None else f"{v:.1f} s"),
    ("syncs / commits", "syncs", None),
    ("exposed data comm (run, per replica)", "exposed_comm_s", lambda v: f"{v:.2f} s"),
    ("exposed control (quorum, commit)", "exposed_control_s", lambda v: "-" if v is None else f"{v:.2f} s"),
    ("exposed data per sync", "per_sync_exposed_ms", lambda v: "-" if v is None else f"{v:.1f} ms"),
    ("exposed control per sync", "per_sync_exposed_control_ms", lambda v: "-" if v is None else f"{v:.1f} ms"),
    ("compute utilisation", "compute_utilisation", lambda v: "-" if v is None else f"{v * 100:.0f}%"),
    ("median compute step", "median_step_s", lambda v: "-" if v is None else f"{v * 1e3:.1f} ms"),
    ("compute step, comm in flight", "median_overlapped_step_s", lambda v: "-" if v is None else f"{v * 1e3:.1f} ms"),
    ("overlap slowdown (in flight / not)", "overlap_slowdown", lambda v: "-" if v is None else f"{v:.2f}x"),
    ("compute lost to overlap", "overlap_lost_s", lambda v: "-" if v is None else f"{v:.2f} s"),
    ("hidden share of comm (profiled)", "hidden_comm_share", _pct),
    ("peak bytes in one sync", "peak_sync_bytes", _mb),
    ("total bytes sent (per replica)", "total_bytes", _mb),
    ("final loss", "final_loss", _f(".4f")),
    (
        "loss at equal steps",
        "loss_at_steps",
        lambda d: ", ".join(f"{k}: {v:.3f}" for k, v in d.items() if v is not None),
    ),
]


# Rows whose figure is a difference against "no difference" (``ftrun.check.noise``): the key of its
# spread in the run's decomposition, and the figure meaning no difference.
MEASURED_ROWS = {
    "overlap_slowdown": ("overlap_slowdown_spread", 1.0),
    "overlap_lost_s": ("overlap_slowdown_s_spread", 0.0),
}
# Decomposition rows that are a difference against the base: said only beyond their spread.
_COST_TERMS = ("overlap_slowdown_s", "comm_step_work_s")


def _ms_cell(v: float) -> str:
    return f"{v:.1f}".replace("-0.0", "0.0")


def decomposition_rows(result: CompareReport) -> list[list[str]]:
    """The loop time per step, split into its terms (``ftrun.check.throughput``), for every run;
    the last row: the named terms' total against the measured loop time. A term against the base
    within its spread reads "no difference measured", one below it "none (... less)"."""
    parts = [r.decomposition or {} for r in result.runs]
    out = []
    for key in (*TERMS, "unaccounted_s", "loop_s"):
        label = "loop time" if key == "loop_s" else TERM_LABELS[key]
        if key in _COST_TERMS:
            cells = [says(per_step(d, key), _ms_cell, cost=True) for d in parts]
        else:
            cells = ["-" if (v := per_step_ms(d, key)) is None else _ms_cell(v) for d in parts]
        out.append([f"{label} (ms/step)", *cells])
    return out


def _step_ms(sps: float) -> float:
    return 1e3 / sps


def tells(a: CompareRun, b: CompareRun) -> Told:
    """Whether ``a`` and ``b``'s throughputs differ beyond the runs' spread (``Told``); both
    measured ``steps_per_s``."""
    assert a.steps_per_s and b.steps_per_s  # (the callers': both measured)
    ratio = a.steps_per_s / b.steps_per_s
    diff = _step_ms(a.steps_per_s) - _step_ms(b.steps_per_s)
    n = min(a.repeats, b.repeats)
    sa, sb = a.spread.get("steps_per_s"), b.spread.get("steps_per_s")
    if n >= 2 and sa and sb and min(sa + sb) > 0:
        told = sa[0] > sb[1] or sb[0] > sa[1]
        spread: float | None = max(_step_ms(x[0]) - _step_ms(x[1]) for x in (sa, sb)) / 2
    else:
        told = False
        da, db = a.decomposition or {}, b.decomposition or {}
        machine = per_step_difference(da, db, "compute_at_base_s")
        within = [per_step(d, "loop_s") for d in (da, db)]
        spread = quadrature([abs(machine.value) if machine else None, *(m.spread if m else None for m in within)])
    need = repeats_needed(diff, spread) if spread is not None else None
    return Told(n, told, ratio, diff, spread, need if not told else None)


def _repeat_advice(t: Told) -> str:
    if t.spread_ms is None:
        return "--repeat 3 would measure it"
    against = f"a {abs(t.difference_ms):.1f} ms/step difference from a run-to-run spread of {t.spread_ms:.1f} ms/step"
    if t.repeats_needed is None:
        return f"more than --repeat {MAX_REPEATS} would be needed to tell {against} ({REPEAT_RULE})"
    return f"--repeat {t.repeats_needed} would tell {against} ({REPEAT_RULE})"


def explanation(runs: list[CompareRun]) -> Explanation | None:
    """The measured throughput ratio of the first run over the second, the ratio its named terms
    predict, whether they agree within ``EXPLAINED_WITHIN``, the largest reason, whether the runs'
    spread tells the two apart (``Told``), and the machine caveat (either way)."""
    a, b = runs[0], runs[1]
    da, db = a.decomposition, b.decomposition
    if not da or not db or not a.steps_per_s or not b.steps_per_s:
        return None
    measured = a.steps_per_s / b.steps_per_s
    predicted = explained_ratio(da, db)
    return Explanation(
        measured_ratio=measured,
        explained_ratio=predicted,
        explained=predicted is not None and abs(predicted / measured - 1) <= EXPLAINED_WITHIN,
        within=EXPLAINED_WITHIN,
        reason=largest_reason(a.name, da, b.name, db, a.backend),
        machine=machine_clause(a.name, da, b.name, db),
        names=[a.name, b.name],
        told=tells(a, b),
    )


def explanation_line(exp: Explanation | None) -> str:
    """compare's one-line answer: which run is faster and why, only when the runs' spread tells
    them apart; with one run each, that one run cannot tell and what ``--repeat`` would; the
    machine caveat either way."""
    if not exp:
        return "throughput not decomposed: a run has no plain step to measure its unoverlapped speed from"
    t = exp.told
    machine = f" Caveat: {exp.machine}." if exp.machine else ""  # a run's name keeps its case
    if t is not None and not t.told:
        if t.repeats < 2:
            return (
                f"throughput {t.ratio:.2f}x from one run each: one run cannot tell which is faster or why "
                f"(the spread between runs is not measured; estimated from the two runs' unoverlapped compute "
                f"and per-step spread, {_repeat_advice(t)}).{machine}"
            )
        return (
            f"throughput {t.ratio:.2f}x, within the spread of {t.repeats} runs each: {NO_DIFFERENCE}"
            + (f" ({_repeat_advice(t)})" if t.difference_ms else "")
            + f".{machine}"
        )
    head = f"throughput {exp.measured_ratio:.2f}x"
    if t is not None:  # a result written before the spread was recorded claims no winner
        names = exp.names
        faster = names[0] if exp.measured_ratio > 1 else names[1]
        head = f"{faster} is faster: {head}, beyond the spread of {t.repeats} runs each"
    if exp.explained_ratio is None:
        return f"{head}; the terms could not be measured for both runs.{machine}"
    verdict = "explain it" if exp.explained else f"do NOT explain it within {exp.within * 100:.0f}% (see unaccounted)"
    text = f"{head}; the named terms give {exp.explained_ratio:.2f}x and {verdict}"
    return text + (f". {exp.reason}." if exp.reason else f".{machine}")


def _recovery(r: RunRecovery | None) -> str:
    if not r:
        return "-"
    back = ", ".join("never" if x is None else f"{x:.1f} s" for x in r.recovered_s)
    big = ", ".join(f"{p} {s:.1f} s" for p, s in r.largest_phase if p is not None and s is not None)
    return (
        f"{'; '.join(r.faults)} · restarts {r.restarts} · heals {r.heals} · "
        f"commits lost {r.commits_lost} · back in quorum after {back}" + (f" · largest phase {big}" if big else "")
    )


def _num(v: Any) -> str:
    """A per-replica mean: an integer when all replicas agree, else one decimal."""
    return "-" if v is None else f"{v:g}" if float(v).is_integer() else f"{v:.1f}"


RECOVERY_ROW = ("faults and recovery", "recovery", _recovery)


def rows(result: CompareReport) -> list[list[str]]:
    out = []
    runs = result.runs
    with_faults = any(r.recovery for r in runs)
    for label, key, fmt in ROWS + ([RECOVERY_ROW] if with_faults else []):
        if key == "syncs":
            out.append([label] + [f"{_num(r.syncs)} / {_num(r.commits)}" for r in runs])
        elif key in MEASURED_ROWS and fmt is not None:
            out.append([label] + [_said(fmt, r, key) for r in runs])
        elif fmt is not None:
            out.append([label] + [_with_spread(fmt, r, key) for r in runs])
    return out


def _with_spread(fmt: Callable[[Any], str], run: CompareRun, key: str) -> str:
    """The value; with --repeat, the median followed by the [min, max] over the repeats."""
    text = fmt(getattr(run, key))
    spread = run.spread.get(key)
    return f"{text} ({fmt(spread[0])} to {fmt(spread[1])})" if spread else text


def _said(fmt: Callable[[Any], str], run: CompareRun, key: str) -> str:
    """A ``MEASURED_ROWS`` figure: said only beyond its spread (``noise.says``), then --repeat's range."""
    spread_key, null = MEASURED_ROWS[key]
    v, d = getattr(run, key), run.decomposition or {}
    m = None if v is None else Measured(v, d.get(spread_key))
    if key == "overlap_slowdown" and m is not None:  # the median, only where the means agree
        m = slowdown_measured({**d, "overlap_slowdown": v})
    text = says(m, fmt, null=null, cost=True)
    spread = run.spread.get(key)
    return f"{text} ({fmt(spread[0])} to {fmt(spread[1])})" if spread else text


def _given(v: T | UnsetType) -> T | None:
    """A field absent by meaning (``UNSET``) as None."""
    return None if isinstance(v, UnsetType) else v


def link_line(result: CompareReport) -> str:
    link = result.link
    kind = "emulated" if link.emulated else "not emulated"
    text = f"link: {link.describe} ({kind}; {link.chosen})"
    calibrated = _given(link.calibrated_step_s)
    if calibrated is not None:
        text += f"; calibrated step {calibrated * 1e3:.1f} ms ({_given(link.calibration) or ''})"
        again = _given(link.recalibrated_from)
        if again:
            text += (
                f"; recalibrated on {again.run}'s measured step {again.measured_step_s * 1e3:.1f} ms "
                f"(first link {again.link}, {again.run} trained again)"
            )
        step = _given(link.link_step_s) or calibrated
        share, sync_s = _given(link.plain_sync_share_of_h), _given(link.plain_sync_s)
        if share is not None and sync_s is not None:
            text += (
                f"; plain DiLoCo's sync {sync_s * 1e3:.0f} ms: asked for {share:.2f} of H steps of {step * 1e3:.1f} ms"
            )
        measured = _given(link.measured_median_step_s) or {}
        shares = _given(link.plain_sync_share_of_measured_h) or {}
        got = [
            f"{v:.2f}" + (" of H measured steps" if i == 0 else "") + f" ({k} {m * 1e3:.1f} ms)"
            for i, (k, v) in enumerate(shares.items())
            if (m := measured.get(k)) is not None
        ]
        if got:
            text += "; achieved: " + ", ".join(got)
    return text


def versions_line(result: CompareReport) -> str | None:
    """``ran on torchft 0.2.0 (process groups: configure), torch 2.13.0`` — per configuration
    when they differ; None when no run recorded it."""
    ran = {name: describe_versions(v) for name, v in result.versions.items()}
    known = {d for d in ran.values() if d}
    if not known:
        return None
    if len(set(ran.values())) == 1:
        return f"ran on {known.pop()}"
    return "ran on " + "; ".join(f"{n}: {d or 'not recorded'}" for n, d in ran.items())


def print_report(result: CompareReport) -> None:
    console = make_console()
    reps = max((r.repeats for r in result.runs), default=1)
    title = f"ftrun compare · {result.compare_dir}" + (
        f" · median (min to max) of {reps} runs each" if reps > 1 else ""
    )
    t = Table(title=title, title_justify="left")
    t.add_column("", no_wrap=True)  # labels whole; values wrap (fits 80 columns)
    for r in result.runs:
        t.add_column(r.name, justify="right")
    for row in rows(result):
        t.add_row(*row)
    console.print(t)
    d = Table(title="where the loop time went (per step, mean over replicas)", title_justify="left")
    d.add_column("", no_wrap=True)
    for r in result.runs:
        d.add_column(r.name, justify="right")
    for row in decomposition_rows(result):
        d.add_row(*row)
    console.print(d)
    console.print(link_line(result))
    if ran := versions_line(result):
        console.print(ran)
    console.print(result.conclusion)
    console.print(explanation_line(result.throughput))
    if result.goodput:
        console.print(goodput_line(result.goodput))
    for r in result.runs:
        for p in r.problems:
            console.print(line((f"{r.name}:", "red"), f" {p}"))
    exp = _given(result.expect_hidden)
    if exp:
        console.print(styled(expect_hidden_line(exp), "green" if exp.ok else "red"))
    console.print(f"timeline: {result.timeline}")
    colour = "green" if result.verdict == "pass" else "red"
    console.print(styled(result.verdict.upper(), f"bold {colour}"))


def expect_hidden_line(exp: ExpectHidden) -> str:
    """``--expect-hidden``'s verdict, from the exact share (``exp.observed``)."""
    head = f"--expect-hidden {exp.min:g}: {exp.run or 'the first run'} hid "
    if exp.observed is None:
        return head.replace(" hid ", "") + "no hidden share measured: FAIL"
    got = pct_against(exp.observed, exp.min)
    return (
        head
        + f"{got} of its communication, {'at least' if exp.ok else 'below'} {exp.min * 100:g}%: "
        + ("ok" if exp.ok else "FAIL")
    )


def write_markdown(result: CompareReport, path: Path, overwrite: bool = False) -> None:
    names = [r.name for r in result.runs]
    ran = versions_line(result)
    lines = [
        f"# ftrun compare: {' vs '.join(names)}",
        "",
        link_line(result),
        *(["", ran] if ran else []),
        "",
        "| | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows(result)]
    lines += [
        "",
        "Where the loop time went (per step, mean over replicas):",
        "",
        "| | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in decomposition_rows(result)]
    lines += ["", result.conclusion, "", explanation_line(result.throughput), ""]
    if result.goodput:
        lines += [goodput_line(result.goodput), ""]
    if exp := _given(result.expect_hidden):
        lines += [expect_hidden_line(exp), ""]
    lines += [f"Verdict: **{result.verdict}**", "", "![timeline](timeline.png)", ""]
    atomic_write(path, "\n".join(lines), "compare", overwrite)  # never onto a user's report.md (ftrun.output)


def throughput_claim(a: CompareRun, b: CompareRun) -> str:
    """The throughput clause: a difference is claimed only when the ranges over repeats do not
    overlap (``tells``); with one run each, only that: the one-line answer after it
    (``explanation_line``, printed wherever this is) says that one run cannot tell and what
    ``--repeat`` would, once."""
    t = tells(a, b)
    if t.repeats < 2:
        return f"throughput {t.ratio:.2f}x from one run each"
    if t.told:
        return f"throughput {t.ratio:.2f}x, beyond the spread of {t.repeats} runs each"
    sa, sb = a.spread["steps_per_s"], b.spread["steps_per_s"]
    return (
        f"throughput {t.ratio:.2f}x is within the spread of {t.repeats} runs each "
        f"({a.name} {sa[0]:.2f}-{sa[1]:.2f}, {b.name} {sb[0]:.2f}-{sb[1]:.2f} steps/s): {NO_DIFFERENCE}"
    )


def _exposed_spread(run: CompareRun) -> float | None:
    """The spread of a run's exposed data + control (s), from its decomposition (None: not measured)."""
    d = run.decomposition or {}
    return quadrature([d.get("exposed_data_s_spread"), d.get("exposed_control_s_spread")])


def conclusion(runs: list[CompareRun]) -> str:
    parts = []
    for r in runs:
        share = r.hidden_comm_share
        text = f"{r.name} hid {share * 100:.0f}% of its data communication and " if share is not None else f"{r.name} "
        text += f"exposed {r.exposed_comm_s:.2f} s of data"
        if r.exposed_control_s is not None:
            text += f" and {r.exposed_control_s:.2f} s of control"
        if r.per_sync_exposed_ms is not None:
            text += f" ({r.per_sync_exposed_ms:.0f}"
            text += (
                f" + {r.per_sync_exposed_control_ms:.0f} ms per sync)"
                if r.per_sync_exposed_control_ms is not None
                else " ms per sync)"
            )
        if r.compute_utilisation is not None:
            text += f", computing {r.compute_utilisation * 100:.0f}% of its loop time"
        parts.append(text)
    a, b = runs
    text = "; ".join(parts) + "."
    ta = a.exposed_comm_s + (a.exposed_control_s or 0.0)
    tb = b.exposed_comm_s + (b.exposed_control_s or 0.0)
    if ta and tb:
        exposed = ratio(Measured(ta, _exposed_spread(a)), Measured(tb, _exposed_spread(b)))
        pct = f"{ta / tb * 100:.0f}%"
        if exposed is not None and says(exposed, str, null=1.0) == NO_DIFFERENCE:
            text += (
                f" {a.name}'s exposed communication (data + control) against {b.name}'s: {NO_DIFFERENCE} "
                f"({pct}, within its spread)"
            )
        else:
            text += f" {a.name}'s exposed communication (data + control) is {pct} of {b.name}'s"
        if a.peak_sync_bytes and b.peak_sync_bytes:
            text += f"; its peak bytes per sync are {a.peak_sync_bytes / b.peak_sync_bytes:.2f}x"
        if a.steps_per_s and b.steps_per_s:
            text += "; " + throughput_claim(a, b)
        text += "."
    return text
