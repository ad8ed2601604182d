"""``ftrun compare``: train streaming vs baseline once on an emulated link, then check everything.

The training compare runs ONCE per module (fixture ``trained``, ~35 s on 2 cores); every other
test re-reads its output or runs compare in read mode on its two run dirs (a few seconds).
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest

from ftrun import layout
from train_fixtures import FTRUN, TIMELINE_WIDTH_PX as WIDTH_PX, png_size

pytestmark = pytest.mark.e2e  # trains, or runs `ftrun compare` in a child

STEPS = 40
H = 20  # both presets
LINK = "50mbit,5ms"  # slow enough that baseline's full-model sync is clearly exposed (~77 ms each)
BW, LAT = 50e6, 0.005
MODEL = ["--width", "64", "--batch-size", "8", "--seq-len", "32"]  # bigger than SMALL: syncs worth hiding
NAMES = ["streaming", "baseline"]
RUN_FIELDS = {
    "name": str,
    "verdict": str,
    "steps_per_s": float,
    "wall_s": float,
    "syncs": (int, float),
    "commits": (int, float),
    "exposed_comm_s": float,
    "hidden_comm_share": float,
    "peak_sync_bytes": int,
    "total_bytes": (int, float),
    "final_loss": float,
    "exposed_data_s": float,
    "exposed_control_s": float,
    "compute_utilisation": float,
    "median_step_s": float,
}


def ftrun(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*FTRUN, *args], capture_output=True, text=True, timeout=timeout)


class Compared:
    def __init__(self, proc: subprocess.CompletedProcess, out: Path) -> None:
        self.proc = proc
        self.out = out
        self.dir = out / "c"
        self.result = json.loads(proc.stdout)
        self.report = json.loads((self.dir / "report.json").read_text())
        self.runs = {r["name"]: r for r in self.report["runs"]}

    def run_dir(self, name: str) -> Path:
        return self.dir / name

    def manifest(self, name: str) -> dict:
        return json.loads((self.run_dir(name) / layout.MANIFEST).read_text())


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Compared:
    out = tmp_path_factory.mktemp("compare")
    proc = ftrun(
        "compare",
        *NAMES,
        "--steps",
        str(STEPS),
        *MODEL,
        "--link",
        LINK,
        "--out",
        str(out),
        "--name",
        "c",
        "--json",
        timeout=480,
    )
    if proc.returncode != 0:
        pytest.fail(f"ftrun compare exited {proc.returncode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return Compared(proc, out)


def read_compare(trained: Compared, tmp_path: Path, *extra: str, runs: tuple[str, ...] = tuple(NAMES)):
    proc = ftrun("compare", *(str(trained.run_dir(n)) for n in runs), "--out", str(tmp_path), "--json", *extra)
    return proc


def one_line_error(proc: subprocess.CompletedProcess, code: int = 2) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error:")
    return lines[0]


# --- the training compare ------------------------------------------------------------------


def resolved(d: dict, base: Path) -> dict:
    """``d`` with every run's run dirs absolute: report.json records them relative to its own dir
    (``base``), what compare prints keeps them as given."""

    def one(p: str) -> str:
        return str((base / p).resolve())

    runs = []
    for r in d["runs"]:
        r = dict(r)
        if isinstance(r.get("run_dir"), str):
            r["run_dir"] = one(r["run_dir"])
        if isinstance(r.get("run_dirs"), list):
            r["run_dirs"] = [one(x) for x in r["run_dirs"]]
        if isinstance(r.get("repeat_runs"), list):
            r["repeat_runs"] = [{**x, "run_dir": one(x["run_dir"])} for x in r["repeat_runs"]]
        runs.append(r)
    return {**d, "runs": runs}


def test_exit_code_and_json(trained: Compared) -> None:
    assert trained.proc.returncode == 0
    got, recorded = resolved(trained.result, trained.dir), resolved(trained.report, trained.dir)
    assert got == recorded, "--json printed something other than report.json"
    assert trained.report["verdict"] == "pass"
    assert Path(trained.report["compare_dir"]) == trained.dir
    for f in ("report.json", "report.md", "timeline.png"):
        assert (trained.dir / f).is_file(), f
    for n in NAMES:
        assert (trained.run_dir(n) / layout.MANIFEST).is_file()


def test_runs_in_command_line_order_with_every_field(trained: Compared) -> None:
    runs = trained.report["runs"]
    assert [r["name"] for r in runs] == NAMES
    for r in runs:
        for key, typ in RUN_FIELDS.items():
            assert key in r, f"{r['name']}: no {key}"
            assert isinstance(r[key], typ) and not isinstance(r[key], bool), (r["name"], key, r[key])
        assert 0.0 <= r["hidden_comm_share"] <= 1.0
        assert r["steps_per_s"] > 0 and r["wall_s"] > 0
        assert r["exposed_comm_s"] >= 0
        assert math.isfinite(r["final_loss"]) and r["final_loss"] < math.log(256), "did not learn at all"
        assert (trained.dir / r["run_dir"]).resolve() == trained.run_dir(r["name"]).resolve()


def test_both_schedules_pass(trained: Compared) -> None:
    for r in trained.report["runs"]:
        assert r["verdict"] == "pass", (r["name"], r["problems"])
        assert r["problems"] == []
    s, b = trained.runs["streaming"]["schedule"], trained.runs["baseline"]["schedule"]
    assert (s["fragments"], s["sync_every"], s["fragment_sync_delay"]) == (2, H, 5)
    assert (b["fragments"], b["sync_every"], b["fragment_sync_delay"]) == (1, H, 0)


def test_link_recorded(trained: Compared) -> None:
    link = trained.report["link"]
    assert link["emulated"] is True
    assert link["bandwidth_bps"] == pytest.approx(BW)
    assert link["latency_s"] == pytest.approx(LAT)
    assert link["chosen"] == "by --link"
    for n in NAMES:  # both trainings really ran on that link
        ml = trained.manifest(n)["link"]
        assert ml["emulated"] is True
        assert ml["bandwidth_bps"] == pytest.approx(BW) and ml["latency_s"] == pytest.approx(LAT)


def test_syncs_and_commits(trained: Compared) -> None:
    # streaming: some fragment every H/F = 10 steps; baseline: the whole model every H = 20.
    assert trained.runs["streaming"]["syncs"] == STEPS // (H // 2)
    assert trained.runs["baseline"]["syncs"] == STEPS // H
    for r in trained.report["runs"]:
        assert r["commits"] == r["syncs"], r["name"]


def test_streaming_exposes_less_communication(trained: Compared) -> None:
    s, b = trained.runs["streaming"], trained.runs["baseline"]
    assert s["exposed_comm_s"] < 0.75 * b["exposed_comm_s"], (s["exposed_comm_s"], b["exposed_comm_s"])
    # plain DiLoCo (tau = 0) waits right after its send: it hides only what the send's own issuing
    # overlapped (issue 40 item 8: the numeric check's wait before perform_sync is exposed too;
    # 0.16 seen here, the send's issuing slows with the host's load)
    assert 0.0 < s["hidden_comm_share"] <= 1.0 and 0.0 < b["hidden_comm_share"] < min(0.5, s["hidden_comm_share"])
    assert b["per_sync_exposed_ms"] >= LAT * 1e3  # at least the last collective's latency is waited out
    # "is N% of baseline's" beyond the two runs' spread, else "no difference measured" (ftrun.check.noise)
    said = trained.report["conclusion"]
    assert "exposed communication (data + control) is" in said or (
        "exposed communication (data + control) against baseline's: no difference measured" in said
    ), said


def test_link_hold_is_in_effect(trained: Compared) -> None:
    """In the traces, every profiled send->done spans at least the link's hold for its payload.

    (Exposed time may be less than the hold: the link drains while later per-parameter
    allreduces are still being issued. But nothing completes before the link carried it all.)
    """
    model_bytes = sum(f["bytes"] for f in trained.manifest("baseline")["fragments"])
    frag_bytes = [f["bytes"] for f in trained.manifest("streaming")["fragments"]]
    hold_ms = lambda n: (2 * LAT + n * 8 / BW) * 1e3  # noqa: E731  ring allreduce across R=2 (ftrun.linkcost)
    for name, least in (("baseline", hold_ms(model_bytes)), ("streaming", hold_ms(min(frag_bytes)))):
        r = trained.runs[name]
        assert r["profiled_syncs"] >= 1, name
        per_sync = r["profiled_comm_ms"] / r["profiled_syncs"]
        assert per_sync >= least - 0.5, (name, per_sync, least)  # 0.5 ms: trace timestamp rounding


def test_a_send_and_its_sync_in_one_step_hold_the_real_collective(trained: Compared) -> None:
    """In the baseline (tau = 0) send and sync run back to back in one step, and the sync's wait
    ends after the send's collectives really completed (their completion sets what it waits on):
    the event log's ``real_s`` fits inside ``send_s + sync_s``. When the numeric check's sketch of
    the send ran outside ``send_s`` it did not (46.3 against 7.9 + 11.1 ms), and ``ftrun plan``,
    which starts the sync's wait at ``send_s``, over-predicted that wait by the sketch's time."""
    run = trained.run_dir("baseline")
    assert trained.manifest("baseline")["schedule"]["fragment_sync_delay"] == 0
    checked = 0
    for r in range(2):
        for line in layout.event_log(run, r, 0).read_text().splitlines():
            x = json.loads(line)
            if x.get("real_s") is not None and x.get("sent") is not None:
                assert x["real_s"] <= x["send_s"] + x["sync_s"] + 1e-4, (r, x["step"], x)
                checked += 1
    assert checked >= 2


def test_plan_check_predicts_the_compare(trained: Compared) -> None:
    """``ftrun plan --check``: measured is exactly what compare reported; the model's data plane
    for baseline (dominated by the emulated hold) lands near what was measured."""
    proc = ftrun("plan", "--check", str(trained.dir), "--json")
    assert proc.returncode in (0, 1), proc.stderr  # 1 = some error beyond tolerance (a loaded machine)
    got = {r["name"]: r for r in json.loads(proc.stdout)["runs"]}
    report = {r["name"]: r for r in json.loads((trained.dir / "report.json").read_text())["runs"]}
    for name in NAMES:
        m, r = got[name]["measured"], report[name]
        assert m["exposed_data_ms_per_sync"] == r["per_sync_exposed_ms"] and m["steps_per_s"] == r["steps_per_s"]
        assert m["exposed_control_ms_per_sync"] == r["per_sync_exposed_control_ms"]
    base = got["baseline"]
    assert base["predicted"]["exposed_data_ms_per_sync"] == pytest.approx(
        base["measured"]["exposed_data_ms_per_sync"], rel=0.5
    )
    assert got["streaming"]["predicted"]["exposed_data_ms_per_sync"] < base["predicted"]["exposed_data_ms_per_sync"]
    # every send's real collectives are timed in the event logs (``real_s``), not only the traced ones
    from ftrun.event_log import read_event_log

    for name in NAMES:
        for log in sorted((trained.dir / name / layout.EVENT_LOGS).glob("replica*_rank0.jsonl")):
            syncs = [x for x in read_event_log(log) if x.synced is not None]
            assert syncs and all(isinstance(x.real_s, float) and x.real_s > 0 for x in syncs), log


def test_quorums_are_held_and_control_is_reported(trained: Compared) -> None:
    """Every quorum crossed the link: a control-hold span of >= one round trip per send in the
    traces; compare reports the control plane apart from the data plane, in the table and sentence."""
    from ftrun.torchft_compat import LABELS, LINK_CONTROL_QUORUM
    from ftrun.trace.load import load_trace
    from ftrun.trace.schema import name_filter, trace_events

    keep = name_filter([LINK_CONTROL_QUORUM, LABELS.prepare_sync], [])
    for n in NAMES:
        holds, sends = [], 0
        for f in sorted((trained.run_dir(n) / layout.TRACES).glob("*.json*")):
            for e in trace_events(load_trace(f), keep):
                if e.name == LINK_CONTROL_QUORUM and e.ph == "X":
                    holds.append(e.dur)
                elif e.name == LABELS.prepare_sync and e.ph == "X":
                    sends += 1
        assert sends >= 1, n
        assert len(holds) >= sends, (n, len(holds), sends)
        assert min(holds) >= 2 * LAT * 1e6 - 500, (n, min(holds))  # us; 0.5 ms timestamp slack
        r = trained.runs[n]
        assert r["exposed_data_s"] == r["exposed_comm_s"]
        # the training thread waited out at least the held round trip of every send's quorum
        assert r["exposed_control_s"] >= r["syncs"] * 2 * LAT, (n, r["exposed_control_s"])
        assert 0.0 < r["compute_utilisation"] < 1.0
    assert "s of control" in trained.report["conclusion"] and "computing" in trained.report["conclusion"]


def test_inspect_splits_exposed_into_data_and_control(trained: Compared) -> None:
    """inspect-trace, on the real traces: a sync whose send was captured shows that send's quorum
    wait (at least the held round trip) and its should_commit as control, apart from data."""
    from ftrun.check.analyze import analyze

    for n in NAMES:
        report = analyze([trained.run_dir(n)])
        syncs = [e for e in report.events if e.sync is not None and e.sync.send_captured]
        assert syncs, n
        for e in syncs:
            s = e.sync
            assert s.quorum_ms is not None and s.quorum_ms >= 2 * LAT * 1e3 - 0.5, (n, e.observed_step, s.quorum_ms)
            assert s.exposed_control_ms > s.quorum_ms  # should_commit on top
        totals = report.workers[0].totals
        assert totals.exposed_control_ms >= 2 * LAT * 1e3 * len(
            [e for e in syncs if e.replica == report.workers[0].replica]
        )


def test_exposed_comm_is_run_total_per_replica_mean(trained: Compared) -> None:
    """exposed_comm_s = mean over replicas of the sum of every sync's blocking time (event logs)."""
    for n in NAMES:
        m = trained.manifest(n)
        totals = []
        for rep in range(m["replicas"]):
            recs = [
                json.loads(x)
                for x in layout.event_log(trained.run_dir(n), rep, 0).read_text().splitlines()
                if x.strip()
            ]
            assert len(recs) == STEPS
            totals.append(sum(x.get("exposed_s", 0.0) for x in recs if x.get("synced") is not None))
        assert trained.runs[n]["exposed_comm_s"] == pytest.approx(sum(totals) / len(totals))
        assert trained.runs[n]["per_sync_exposed_ms"] == pytest.approx(
            trained.runs[n]["exposed_comm_s"] / trained.runs[n]["syncs"] * 1e3
        )


