"""``ftrun launch`` pieces that start no process: flag checks, argv/env, kill specs, trace discovery."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import msgspec
import pytest

from ftrun import layout
from ftrun.config.commands import LaunchOptions
from ftrun.errors import BadInput
from ftrun.fault_flags import LaunchKill, parse_launch_kill
from ftrun.launch.script import LaunchSpec, parse_env_pairs, script_group
from ftrun.launch.watch import LogTail, Quorums
from ftrun.layout import LaunchManifest, LaunchSchedule
from ftrun.trace.harvest import find_traces, sniff

SCHED = dict(fragments=2, sync_every=4, fragment_sync_delay=1)


@pytest.fixture
def script(tmp_path) -> Path:
    p = tmp_path / "train.py"
    p.write_text("print('hi')\n")
    return p


# --- kill specs ---------------------------------------------------------------------------


def test_kill_by_time_and_signal():
    assert parse_launch_kill("1@30s", 2) == LaunchKill(1, "SIGKILL", seconds=30.0)
    assert parse_launch_kill("0@2.5s:sigterm", 2) == LaunchKill(0, "SIGTERM", seconds=2.5)


def test_kill_by_line_keeps_colons_in_the_regex():
    k = parse_launch_kill("1@line:step 4: loss", 2)
    assert (k.replica, k.signal, k.pattern, k.seconds) == (1, "SIGKILL", "step 4: loss", None)
    assert parse_launch_kill("1@line:step 4:sigterm", 2).signal == "SIGTERM"
    assert parse_launch_kill("1@line:step 4:sigterm", 2).pattern == "step 4"


@pytest.mark.parametrize(
    "text, needle",
    [
        ("1@30", "expected REPLICA@SECONDSs"),
        ("x@30s", "expected REPLICA@SECONDSs"),
        ("2@30s", "replica group 2 does not exist"),
        ("0@line:(", "does not compile"),
    ],
)
def test_bad_kill(text, needle):
    with pytest.raises(BadInput, match=needle.replace("(", r"\(")):
        parse_launch_kill(text, 2)


# --- flags --------------------------------------------------------------------------------


def test_spec_resolves_script_and_keeps_args(script):
    spec = LaunchSpec.build([str(script), "--steps", "5", "--", "x"], LaunchOptions(**SCHED))
    assert spec.script == script.resolve() and spec.args == ["--steps", "5", "--", "x"]
    assert spec.min_replicas == spec.replicas == 2 and spec.inspect


@pytest.mark.parametrize(
    "args, flags, needle",
    [
        ([], SCHED, "no script: give it after --"),
        (["missing.py"], SCHED, "script missing.py: no such file"),
        (None, {}, "--fragments --sync-every --fragment-sync-delay: give the schedule"),
        (None, dict(fragments=2), "--sync-every --fragment-sync-delay"),
        (
            None,
            dict(fragments=2, sync_every=5, fragment_sync_delay=1),
            "--sync-every 5: must be a multiple of fragments",
        ),
        (
            None,
            dict(fragments=2, sync_every=4, fragment_sync_delay=2),
            "--fragment-sync-delay 2: must be < sync_every/fragments",
        ),
        (None, {**SCHED, "step_numbering": "middle"}, "--step-numbering 'middle'"),
        (None, {**SCHED, "lighthouse": "http://h:1", "min_replicas": 1}, "--min-replicas: configures the lighthouse"),
        (None, {**SCHED, "lighthouse": "h:1"}, "expected http://HOST:PORT"),
        (None, {**SCHED, "min_replicas": 3}, "--min-replicas 3: must be between 1 and --replicas (2)"),
        (None, {**SCHED, "kill": ["1@3s", "1@3s"]}, "the same fault is given twice"),
        (None, {**SCHED, "timeout": 0}, "--timeout 0: must be > 0"),
        (None, {**SCHED, "timeout": 1e308}, "--timeout 1e+308: must be > 0 and at most 604800"),  # as train's timeouts
        (None, {**SCHED, "timeout": float("nan")}, "--timeout nan"),  # a comparison never true: it would never fire
        (None, {**SCHED, "env": ["REPLICA_GROUP_ID=3"]}, "set by ftrun"),
        (None, {**SCHED, "run_name": "a/b"}, "must be a plain name"),
    ],
)
def test_bad_flags(script, args, flags, needle):
    with pytest.raises(BadInput) as e:
        LaunchSpec.build([str(script)] if args is None else args, LaunchOptions(**flags))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_no_inspect_needs_no_schedule(script):
    assert LaunchSpec.build([str(script)], LaunchOptions(no_inspect=True)).schedule is None


def test_env_pairs():
    assert parse_env_pairs(["A=1", "B=x=y", "C="]) == {"A": "1", "B": "x=y", "C": ""}
    for bad in (["A"], ["1A=2"], ["A=1", "A=2"]):
        with pytest.raises(BadInput):
            parse_env_pairs(bad)


# --- argv and env -------------------------------------------------------------------------


def test_group_argv_env_and_cwd(script, tmp_path):
    spec = LaunchSpec.build(
        [str(script), "--lr", "0.1"], LaunchOptions(replicas=3, nproc_per_replica=2, env=["FOO=bar"], **SCHED)
    )
    run = tmp_path / "run"
    base = {"PATH": "/bin", "MINE": "kept", "NCCL_HOSTID": "callers"}
    g = script_group(spec, run, 1, "http://127.0.0.1:9", None, base_env=base)
    assert g.argv[:4] == [sys.executable, "-m", "ftrun.launch.reaper", "--"]  # under a subreaper (issue 24 item 12)
    assert g.argv[4:7] == [sys.executable, "-m", "torch.distributed.run"]
    assert g.argv[g.argv.index("--nproc-per-node") + 1] == "2"
    assert g.argv[-3:] == [str(script.resolve()), "--lr", "0.1"]
    assert g.cwd == run / "groups" / "replica1" and g.log == run / "logs" / "replica1.log"
    e = g.env
    assert (e["REPLICA_GROUP_ID"], e["NUM_REPLICA_GROUPS"], e["TORCHFT_LIGHTHOUSE"]) == ("1", "3", "http://127.0.0.1:9")
    assert e["FTRUN_RUN_DIR"] == str(run.resolve()) and e["FTRUN_TRACE_DIR"] == str(
        (run / "traces" / "replica1").resolve()
    )
    assert e["MINE"] == "kept" and e["FOO"] == "bar"
    assert e["NCCL_HOSTID"] == "callers"  # no GPUs: ftrun does not touch it


def test_group_env_with_gpus_sets_devices_and_hostid(script, tmp_path):
    spec = LaunchSpec.build([str(script)], LaunchOptions(**SCHED))
    g = script_group(spec, tmp_path, 1, "http://x:1", {"CUDA_VISIBLE_DEVICES": "1"}, base_env={})
    assert g.env["CUDA_VISIBLE_DEVICES"] == "1" and g.env["NCCL_HOSTID"] == "ftrun_replica1"


def test_a_fresh_group_is_incarnation_0_whatever_the_callers_environment_says():
    """An inherited FTRUN_RESTART (a relaunched group's, a spare's) must not make a first
    launch a relaunch: its ranks would skip their profiled window."""
    from ftrun.launch.groups import group_env

    env = group_env(1, 2, "http://x:1", 1, base={layout.ENV_RESTART: "1", layout.ENV_REPLICA: "4"})
    assert env[layout.ENV_RESTART] == "0" and env[layout.ENV_REPLICA] == "1"


# --- quorums from the lighthouse log -------------------------------------------------------


def test_quorums_from_lighthouse_log(tmp_path):
    log = tmp_path / "lighthouse.log"
    log.write_text(
        "x - Received quorum request for replica train_diloco_0:abc\n"
        "x - Detected quorum change, bumping quorum_id to 1\n"
        "x - Detected quorum change, bumping quorum_id to 3\npartial"
    )
    q = Quorums(LogTail(log))
    q.update()
    assert q.last_id == 3 and q.asked(0) is True and q.asked(1) is False
    assert q.tail.partial == "partial"


# --- trace discovery ----------------------------------------------------------------------


def _trace(rank=None) -> str:
    d = {"schemaVersion": 1}
    if rank is not None:
        d["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
    d["traceEvents"] = []
    return json.dumps(d)


def test_find_traces_by_content_replica_and_rank(tmp_path):
    g0, g1, t1 = tmp_path / "groups/replica0", tmp_path / "groups/replica1", tmp_path / "traces/replica1"
    (g0 / "output/profiles").mkdir(parents=True)
    (g0 / "output/profiles/step-10.json").write_text(_trace())
    (g0 / "config.json").write_text(json.dumps({"lr": 1}))  # not a trace
    (g0 / "broken.json").write_text("{ nope")
    g1.mkdir(parents=True)
    t1.mkdir(parents=True)
    (g1 / "any-name.json.gz").write_bytes(gzip.compress(_trace(rank=1).encode()))
    (t1 / "rank_0.json").write_text(_trace())
    found = find_traces({0: [g0, tmp_path / "traces/replica0"], 1: [g1, t1]}, nproc=2)
    got = [(f.path.relative_to(tmp_path).as_posix(), f.replica, f.rank, f.rank_source) for f in found]
    assert got == [
        ("groups/replica0/output/profiles/step-10.json", 0, None, "unknown"),
        ("groups/replica1/any-name.json.gz", 1, 1, "trace metadata"),
        ("traces/replica1/rank_0.json", 1, 0, "path"),
    ]
    assert find_traces({0: [g0]}, nproc=1)[0].rank == 0


def test_sniff_rejects_json_without_trace_events(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"events": []}))
    assert sniff(p) is None


# --- a launch manifest read back by inspect-trace -------------------------------------------


def test_manifest_without_schedule_takes_the_flags_or_says_what_is_missing(tmp_path):
    from ftrun.check.expect import schedule_for
    from ftrun.trace.discover import Inputs, TraceFile

    m = msgspec.convert(
        {
            "ftrun_version": "0",
            "job_id": "j",
            "run_name": "x",
            "script": "s.py",
            "args": [],
            "python": "py",
            "env_added": {},
            "schedule": {"steps": None},
            "replicas": 2,
            "nproc_per_replica": 1,
            "lighthouse": "",
            "min_replicas": 1,
            "restarts": 0,
            "timeout_s": 1.0,
            "seconds": 1.0,
            "groups": [],
            "launch_faults": {},
            "traces": [],
        },
        LaunchManifest,
    )
    inputs = Inputs([TraceFile(tmp_path / "t.json")], run_dir=tmp_path, manifest=m)
    s = schedule_for(inputs, 2, 4, 1)
    assert (s.fragments, s.sync_every, s.fragment_sync_delay) == (2, 4, 1)
    with pytest.raises(BadInput, match="records no schedule"):
        schedule_for(inputs, None, None, None)
    m.schedule = LaunchSchedule(fragments=2, sync_every=8, fragment_sync_delay=1)
    with pytest.raises(BadInput, match="--sync-every 4 disagrees"):
        schedule_for(inputs, 2, 4, 1)


def test_launch_manifest_lists_only_traces_with_a_rank(script, tmp_path):
    from ftrun.launch.script import launch_manifest
    from ftrun.trace.harvest import FoundTrace

    spec = LaunchSpec.build([str(script), "--x"], LaunchOptions(step_numbering="end", env=["A=1"], **SCHED))
    g = script_group(spec, tmp_path, 0, "http://l:1", None, base_env={})
    g.exit_codes = [0]
    found = [
        FoundTrace(tmp_path / "groups/replica0/a.json", 0, 0, "one rank per group"),
        FoundTrace(tmp_path / "groups/replica0/b.json", 0, None, "unknown"),
    ]
    written = launch_manifest(spec, tmp_path, "http://l:1", [g], {0: "exited"}, [], found, 1.0)
    m = json.loads(layout.to_json(written, indent=1))  # as the file holds it
    assert [t["path"] for t in m["traces"]] == ["groups/replica0/a.json"]
    assert m["step_numbering"] == "end" and m["args"] == ["--x"] and m["env_added"]["A"] == "1"
    assert m["groups"][0] == {
        "replica": 0,
        "cwd": "groups/replica0",
        "log": "logs/replica0.log",
        "state": "exited",
        "exit_codes": [0],
        "restarts": 0,
    }
    assert {k: m["schedule"][k] for k in SCHED} == SCHED and m["schedule"]["steps"] is None
    assert m["format"] == layout.FORMAT and m["kind"] == "launch"
    assert m["launch_faults"] == {"requested": [], "fired": []}
    (tmp_path / layout.MANIFEST).write_text(json.dumps(m))
    read = layout.read_manifest(tmp_path)  # what inspect-trace reads back
    assert isinstance(read, LaunchManifest) and read == written
    assert read.step_numbering == "end" and [t.rank_source for t in read.traces] == ["one rank per group"]


def test_restarts_default_like_train(script):
    assert LaunchSpec.build([str(script)], LaunchOptions(**SCHED)).restarts == 0
    assert LaunchSpec.build([str(script)], LaunchOptions(kill=["1@5s"], **SCHED)).restarts == 1
    assert LaunchSpec.build([str(script)], LaunchOptions(kill=["1@5s"], restarts=0, **SCHED)).restarts == 0
    with pytest.raises(BadInput, match="--restarts -1"):
        LaunchSpec.build([str(script)], LaunchOptions(restarts=-1, **SCHED))
