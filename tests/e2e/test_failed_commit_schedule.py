"""Failed commits as torchft handles them (issue 40 item 6), on real torchft groups on Gloo.

A group whose commit fails while its peer commits heals from the peer at the next quorum and
sends the peer's fragment: it does not retry its own. The check sees that from the traces alone
(copied away from the run dir's manifest and event logs), and from a run ftrun did not write
(torchft's Manager patched so that one group always votes false): ``--allow-failed-commits``
accepts the failures and checks the rest (PASS); without it the verdict FAILs naming them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from train_fixtures import FOREIGN_FLAGS, FTRUN, SMALL, TrainRun, patched_torchft, run_foreign, run_train

# F=2, H=4, tau=1 (w=2: sends at 1, 3, 5, ...; syncs at 2, 4, 6, ...), every step profiled
SCHEDULE = ["--fragments", "2", "--sync-every", "4", "--fragment-sync-delay", "1"]
RUN = [*SMALL, "--replicas", "2", "--steps", "12", *SCHEDULE, "--profile", "1:12"]


def _traces_alone(run_dir: Path, dest: Path) -> Path:
    """The run's trace files in a folder of their own: no manifest, no event logs, no group logs."""
    dest.mkdir()
    for p in sorted((run_dir / "traces").iterdir()):
        shutil.copy(p, dest / p.name)
    return dest


def _inspect(folder: Path, *extra: str) -> tuple[int, dict]:
    res = subprocess.run(
        [*FTRUN, "inspect-trace", str(folder), *SCHEDULE, "--json", *extra], capture_output=True, text=True, timeout=120
    )
    assert res.returncode in (0, 1), res.stdout[-3000:] + res.stderr[-2000:]
    return res.returncode, json.loads(res.stdout)


def _verdict_line(folder: Path) -> str:
    res = subprocess.run([*FTRUN, "inspect-trace", str(folder), *SCHEDULE], capture_output=True, text=True, timeout=120)
    text = " ".join(res.stdout.split())
    return text[text.rfind("FAIL") if "FAIL" in text else text.rfind("PASS") :]


def _sends(report: dict, step: int) -> dict[int, int]:
    return {e["replica"]: e["fragment"] for e in report["events"] if e["kind"] == "send" and e["observed_step"] == step}


def _the_run_dir_explains_the_failed_commit(run: TrainRun) -> None:
    """With its manifest and event logs, the run's one failed commit (group 1 at step 6) is ftrun's
    own fault: counted, healed from group 0, explained; inspect-trace passes on the run dir."""
    run_dir, s = run.run_dir, run.summary()
    assert [(r["replica"], r["commits"], r["failed_commits"]) for r in s["replicas"]] == [(0, 6, 0), (1, 5, 1)]
    assert [x["step"] for x in run.events(1) if x.get("commit") is False] == [6]
    # why, in torchft's own words (Manager.errored(): the error --fail-commit reported to it)
    why = "RuntimeError: ftrun --fail-commit 1@5: this rank votes against the commit"
    assert [x.get("commit_error") for x in run.events(1) if x.get("commit") is False] == [why]
    assert [x["step"] for x in run.events(0) if x.get("commit") is False] == []
    rec = s["faults"]  # what happened; s["recovery"]: where the time went (ftrun.check.recovery)
    assert [(f["action"], f["replica"], f["step"]) for f in rec["faults"]] == [("fail-commit", 1, 5)]
    assert [(h["replica"], h["source_replica"]) for h in rec["heals"]] == [(1, 0)]
    assert s["agreement"]["ok"]
    marker = json.loads((run_dir / "faults" / "fail-commit-r1-s5.json").read_text())
    assert marker["fired_step"] == 6
    rc, report = _inspect(run_dir)
    assert rc == 0 and not report["problems"], report["problems"]
    assert [(c["replica"], c["sync_step"], c["explained_by_fault"]) for c in report["failed_commits"]] == [(1, 6, True)]
    assert report["failed_commits"][0]["torchft_error"] == why
    assert [(f["action"], f["sync_step"]) for f in report["faults"]] == [("fail-commit", 6)]
    assert _sends(report, 7) == {0: 1, 1: 1}  # healed past its failed commit: no retry


