"""End-to-end ``ftrun train``: real lighthouse, torchrun per replica group, Gloo on CPU.

Each run is made once per module (``runs`` fixture) and checked from several angles: exit
code and clean teardown, files in the run dir, the event logs against
``ftrun.schedule.Schedule.events``, the manifest contract (``ftrun.layout``), the profiler
window in the traces, and cross-replica agreement.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import msgspec
import pytest

from ftrun import layout
from ftrun.config import RunConfig
from ftrun.output import RUN_MARKER
from ftrun.schedule import Schedule
from ftrun.torchft_compat import LABELS
from train_fixtures import SMALL, TrainRun, actual_events, run_train, trace_names, trace_step_spans, write_toml

pytestmark = pytest.mark.e2e  # every test here starts processes (or uses a fixture that trains)

# name -> (F, H, tau, steps, blocks, expected profile window or None)
CASES = {
    # streaming, F=2, tau>0; --profile auto with steps >= 2H -> window [H+1, 2H]
    "stream_f2": (2, 6, 2, 12, 4, (7, 12)),
    # plain DiLoCo preset (F=1, tau=0) on a text file; auto window [H+1, 2H]
    "baseline": (1, 4, 0, 8, 4, (5, 8)),
    # F=3 from a TOML file, with flags overriding some of its keys
    "f3_toml": (3, 12, 1, 12, 3, (5, 10)),
}


def _launch(name: str, out: Path) -> TrainRun:
    if name == "stream_f2":
        return run_train(
            out,
            name,
            "--mode",
            "streaming",
            "--fragments",
            "2",
            "--sync-every",
            "6",
            "--fragment-sync-delay",
            "2",
            "--steps",
            "12",
            *SMALL,
            "--json",
        )
    if name == "baseline":
        data = out / "corpus.txt"
        data.write_text("the quick brown fox jumps over the lazy dog. " * 40)
        return run_train(
            out, name, "--mode", "baseline", "--sync-every", "4", "--steps", "8", "--data", str(data), *SMALL
        )
    if name == "f3_toml":
        cfg = write_toml(
            out / "f3.toml",
            {
                "mode": "streaming",
                "fragments": 3,
                "sync-every": 12,
                "fragment_sync_delay": 1,
                "blocks": 3,
                "steps": 100,
                "width": 64,
                "profile": "none",
                "seed": 7,
            },
        )
        # flags win over the file: steps, width (in SMALL) and profile
        return run_train(out, name, "--config", str(cfg), "--steps", "12", "--profile", "5:10", *SMALL)
    raise KeyError(name)


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """``launched(name)``: the run of CASES[name], made once per module."""
    cache: dict[str, TrainRun] = {}

    def get(name: str) -> TrainRun:
        if name not in cache:
            cache[name] = _launch(name, tmp_path_factory.mktemp(f"e2e-{name}"))
        return cache[name]

    return get


@pytest.fixture(scope="module", params=list(CASES))
def run(request, launched) -> tuple[str, TrainRun]:
    return request.param, launched(request.param)


def test_run_completes_and_tears_down(run):
    name, r = run
    assert r.rc == 0, r.explain()
    assert "Traceback" not in r.stderr, r.explain()
    assert r.descendants, "no child processes were seen: not a real run?"
    assert not r.survivors, f"processes left after the run: {r.survivors}"


def test_run_dir_files(run):
    name, r = run
    f, h, tau, steps, blocks, window = CASES[name]
    assert (r.run_dir / layout.MANIFEST).is_file()
    assert (r.run_dir / layout.SUMMARY).is_file()
    for rep in range(2):
        assert layout.event_log(r.run_dir, rep, 0).is_file()
        assert layout.group_log(r.run_dir, rep).is_file()
    traces = sorted(p.name for p in (r.run_dir / layout.TRACES).glob("*.pt.trace.json.gz"))
    assert traces == [layout.trace_name(rep, 0, window[0]) for rep in range(2)]


def test_event_logs_match_schedule(run):
    name, r = run
    f, h, tau, steps, blocks, window = CASES[name]
    want = [(e.step, e.kind, e.fragment, e.manager_step) for e in Schedule(f, h, tau).events(steps)]
    assert want, "a schedule with no events tests nothing"
    for rep in range(2):
        recs = r.events(rep)
        assert [x["step"] for x in recs] == list(range(1, steps + 1))
        assert actual_events(recs) == want, f"replica {rep}"
        for x in recs:
            if x["synced"] is not None:
                assert x["commit"] is True and x["fingerprint"]
                assert x["manager_step_after"] == x["manager_step"] + 1
                assert x["participants"] == 2
            else:
                assert x["commit"] is None and x["fingerprint"] is None
                assert x["manager_step_after"] == x["manager_step"]
        assert recs[-1]["manager_step_after"] == steps // (h // f)


def test_manifest_contract(run):
    name, r = run
    f, h, tau, steps, blocks, window = CASES[name]
    m = r.manifest()
    for key in (
        "ftrun_version",
        "job_id",
        "run_name",
        "config",
        "versions",
        "backend",
        "replicas",
        "nproc_per_replica",
        "schedule",
        "fragments",
        "expected",
        "profile_windows",
        "traces",
        "event_logs",
        "link",
    ):
        assert key in m, key
    assert m["run_name"] == name
    assert m["format"] == layout.FORMAT
    msgspec.convert(m, layout.Manifest)  # the typed contract: every key of the right type
    for e in m["event_logs"]:
        for line in (r.run_dir / e["path"]).read_text().splitlines():
            msgspec.json.decode(line, type=layout.EventRecord)
    assert m["backend"] == "gloo"
    assert m["replicas"] == 2 and m["nproc_per_replica"] == 1
    assert set(m["versions"]) >= {"python", "torch", "torchft", "ftrun"}
    assert all(m["versions"][k] for k in ("python", "torch", "torchft", "ftrun"))
    from ftrun.torchft_compat import installed

    rel = installed()  # either release; the worker's record names it and its process-group API
    assert (m["versions"]["torchft_distribution"], m["versions"]["torchft"], m["versions"]["torchft_pg_api"]) == (
        rel.distribution,
        rel.version,
        rel.pg_api,
    )
    assert r.summary()["versions"] == m["versions"]
    assert m["schedule"] == {"fragments": f, "sync_every": h, "fragment_sync_delay": tau, "steps": steps}
    assert m["expected"] == [dataclasses.asdict(e) for e in Schedule(f, h, tau).events(steps)]
    assert m["profile_windows"] == [list(window)]
    assert m["link"] is None
    cfg = msgspec.convert(m["config"], RunConfig).resolved()  # the tree, by key
    assert (cfg["fragments"], cfg["sync_every"], cfg["fragment_sync_delay"], cfg["steps"], cfg["blocks"]) == (
        f,
        h,
        tau,
        steps,
        blocks,
    )
    assert cfg["width"] == 32
    # fragments: F disjoint groups of parameters covering the whole model, in order
    assert [fr["id"] for fr in m["fragments"]] == list(range(f))
    names = [p["name"] for fr in m["fragments"] for p in fr["params"]]
    assert len(names) == len(set(names))
    for fr in m["fragments"]:
        assert fr["numel"] == sum(p["numel"] for p in fr["params"]) > 0
        assert fr["bytes"] == 4 * fr["numel"]
        for p in fr["params"]:
            n = 1
            for d in p["shape"]:
                n *= d
            assert n == p["numel"]
    from ftrun.worker.models import build_model

    model = build_model(cfg)
    assert sum(fr["numel"] for fr in m["fragments"]) == sum(p.numel() for p in model.parameters())
    assert sorted((t["replica"], t["rank"], t["path"], tuple(t["window"])) for t in m["traces"]) == [
        (rep, 0, f"{layout.TRACES}/{layout.trace_name(rep, 0, window[0])}", window) for rep in range(2)
    ]
    for t in m["traces"]:
        assert (r.run_dir / t["path"]).is_file()
    assert sorted((e["replica"], e["rank"], e["path"]) for e in m["event_logs"]) == [
        (rep, 0, f"{layout.EVENT_LOGS}/{layout.worker_name(rep, 0)}.jsonl") for rep in range(2)
    ]


def test_config_file_and_flag_override(launched):
    cfg = msgspec.convert(launched("f3_toml").manifest()["config"], RunConfig).resolved()
    assert cfg["seed"] == 7  # from the file
    assert cfg["steps"] == 12 and cfg["width"] == 32 and cfg["profile"] == "5:10"  # flags override the file


def test_traces_hold_the_window(run):
    name, r = run
    f, h, tau, steps, blocks, window = CASES[name]
    a, b = window
    inside = [e for e in Schedule(f, h, tau).events(steps) if a <= e.step <= b]
    for rep in range(2):
        path = r.run_dir / layout.TRACES / layout.trace_name(rep, 0, a)
        assert trace_step_spans(path) == set(range(a, b + 1))
        counts = Counter(trace_names(path))
        assert counts[LABELS.prepare_sync] == sum(e.kind == "send" for e in inside)
        assert counts[LABELS.perform_sync] == sum(e.kind == "sync" for e in inside)


def test_replicas_agree(run):
    name, r = run
    f, h, tau, steps, blocks, window = CASES[name]
    s = r.summary()
    assert s["ok"] is True
    assert s["agreement"]["ok"] is True and not s["agreement"]["disagreements"]
    commits = steps // (h // f)
    assert s["agreement"]["commits_checked"] == commits
    assert [p["steps"] for p in s["replicas"]] == [steps, steps]
    assert [p["commits"] for p in s["replicas"]] == [commits, commits]
    # and directly: the same fingerprint on both replicas for every commit
    fps = [
        {x["manager_step_after"]: (x["synced"], x["fingerprint"]) for x in r.events(rep) if x["commit"]}
        for rep in range(2)
    ]
    assert fps[0] == fps[1] and len(fps[0]) == commits
    # successive commits of different fragments (or of the same one later) differ
    assert len({fp for _, fp in fps[0].values()}) == commits


def test_two_ranks_per_group(tmp_path):
    """2 replica groups x 2 ranks: 4 event logs, each on schedule, agreement per rank."""
    f, h, tau, steps = 2, 4, 1, 8
    r = run_train(
        tmp_path,
        "np2",
        "--nproc-per-replica",
        "2",
        "--fragments",
        str(f),
        "--sync-every",
        str(h),
        "--fragment-sync-delay",
        str(tau),
        "--steps",
        str(steps),
        "--profile",
        "none",
        *SMALL,
    )
    assert r.rc == 0, r.explain()
    assert not r.survivors, r.survivors
    logs = sorted(p.name for p in (r.run_dir / layout.EVENT_LOGS).glob("replica*_rank*.jsonl"))
    assert logs == [f"{layout.worker_name(rep, g)}.jsonl" for rep in range(2) for g in range(2)]
    want = [(e.step, e.kind, e.fragment, e.manager_step) for e in Schedule(f, h, tau).events(steps)]
    for rep in range(2):
        for g in range(2):
            assert actual_events(r.events(rep, g)) == want, (rep, g)
    s = r.summary()
    assert s["ok"] and s["agreement"]["ok"]
    assert s["agreement"]["commits_checked"] == 2 * steps // (h // f)  # per rank, per commit
    m = r.manifest()
    assert m["nproc_per_replica"] == 2 and len(m["event_logs"]) == 4
    assert m["traces"] == [] and m["profile_windows"] == []
    # ranks of one group hold the same model (DDP): same fingerprints on rank 0 and 1
    for rep in range(2):
        a = [x["fingerprint"] for x in r.events(rep, 0) if x["commit"]]
        b = [x["fingerprint"] for x in r.events(rep, 1) if x["commit"]]
        assert a == b


def test_existing_run_dir_refused_unless_overwrite(tmp_path):
    run_dir = tmp_path / "again"
    run_dir.mkdir()
    (run_dir / "keep.txt").write_text("mine")
    args = [
        "--steps",
        "4",
        "--sync-every",
        "2",
        "--fragments",
        "1",
        "--fragment-sync-delay",
        "0",
        "--profile",
        "none",
        *SMALL,
    ]
    r = run_train(tmp_path, "again", *args)
    assert r.rc == 2, r.explain()
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--run-name again" in lines[0] and "--overwrite" in lines[0], r.stderr
    assert (run_dir / "keep.txt").read_text() == "mine"
    assert not r.descendants
    # --overwrite does not delete a directory that is not an ftrun run dir
    r = run_train(tmp_path, "again", *args, "--overwrite")
    assert r.rc == 2 and len(r.stderr.strip().splitlines()) == 1, r.explain()
    assert (run_dir / "keep.txt").exists()
    # ... nor an ftrun-looking one that holds the user's files
    (run_dir / "spec.json").write_text("{}")
    (run_dir / RUN_MARKER).write_text('{"pid": 1}')
    r = run_train(tmp_path, "again", *args, "--overwrite")
    assert r.rc == 2 and "keep.txt" in r.stderr, r.explain()
    assert (run_dir / "keep.txt").read_text() == "mine"
    # ... but does replace an earlier run of ftrun's (here: interrupted, marker and spec.json only)
    (run_dir / "keep.txt").unlink()
    r = run_train(tmp_path, "again", *args, "--overwrite")
    assert r.rc == 0, r.explain()
    assert not (run_dir / "spec.json").read_text() == "{}"
    assert r.summary()["ok"]
    assert not r.survivors