def test_bytes_per_sync(trained: Compared) -> None:
    s, b = trained.runs["streaming"], trained.runs["baseline"]
    frags = [f["bytes"] for f in trained.manifest("streaming")["fragments"]]
    model_bytes = sum(f["bytes"] for f in trained.manifest("baseline")["fragments"])
    assert len(frags) == 2 and sum(frags) == model_bytes
    assert b["peak_sync_bytes"] == model_bytes
    assert s["peak_sync_bytes"] == max(frags)
    assert s["peak_sync_bytes"] <= 0.6 * b["peak_sync_bytes"]  # ~1/F, fragments split by blocks
    # same data volume over the run: every fragment is synced once per H steps
    assert s["total_bytes"] == b["total_bytes"] == model_bytes * (STEPS // H)


def test_report_markdown(trained: Compared) -> None:
    md = (trained.dir / "report.md").read_text()
    assert "streaming vs baseline" in md
    assert "| | streaming | baseline |" in md
    assert "50 Mbit/s, 5 ms (emulated" in md
    assert "![timeline](timeline.png)" in md
    assert "Verdict: **pass**" in md


def test_timeline_png(trained: Compared) -> None:
    path = Path(trained.report["timeline"])
    assert path == trained.dir / "timeline.png"
    lanes = 2 * 2  # (run, replica) lanes
    w, h = png_size(path)
    assert w == WIDTH_PX
    assert h == round(100 * (1.2 + 0.75 * lanes))  # timeline.draw: 100 dpi, 1.2 in + 0.75 in per lane

    import matplotlib.image
    import numpy as np

    img = matplotlib.image.imread(str(path))
    assert img.shape[:2] == (h, w)
    rgb = (img[..., :3] * 255).round().astype(int)

    def count(hex_colour: str, tol: int = 6) -> int:
        c = np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)])
        return int((np.abs(rgb - c) <= tol).all(axis=-1).sum())

    # drawn, not blank: training steps (grey), exposed waits (red), fragment 0 and 1 (blue, orange)
    assert count("#d0d0d0") > 1000
    assert count("#d62728") > 200
    assert count("#1f77b4") > 50
    assert count("#ff7f0e") > 50
    assert count("#6a3d9a") > 50  # exposed control: quorum waits and should_commit


