"""Several hosts, over loopback: ``ftrun lighthouse`` + one ``ftrun train --replica-group-id K`` per
"host", then ``inspect-trace`` and ``compare`` on the group run dirs as one run.

One lighthouse and one two-group job per module (about 10 s on 2 cores); the lighthouse is
stopped with SIGINT at the end of the fixture and must leave no process behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from train_fixtures import FTRUN, SMALL, TreeWatch, lighthouse_url, survivors

pytestmark = pytest.mark.e2e  # every test here starts processes (or uses a fixture that trains)

STEPS = "40"


@dataclass
class Job:
    out: Path
    url: str
    groups: list[dict]  # per group: rc, stdout, stderr, survivors
    lighthouse_rc: int | None
    lighthouse_children: list[str]
    lighthouse_survivors: list[str]

    def dir(self, k: int) -> Path:
        return self.out / f"job-group{k}"


def _start_lighthouse(log: Path) -> tuple[subprocess.Popen, TreeWatch, str]:
    argv = [*FTRUN, "lighthouse", "--bind", "127.0.0.1:0", "--min-replicas", "2", "--join-timeout-ms", "10000"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log.open("wb"), text=True)
    watch = TreeWatch(proc.pid)
    try:
        return proc, watch, lighthouse_url(proc, log)
    except AssertionError:
        proc.kill()
        watch.stop()
        raise


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Job:
    out = tmp_path_factory.mktemp("multihost")
    lh, lh_watch, url = _start_lighthouse(out / "lighthouse.log")
    groups: list[dict] = []
    try:
        procs = []
        for k in (0, 1):  # as if on two hosts: nothing shared but the lighthouse URL and the run name
            argv = [
                *FTRUN,
                "train",
                "--lighthouse",
                url,
                "--replica-group-id",
                str(k),
                "--num-replica-groups",
                "2",
                "--run-name",
                "job",
                "--steps",
                STEPS,
                *SMALL,
                "--out",
                str(out),
            ]
            p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            procs.append((k, p, TreeWatch(p.pid)))
        for k, p, watch in procs:
            try:
                stdout, stderr = p.communicate(timeout=240)
            except subprocess.TimeoutExpired:
                p.kill()
                stdout, stderr = p.communicate()
            watch.stop()
            groups.append(
                {
                    "rc": p.returncode,
                    "stdout": stdout,
                    "stderr": stderr,
                    "survivors": survivors(watch, str(out / f"job-group{k}")),
                }
            )
    finally:
        children = [c for c in lh_watch.seen.values() if "lighthouse_entry" in c]
        lh.send_signal(signal.SIGINT)
        try:
            rc = lh.wait(timeout=15)
        except subprocess.TimeoutExpired:
            rc = None
        lh_watch.stop()
        left = survivors(lh_watch, f"no-such-process-{uuid.uuid4().hex}")
        for entry in left:  # never leak into the next test
            try:
                os.kill(int(entry.split()[0]), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        if rc is None:
            lh.kill()
    return Job(out, url, groups, rc, children, left)


def inspect(*paths: Path, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*FTRUN, "inspect-trace", *map(str, paths), *extra], capture_output=True, text=True, timeout=120
    )


def test_both_groups_train_against_one_lighthouse(job: Job) -> None:
    for k, g in enumerate(job.groups):
        assert g["rc"] == 0, f"group {k}: {g['stdout'][-2000:]}\n{g['stderr'][-2000:]}"
        assert not g["survivors"], g["survivors"]
    m0, m1 = (json.loads((job.dir(k) / "manifest.json").read_text()) for k in (0, 1))
    assert m0["job_id"] == m1["job_id"] and m0["replicas"] == m1["replicas"] == 2
    assert [t["replica"] for t in m0["traces"]] == [0] and [t["replica"] for t in m1["traces"]] == [1]


def test_lighthouse_stops_on_sigint_and_leaves_nothing(job: Job) -> None:
    assert job.url.startswith("http://127.0.0.1:")
    assert job.lighthouse_children, "the lighthouse child was never seen"
    assert job.lighthouse_rc == 130  # stopped by SIGINT: 130, as every ftrun command
    assert not job.lighthouse_survivors, job.lighthouse_survivors


def test_inspect_merges_the_groups_of_one_job(job: Job) -> None:
    res = inspect(job.dir(0), job.dir(1), extra=("--json",))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
    d = json.loads(res.stdout)
    assert d["verdict"] == "pass" and d["replicas"] == [0, 1]
    assert d["run_dirs"] == [str(job.dir(0)), str(job.dir(1))]
    assert d["job_id"] == json.loads((job.dir(0) / "manifest.json").read_text())["job_id"]
    # cross-replica checks across the two groups: every profiled send and sync, both replicas
    assert d["cross_replica"] and all(c["ok"] and set(c["fragments"]) == {"0/0", "1/0"} for c in d["cross_replica"])
    assert {e["replica"] for e in d["events"]} == {0, 1}
    # fingerprints compared across the two groups' event logs
    assert d["agreement"]["ok"] and d["agreement"]["commits_checked"] >= 2
    assert not d["faults"] and not d["problems"]
    # the rich view says what was merged
    res = inspect(job.dir(0), job.dir(1))
    assert res.returncode == 0 and "2 run dirs merged" in res.stdout and "PASS" in res.stdout


def test_one_group_alone_passes_with_a_note(job: Job) -> None:
    res = inspect(job.dir(1), extra=("--json",))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr
    d = json.loads(res.stdout)
    assert d["replicas"] == [1] and any("job has 2 replica groups" in n for n in d["notes"])


def _doctored(job: Job, tmp_path: Path, **changes) -> Path:
    """A copy of group 1's run dir whose manifest says it belongs to another job / schedule."""
    other = tmp_path / "other-group1"
    shutil.copytree(job.dir(1), other)
    m = json.loads((other / "manifest.json").read_text())
    for k, v in changes.items():
        if k in m["schedule"]:
            m["schedule"][k] = v
        else:
            m[k] = v
    (other / "manifest.json").write_text(json.dumps(m))
    return other