@pytest.mark.e2e
def test_a_failed_commit_heals_and_the_traces_alone_say_so(tmp_path):
    """--fail-commit 1@5 (the same on every torchft): group 1's commit at step 6 fails, group 0's
    succeeds; at the quorum of step 7's send group 1 heals and sends fragment 1 as group 0 does.
    The run dir explains the failure by the fault; the traces alone infer it."""
    run = run_train(tmp_path, "fc", *RUN, "--fail-commit", "1@5", timeout=240)
    assert run.rc == 0, run.explain()
    _the_run_dir_explains_the_failed_commit(run)
    alone = _traces_alone(run.run_dir, tmp_path / "alone")

    rc, report = _inspect(alone, "--allow-failed-commits")
    assert rc == 0 and report["verdict"] == "pass", report["problems"]
    assert not report["problems"]
    assert [(c["replica"], c["sync_step"], c["source"]) for c in report["failed_commits"]] == [(1, 6, "inferred")]
    assert all(w["failed_cycles"] == [] for w in report["workers"])  # no cycle repeats its fragment
    first = _sends(report, 5)[0]  # the fragment of the failed cycle (labels: classes, not proven ids)
    assert _sends(report, 5) == {0: first, 1: first}
    assert _sends(report, 7) == {0: 1 - first, 1: 1 - first}  # healed: the peer's next fragment, no retry

    rc, report = _inspect(alone)
    assert rc == 1 and report["verdict"] == "fail"
    assert report["problems"] == [
        "replica 1 rank 0: 1 commit(s) failed (sync steps 6; inferred: no outer step after should_commit) "
        "and no injected fault explains it (--allow-failed-commits to accept)"
    ]
    assert "1 commit(s) failed (sync steps 6" in _verdict_line(alone)


@pytest.mark.e2e
def test_a_group_that_always_votes_false_follows_its_peer(tmp_path):
    """Group 1 votes false at every sync (one --fail-commit per sync): it heals every round and
    its schedule is its peer's; the traces alone PASS with --allow-failed-commits."""
    every = [a for s in range(1, 12, 2) for a in ("--fail-commit", f"1@{s}")]
    run = run_train(tmp_path, "af", *RUN, *every, timeout=240)
    assert run.rc == 0, run.explain()
    alone = _traces_alone(run.run_dir, tmp_path / "alone")

    rc, report = _inspect(alone, "--allow-failed-commits")
    assert rc == 0 and report["verdict"] == "pass", report["problems"]
    assert [c["sync_step"] for c in report["failed_commits"] if c["replica"] == 1] == [2, 4, 6, 8, 10, 12]
    assert not [c for c in report["failed_commits"] if c["replica"] == 0]
    assert report["cross_replica"] and all(cc["ok"] for cc in report["cross_replica"])  # one schedule, both groups

    rc, report = _inspect(alone)
    assert rc == 1 and len(report["problems"]) == 1 and "6 commit(s) failed" in report["problems"][0]


# torchft's Manager, patched: group "foreign1" votes false at every should_commit (both releases)
ALWAYS_FALSE = (
    "local_should_commit = enough_replicas and self._errored is None",
    "local_should_commit = enough_replicas and self._errored is None"
    ' and not str(self._replica_id).startswith("foreign1")',
)


@pytest.mark.e2e
def test_a_foreign_run_whose_group_always_votes_false(tmp_path, monkeypatch):
    """tests/foreign_diloco.py (no ftrun in the run) on a torchft whose group 1 always votes
    false: group 0 commits and group 1 heals from it at every quorum; the traces say so."""
    env = patched_torchft(tmp_path / "torchft-always-false", "manager.py", *ALWAYS_FALSE)
    monkeypatch.setenv("PYTHONPATH", env["PYTHONPATH"])
    out = run_foreign(tmp_path / "run", "--uneven")
    files = sorted(str(p) for p in out.rglob("*.json"))
    code, report = _inspect_files(files, "--allow-failed-commits")
    assert code == 0 and report["verdict"] == "pass", report["problems"]
    failed = {(c["replica"], c["sync_step"]) for c in report["failed_commits"]}
    assert failed and {r for r, _ in failed} == {1}
    assert report["cross_replica"] and all(cc["ok"] for cc in report["cross_replica"])
    code, report = _inspect_files(files)
    assert code == 1 and len(report["problems"]) == 1 and "commit(s) failed" in report["problems"][0]


def _inspect_files(files: list[str], *extra: str) -> tuple[int, dict]:
    res = subprocess.run(
        [*FTRUN, "inspect-trace", *files, *FOREIGN_FLAGS, "--json", *extra], capture_output=True, text=True, timeout=120
    )
    assert res.returncode in (0, 1), res.stdout[-3000:] + res.stderr[-2000:]
    return res.returncode, json.loads(res.stdout)