def test_existing_compare_dir_needs_overwrite(trained: Compared) -> None:
    proc = ftrun(
        "compare", *NAMES, "--steps", str(STEPS), *MODEL, "--link", LINK, "--out", str(trained.out), "--name", "c"
    )
    assert "already exists" in one_line_error(proc)


# --- read mode on the fixture's run dirs ---------------------------------------------------

KEYS = [
    "verdict",
    "steps_per_s",
    "wall_s",
    "syncs",
    "commits",
    "exposed_comm_s",
    "hidden_comm_share",
    "peak_sync_bytes",
    "total_bytes",
    "final_loss",
    "schedule",
]


def test_read_mode_matches_training_report(trained: Compared, tmp_path: Path) -> None:
    proc = read_compare(trained, tmp_path)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert [r["name"] for r in d["runs"]] == NAMES
    for r in d["runs"]:
        t = trained.runs[r["name"]]
        assert {k: r[k] for k in KEYS} == {k: t[k] for k in KEYS}
    assert d["link"]["emulated"] is True
    assert d["link"]["bandwidth_bps"] == pytest.approx(BW) and d["link"]["latency_s"] == pytest.approx(LAT)
    assert d["link"]["chosen"] == "as recorded in the runs"
    cmp_dir = Path(d["compare_dir"])
    assert cmp_dir == tmp_path / "compare-streaming-vs-baseline"
    assert resolved(json.loads((cmp_dir / "report.json").read_text()), cmp_dir) == resolved(d, cmp_dir)
    assert png_size(cmp_dir / "timeline.png")[0] == WIDTH_PX
    assert "expect_hidden" not in d