@pytest.mark.parametrize(
    "changes,needle",
    [
        ({"job_id": "job-0123456789ab"}, "not a replica group of the same job"),
        ({"sync_every": 10}, "schedule differs"),
    ],
)
def test_mixing_two_jobs_is_refused_in_one_line(job: Job, tmp_path: Path, changes, needle) -> None:
    other = _doctored(job, tmp_path, **changes)
    res = inspect(job.dir(0), other)
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and str(other) in lines[0], res.stderr
    assert "Traceback" not in res.stderr


def test_same_group_twice_is_refused(job: Job, tmp_path: Path) -> None:
    copy = tmp_path / "job-group0-copy"
    shutil.copytree(job.dir(0), copy)
    res = inspect(job.dir(0), copy)
    assert res.returncode == 2 and "replica group 0 is also in" in res.stderr, res.stderr


def test_fingerprint_disagreement_across_groups_fails(job: Job, tmp_path: Path) -> None:
    g1 = tmp_path / "job-group1"
    shutil.copytree(job.dir(1), g1)
    log = g1 / "events" / "replica1_rank0.jsonl"
    recs = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    bad = next(r for r in recs if r.get("commit") and r.get("fingerprint"))
    bad["fingerprint"] = "0" * 32
    log.write_text("".join(json.dumps(r) + "\n" for r in recs))
    res = inspect(job.dir(0), g1, extra=("--json",))
    assert res.returncode == 1, res.stdout[-2000:] + res.stderr
    d = json.loads(res.stdout)
    assert not d["agreement"]["ok"]
    want = f"replicas disagree on the synced parameters after manager step {bad['manager_step_after']}"
    assert any(p.startswith(want) for p in d["problems"]), d["problems"]


def test_compare_reads_comma_separated_group_dirs(job: Job, tmp_path: Path) -> None:
    spec = f"{job.dir(0)},{job.dir(1)}"
    res = subprocess.run(
        [*FTRUN, "compare", spec, spec, "--out", str(tmp_path), "--json"], capture_output=True, text=True, timeout=180
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    d = json.loads(res.stdout)
    assert [r["name"] for r in d["runs"]] == ["job-a", "job-b"]
    for r in d["runs"]:
        assert r["verdict"] == "pass" and r["run_dirs"] == [str(job.dir(0)), str(job.dir(1))]
        assert len(r["steps_per_s_per_replica"]) == 2  # both groups' event logs were read
        assert r["syncs"] == 4 and r["commits"] == 4
    # a bad member of a list is one line, exit 2
    res = subprocess.run(
        [*FTRUN, "compare", f"{job.dir(0)},{tmp_path / 'nope'}", spec, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "nope" in res.stderr, res.stderr
