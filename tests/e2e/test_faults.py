"""Fault tolerance you can watch: real torchft groups on Gloo, killed, hung and restarted.

Each test runs the real ``ftrun train`` and checks, from the run's own files, what torchft did:
quorum changes, heals, agreement after recovery, and that no process outlives the run.
"""

from __future__ import annotations

import json
import subprocess
import threading

import pytest

from train_fixtures import FTRUN, SMALL, run_train

# small model + a sleep per step: slow enough that a restarted group (a fresh torchrun, torch
# import, Manager) rejoins before the others finish, fast on 2 cores.
FAULT_RUN = [*SMALL, "--profile", "none", "--sync-every", "10", "--fragments", "2", "--fragment-sync-delay", "3"]


def _events(run_dir, replica):
    path = run_dir / "events" / f"replica{replica}_rank0.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.mark.e2e
def test_kill_one_of_three_with_restart_recovers(tmp_path):
    # no spare steps for the relaunch: however long it takes, the survivors train past --steps
    # until it has rejoined and committed (ftrun.worker.stop); that wait is this test's margin
    run = run_train(
        tmp_path,
        "kill",
        *FAULT_RUN,
        "--replicas",
        "3",
        "--steps",
        "80",
        "--step-sleep-ms",
        "120",
        "--kill",
        "1@25",
        "--restarts",
        "1",
        "--profile",
        "21:60",
        timeout=240,
    )
    assert run.rc == 0, run.explain()
    assert not run.survivors, run.survivors
    s = run.summary()
    rec = s["faults"]  # what happened; s["recovery"]: where the time went (ftrun.check.recovery)
    # the fault fired at its step, the group was relaunched and healed from a live peer
    assert [f["step"] for f in rec["faults"]] == [25] and rec["faults"][0]["action"] == "kill"
    assert rec["restarts"] == 1
    assert len(rec["heals"]) == 1 and rec["heals"][0]["replica"] == 1 and rec["heals"][0]["source_replica"] in (0, 2)
    assert rec["faults"][0]["recovered_s"] is not None
    last = {r["replica"]: r["last_step"] for r in s["replicas"]}
    assert last[0] == last[1] == last[2] == 80 + rec["extra_steps"], (last, rec["extra_steps"])
    # quorum went 3 -> 2 (group 1 gone) -> 3 (group 1 back)
    sizes = [len(q["participants"]) for q in rec["quorum_changes"]]
    assert sizes[0] == 3 and 2 in sizes and sizes[-1] == 3, rec["quorum_changes"]
    assert 1 not in next(q for q in rec["quorum_changes"] if len(q["participants"]) == 2)["participants"]
    # replicas agreed after every commit, including those after the heal
    assert s["agreement"]["ok"] and s["agreement"]["commits_checked"] >= 8
    healed_at = rec["heals"][0]["step"]
    r1 = [x for x in _events(run.run_dir, 1) if x.get("step") is not None]
    assert any(x["step"] > healed_at and x.get("commit") for x in r1)
    # the run's own log tells the story, and inspect-trace still passes on the run dir
    kinds = [json.loads(x)["event"] for x in (run.run_dir / "events" / "run.jsonl").read_text().splitlines()]
    assert kinds[:2] == ["group_exit", "restart"]
    res = subprocess.run(
        [*FTRUN, "inspect-trace", str(run.run_dir), "--json"], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    report = json.loads(res.stdout)
    assert report["verdict"] == "pass"
    # ... and marks the steps replica 1 lost: from the kill to the step it rejoined at
    assert report["replicas"] == [0, 2]  # the killed incarnation never exported; the restart is not profiled
    (f,) = report["faults"]
    r1_back = next(x for x in _events(run.run_dir, 1) if x.get("rejoined"))
    assert (f["replica"], f["action"], f["step"]) == (1, "kill", 25)
    assert f["rejoined_step"] == r1_back["step"] and f["lost_steps"] == [25, r1_back["step"] - 1]
    assert not f["never_rejoined"] and not f["has_trace"]
    assert f["heal"]["source_replica"] == rec["heals"][0]["source_replica"]
    assert f["heal"]["manager_step"] == rec["heals"][0]["manager_step"]
    assert f"lost steps 25-{r1_back['step'] - 1}" in f["text"]
    assert report["agreement"]["ok"] and not report["problems"]
    # participants changed 3 -> 2 -> 3 and the healed group contributed: every sync's numbers held,
    # and the healed replica's parameters equal its source's (the numeric check, ftrun.check.numerics)
    num = s["numerics"]
    assert num["status"] == "checked" and not num["problems"] and num["checked"] >= 15, num
    assert report["numerics"]["checked"] == num["checked"] and not report["numerics"]["problems"]
    (h,) = num["heals"]
    assert h["replica"] == 1 and h["source_replica"] == rec["heals"][0]["source_replica"] and h["params_match"] is True
    assert h["fragments_checked"] == 2 and h["first_contribution"]["follows_rule"] is True


@pytest.mark.e2e
def test_baby_gloo_commits_as_the_release_does(tmp_path):
    """Version-specific: ``--backend baby-gloo`` on torchft 0.2.x fails every commit (its Baby
    PGs' managed-future bug: the run fails its agreement-free checks and inspect FAILs), on
    torchft-nightly it commits 4 of 4 and inspect PASSes."""
    from ftrun.torchft_compat import baby_pg_fails_commits, installed

    run = run_train(
        tmp_path,
        "baby",
        *SMALL,
        "--replicas",
        "2",
        "--steps",
        "8",
        "--sync-every",
        "4",
        "--fragments",
        "2",
        "--fragment-sync-delay",
        "1",
        "--backend",
        "baby-gloo",
        timeout=180,
    )
    res = subprocess.run(
        [*FTRUN, "inspect-trace", str(run.run_dir), "--json"], capture_output=True, text=True, timeout=120
    )
    report = json.loads(res.stdout)
    if baby_pg_fails_commits(installed()):  # torchft 0.2.x
        assert report["failed_commits"] and not any(c["explained_by_fault"] for c in report["failed_commits"])
        assert res.returncode == 1 and any("no injected fault explains" in p for p in report["problems"])
    else:  # torchft-nightly
        assert run.rc == 0, run.explain()
        assert [(r["commits"], r["failed_commits"]) for r in run.summary()["replicas"]] == [(4, 0), (4, 0)]
        assert res.returncode == 0 and report["failed_commits"] == [], report["problems"]


@pytest.mark.e2e
def test_kill_without_restart_below_min_replicas_fails_clearly(tmp_path):
    run = run_train(
        tmp_path,
        "lost",
        *FAULT_RUN,
        "--replicas",
        "2",
        "--min-replicas",
        "2",
        "--steps",
        "60",
        "--kill",
        "1@15",
        "--restarts",
        "0",
        "--quorum-timeout",
        "6",
        timeout=180,
    )
    assert run.rc == 1, run.explain()
    assert not run.survivors, run.survivors
    err = run.stderr.strip().splitlines()[-1]
    assert "no quorum" in err and "--min-replicas is 2" in err and "SIGKILL at step 15" in err, err
    assert "Traceback" not in run.stderr


@pytest.mark.e2e
def test_kill_without_restart_survivors_carry_on(tmp_path):
    run = run_train(
        tmp_path,
        "carry",
        *FAULT_RUN,
        "--replicas",
        "2",
        "--steps",
        "40",
        "--kill",
        "1@15",
        "--restarts",
        "0",
        timeout=180,
    )
    assert run.rc == 0, run.explain()
    s = run.summary()
    by = {r["replica"]: r for r in s["replicas"]}
    assert by[0]["last_step"] == 40 and by[1]["lost"] == "SIGKILL at step 15"
    assert not run.survivors


@pytest.mark.e2e
def test_hang_longer_than_stall_timeout_is_reported_and_stopped(tmp_path):
    run = run_train(
        tmp_path,
        "hang",
        *FAULT_RUN,
        "--replicas",
        "2",
        "--steps",
        "40",
        "--hang",
        "1@12:60",
        "--stall-timeout",
        "5",
        timeout=150,
    )
    assert run.rc == 1, run.explain()
    assert not run.survivors, run.survivors
    err = run.stderr.strip().splitlines()[-1]
    assert "replica group 1 made no progress for 5 s" in err and "after step 11" in err, err
    assert run.wall_s < 100


@pytest.mark.e2e
def test_two_concurrent_runs_on_one_host(tmp_path):
    results = {}

    def one(name):
        results[name] = run_train(
            tmp_path,
            name,
            *SMALL,
            "--steps",
            "20",
            "--sync-every",
            "10",
            "--fragment-sync-delay",
            "2",
            "--profile",
            "none",
            timeout=240,
        )

    threads = [threading.Thread(target=one, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for _name, run in results.items():
        assert run.rc == 0, run.explain()
        assert run.summary()["ok"] and not run.survivors


@pytest.mark.e2e
@pytest.mark.parametrize(
    "kill,hang,message",
    [
        (["3@10"], [], "replica group 3 does not exist"),
        (["1@999"], [], "outside 1..--steps"),
        (["1-10"], [], "expected REPLICA@STEP"),
        ([], ["1@10"], "expected REPLICA@STEP:SECONDS"),
        ([], ["1@10:0"], "SECONDS must be > 0"),
        (["1@10", "1@10"], [], "same fault"),
        (["fail:2@10"], [], "replica group 2 does not exist"),
        (["fail:1-5"], [], "--fail-commit '1-5': expected REPLICA@STEP"),
    ],
)
def test_bad_fault_specs_are_one_line_exit_2(tmp_path, kill, hang, message):
    args = [a for k in kill for a in (("--fail-commit", k[5:]) if k.startswith("fail:") else ("--kill", k))]
    args += [a for h in hang for a in ("--hang", h)]
    res = subprocess.run(
        [*FTRUN, "train", "--out", str(tmp_path), "--steps", "40", *args], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], res.stderr
    assert not list(tmp_path.iterdir()), "nothing may be created for a bad input"