def test_read_mode_keeps_command_line_order(trained: Compared, tmp_path: Path) -> None:
    proc = read_compare(trained, tmp_path, runs=("baseline", "streaming"))
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert [r["name"] for r in d["runs"]] == ["baseline", "streaming"]


def test_read_mode_table_output(trained: Compared, tmp_path: Path) -> None:
    proc = ftrun("compare", *(str(trained.run_dir(n)) for n in NAMES), "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "exposed data comm" in proc.stdout and "exposed control" in proc.stdout
    assert "compute utilisation" in proc.stdout and "PASS" in proc.stdout and "timeline:" in proc.stdout


def test_expect_hidden(trained: Compared, tmp_path: Path) -> None:
    # the expectation is held against the first run given: the baseline here, whose plain DiLoCo
    # blocks on its syncs (its share is well below 1 on any machine; streaming may hide all)
    runs = ("baseline", "streaming")
    share = trained.runs["baseline"]["hidden_comm_share"]
    assert share is not None and share < 0.99999
    proc = read_compare(trained, tmp_path, "--expect-hidden", "0.99999", runs=runs)
    assert proc.returncode == 1, proc.stderr
    d = json.loads(proc.stdout)
    # one verdict (issue 24 item 8): the expectation failed, so the compare did; the schedules passed
    assert d["verdict"] == "fail" and all(r["verdict"] == "pass" for r in d["runs"])
    assert d["expect_hidden"] == {"min": 0.99999, "observed": share, "ok": False, "run": "baseline"}
    assert json.loads((Path(d["compare_dir"]) / "report.json").read_text())["expect_hidden"]["ok"] is False

    # the same compare dir again: refused (nothing is overwritten silently), then --overwrite
    one_line_error(read_compare(trained, tmp_path, "--expect-hidden", f"{share - 1e-6:.9f}", runs=runs))
    proc = read_compare(trained, tmp_path, "--expect-hidden", f"{share - 1e-6:.9f}", "--overwrite", runs=runs)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["expect_hidden"]["ok"] is True

    one_line_error(read_compare(trained, tmp_path, "--expect-hidden", "1.5"))


def test_link_is_refused_in_read_mode(trained: Compared, tmp_path: Path) -> None:
    assert "applies only when compare trains" in one_line_error(read_compare(trained, tmp_path, "--link", "1gbit,20ms"))


# --- bad input: exit 2, one line on stderr, no traceback -----------------------------------


def test_missing_run_dir(trained: Compared, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-run"
    line = one_line_error(ftrun("compare", str(trained.run_dir("streaming")), str(missing), "--out", str(tmp_path)))
    assert str(missing) in line
    assert not (tmp_path / "compare-streaming-vs-no-such-run").exists()


def test_dir_that_is_not_a_run_dir(trained: Compared, tmp_path: Path) -> None:
    line = one_line_error(ftrun("compare", str(trained.run_dir("streaming")), str(tmp_path), "--out", str(tmp_path)))
    assert "not an ftrun run dir" in line


def test_run_dir_without_event_logs(trained: Compared, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(trained.run_dir("baseline"), broken)
    shutil.rmtree(broken / layout.EVENT_LOGS)
    line = one_line_error(
        ftrun("compare", str(trained.run_dir("streaming")), str(broken), "--out", str(tmp_path / "o"))
    )
    assert "event" in line  # "no event logs" or "...events/replica0_rank0.jsonl: unreadable ..."


@pytest.mark.parametrize(
    "args, needle",
    [
        (["nosuchpreset", "baseline"], "nosuchpreset"),
        (["streaming"], "expected two runs"),
        (["streaming", "baseline", "streaming"], "expected two runs"),
        (["streaming", "baseline", "--link", "fast"], "--link"),
        (["streaming", "baseline", "--link", "0mbit,5ms"], "--link"),
        (["streaming", "baseline", "--link", "1e400gbit"], "--link"),
        (["streaming", "missing.toml"], "missing.toml"),
    ],
)
def test_bad_input(tmp_path: Path, args: list[str], needle: str) -> None:
    line = one_line_error(ftrun("compare", *args, "--out", str(tmp_path), "--steps", "4"))
    assert needle in line
    assert not any(tmp_path.iterdir()), "bad input still created output"


def test_preset_and_run_dir_mix(trained: Compared, tmp_path: Path) -> None:
    line = one_line_error(ftrun("compare", "streaming", str(trained.run_dir("baseline")), "--out", str(tmp_path)))
    assert "not a mix" in line


def test_bad_link_in_read_mode(trained: Compared, tmp_path: Path) -> None:
    one_line_error(read_compare(trained, tmp_path, "--link", "fast"))


def test_repeat_is_refused_in_read_mode(trained: Compared, tmp_path: Path) -> None:
    assert "--repeat" in one_line_error(read_compare(trained, tmp_path, "--repeat", "2"))


# --- --repeat and the calibrated default link (a second, smaller training compare) ----------


def test_repeat_alternates_and_calibrates_the_default_link(tmp_path: Path) -> None:
    """No --link: the step is calibrated on the run's layout and the link chosen from it; with
    --repeat 2 the order alternates (s-1, b-1, then b-2, s-2) and figures get a spread."""
    steps = 20
    proc = ftrun(
        "compare",
        *NAMES,
        "--steps",
        str(steps),
        *MODEL,
        "--repeat",
        "2",
        "--out",
        str(tmp_path),
        "--name",
        "r",
        "--json",
        timeout=600,
    )
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    d = json.loads(proc.stdout)
    cmp_dir = tmp_path / "r"
    started = {
        n: json.loads((cmp_dir / n / layout.MANIFEST).read_text())
        for n in ("streaming-1", "baseline-1", "baseline-2", "streaming-2")
    }
    assert not (cmp_dir / "streaming").exists()
    order = sorted(started, key=lambda n: (cmp_dir / n / layout.MANIFEST).stat().st_ctime)
    assert order == ["streaming-1", "baseline-1", "baseline-2", "streaming-2"], order
    for r in d["runs"]:
        assert r["repeats"] == 2 and len(r["repeat_runs"]) == 2
        lo, hi = r["spread"]["steps_per_s"]
        assert lo <= r["steps_per_s"] <= hi
        assert sorted(x["steps_per_s"] for x in r["repeat_runs"]) == [lo, hi]
    link = d["link"]
    assert link["chosen"].startswith("default")
    assert link["calibrated_step_s"] > 0 and "2 concurrent process" in link["calibration"]
    assert link["plain_sync_share_of_h"] == pytest.approx(0.25, rel=0.05)
    assert set(link["measured_median_step_s"]) == set(NAMES)
    assert set(link["plain_sync_share_of_measured_h"]) == set(NAMES)
    assert "spread" in d["conclusion"]


def test_throughput_decomposition_adds_up_and_explains_the_ratio(trained: Compared) -> None:
    """Issue 25: each run's loop time = its named terms + unaccounted (exactly, by construction of
    the remainder); the named terms alone explain the throughput ratio within 5%; baseline
    (tau = 0) has no overlapped step, so its slowdown is 1; streaming's overlapped steps are
    measured; the sentence names the largest reason."""
    from ftrun.check.throughput import TERMS

    for r in trained.report["runs"]:
        d = r["decomposition"]
        assert sum(d[k] for k in TERMS) + d["unaccounted_s"] == pytest.approx(d["loop_s"], rel=1e-9)
        assert d["loop_s"] * d["steps"] > 0 and d["steps"] == STEPS
    base, stream = trained.runs["baseline"], trained.runs["streaming"]
    assert base["decomposition"]["overlapped_steps"] == 0 and base["overlap_slowdown"] == 1.0
    assert stream["decomposition"]["overlapped_steps"] > 0 and stream["overlap_slowdown"] > 0
    exp = trained.report["throughput"]
    assert exp["measured_ratio"] == pytest.approx(stream["steps_per_s"] / base["steps_per_s"])
    assert exp["explained"], exp
    # the gain is said only beyond its spread (ftrun.check.noise): the sentence follows the figures
    from ftrun.check.throughput import per_step

    def exposed(d: dict):
        return per_step(d, "exposed_data_s").plus(per_step(d, "exposed_control_s"))

    gain = exposed(base["decomposition"]).minus(exposed(stream["decomposition"]))
    if gain.beyond() and gain.value > 0:
        assert "per step less on communication than baseline" in exp["reason"], (gain, exp["reason"])
    elif gain.beyond():
        assert "per step more on communication than baseline" in exp["reason"], (gain, exp["reason"])
    else:
        assert "wait on communication alike per step (no difference measured)" in exp["reason"], (gain, exp)
    md = (trained.dir / "report.md").read_text()
    assert "Where the loop time went" in md and "overlap slowdown (ms/step)" in md
