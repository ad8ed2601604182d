"""End-to-end ``ftrun train``: real lighthouse, torchrun per replica group, Gloo on CPU.

Each run is the session's shared run of its kind (conftest ``shared_run``, read by other modules
too) and is checked here from several angles: exit
code and clean teardown, files in the run dir, the event logs against
``ftrun.schedule.Schedule.events``, the manifest contract (``ftrun.layout``), the profiler
window in the traces, and cross-replica agreement.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import msgspec
import pytest

from ftrun import layout
from ftrun.config import RunConfig
from ftrun.output import RUN_MARKER
from ftrun.schedule import Schedule
from ftrun.torchft_compat import LABELS
from train_fixtures import SMALL, TrainRun, actual_events, flat, run_train, trace_names, trace_step_spans

pytestmark = pytest.mark.e2e  # every test here starts processes (or uses a fixture that trains)

# case -> (the session's shared run (conftest ``shared_run``), F, H, tau, steps, blocks, profile window)
CASES = {
    # streaming, F=2, tau>0; --profile auto with steps >= 2H -> window [H+1, 2H]
    "stream_f2": ("streaming", 2, 20, 5, 40, 4, (21, 40)),
    # plain DiLoCo preset (F=1, tau=0) on a text file; auto window [H+1, 2H]
    "baseline": ("baseline", 1, 4, 0, 8, 4, (5, 8)),
    # F=3 from a TOML file, with flags overriding some of its keys
    "f3_toml": ("f3", 3, 12, 1, 12, 3, (2, 12)),
}


@pytest.fixture(scope="module", params=list(CASES))
def run(request, shared_run) -> tuple[str, TrainRun]:
    return request.param, shared_run(CASES[request.param][0])


def test_run_completes_and_tears_down(run):
    name, r = run
    assert r.rc == 0, r.explain()
    assert "Traceback" not in r.stderr, r.explain()
    assert r.descendants, "no child processes were seen: not a real run?"
    assert not r.survivors, f"processes left after the run: {r.survivors}"


def test_run_dir_files(run):
    name, r = run
    _, f, h, tau, steps, blocks, window = CASES[name]
    assert (r.run_dir / layout.MANIFEST).is_file()
    assert (r.run_dir / layout.SUMMARY).is_file()
    for rep in range(2):
        assert layout.event_log(r.run_dir, rep, 0).is_file()
        assert layout.group_log(r.run_dir, rep).is_file()
    traces = sorted(p.name for p in (r.run_dir / layout.TRACES).glob("*.pt.trace.json.gz"))
    assert traces == [layout.trace_name(rep, 0, window[0]) for rep in range(2)]


def test_event_logs_match_schedule(run):
    name, r = run
    _, f, h, tau, steps, blocks, window = CASES[name]
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
    run_name, f, h, tau, steps, blocks, window = CASES[name]
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
    assert m["run_name"] == run_name
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
    tree = msgspec.convert(m["config"], RunConfig)
    cfg = tree.resolved()  # the tree, by key
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

    model = build_model(tree.model_spec())
    assert sum(fr["numel"] for fr in m["fragments"]) == sum(p.numel() for p in model.parameters())
    assert sorted((t["replica"], t["rank"], t["path"], tuple(t["window"])) for t in m["traces"]) == [
        (rep, 0, f"{layout.TRACES}/{layout.trace_name(rep, 0, window[0])}", window) for rep in range(2)
    ]
    for t in m["traces"]:
        assert (r.run_dir / t["path"]).is_file()
    assert sorted((e["replica"], e["rank"], e["path"]) for e in m["event_logs"]) == [
        (rep, 0, f"{layout.EVENT_LOGS}/{layout.worker_name(rep, 0)}.jsonl") for rep in range(2)
    ]


def test_config_file_and_flag_override(shared_run):
    cfg = msgspec.convert(shared_run("f3").manifest()["config"], RunConfig).resolved()
    assert cfg["seed"] == 7  # from the file
    assert cfg["steps"] == 12 and cfg["width"] == 32 and cfg["profile"] == "2:12"  # flags override the file


def test_traces_hold_the_window(run):
    name, r = run
    _, f, h, tau, steps, blocks, window = CASES[name]
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
    _, f, h, tau, steps, blocks, window = CASES[name]
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


# 2 replica groups x 2 ranks, F=2, H=4, tau=1, 8 steps, no profiling
NP2 = (2, 4, 1, 8)
NP2_ARGS = ["--nproc-per-replica", "2", "--fragments", "2", "--sync-every", "4", "--fragment-sync-delay", "1"]
NP2_ARGS += ["--steps", "8", "--profile", "none", *SMALL]


@dataclasses.dataclass
class Attempt:
    """One ``ftrun train --run-name again`` over the same run dir, and what it left of the user's file."""

    run: TrainRun
    keep: str | None  # keep.txt's text right after the attempt (None: gone)


@pytest.fixture(scope="module")
def again(tmp_path_factory) -> list[Attempt]:
    """``ftrun train --run-name again`` (the NP2 run) four times over one run dir holding the user's
    keep.txt: without --overwrite; with it; with it over an ftrun-looking dir that still holds
    keep.txt; and with it once keep.txt is gone (the one that trains: a 2x2-rank run, no traces)."""
    tmp = tmp_path_factory.mktemp("again")
    run_dir = tmp / "again"
    run_dir.mkdir()
    keep = run_dir / "keep.txt"
    keep.write_text("mine")

    def attempt(*extra: str) -> Attempt:
        r = run_train(tmp, "again", *NP2_ARGS, *extra, timeout=300)
        return Attempt(r, keep.read_text() if keep.exists() else None)

    out = [attempt(), attempt("--overwrite")]
    (run_dir / "spec.json").write_text("{}")
    (run_dir / RUN_MARKER).write_text('{"pid": 1}')
    out.append(attempt("--overwrite"))
    keep.unlink()
    out.append(attempt("--overwrite"))
    return out


def test_existing_run_dir_refused_unless_overwrite(again):
    refused, not_ftruns, holds_users, replaced = again
    r = refused.run
    assert r.rc == 2, r.explain()
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--run-name again" in lines[0] and "--overwrite" in lines[0], r.stderr
    assert refused.keep == "mine"
    assert not r.descendants
    # --overwrite does not delete a directory that is not an ftrun run dir
    r = not_ftruns.run
    assert r.rc == 2 and len(r.stderr.strip().splitlines()) == 1, r.explain()
    assert not_ftruns.keep == "mine"
    # ... nor an ftrun-looking one that holds the user's files
    r = holds_users.run
    assert r.rc == 2 and "keep.txt" in r.stderr, r.explain()
    assert holds_users.keep == "mine"
    # ... but does replace an earlier run of ftrun's (here: interrupted, marker and spec.json only)
    r = replaced.run
    assert r.rc == 0, r.explain()
    assert not (r.run_dir / "spec.json").read_text() == "{}"
    assert r.summary()["ok"]
    assert not r.survivors


def test_two_ranks_per_group(again):
    """2 replica groups x 2 ranks: 4 event logs, each on schedule, agreement per rank."""
    f, h, tau, steps = NP2
    r = again[-1].run
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


def test_no_traces_is_said_once_never_pass(again):
    """A run that captured no trace (--profile none) says so once and never says PASS (issue 40 item 10)."""
    run = again[-1].run
    assert run.rc == 0, run.explain()
    out = flat(run.stdout)
    assert out.count("schedule not checked: no traces captured") == 1 and "PASS" not in out, run.stdout
    assert run.summary()["check"]["verdict"] == "not checked"
