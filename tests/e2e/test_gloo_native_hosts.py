"""``--backend gloo-native`` across hosts: one replica group per network namespace (the two hosts
of ``test_hosts_netns.py``: a veth pair, each host's own name on 127.0.1.1), the lighthouse and
group 0 on host0, group 1 on host1, both with ``--native-store host0:PORT``. Group 0's ftrun hosts
the bootstrap store; group 1's ranks reach it across the veth pair (``host0`` resolves to host0's
address there, to loopback on host0 itself). Both groups commit every sync of a short plain
DiLoCo run over torch's native group, group 1 killed mid-round on host1, relaunched and healed
from group 0 across the hosts (the native group reconfigured for the new quorum).
``inspect-trace`` of both run dirs copied together passes, their fingerprints agreeing and the
numeric check holding on every sync and on the heal (it needs every group's sketches, so a single
group's own summary leaves it to this inspection), with the fault and its recovery breakdown.

Needs torchft-nightly and torch >= 2.14 (CI's nightly leg), root, ``ip`` and ``unshare``; skipped
with the reason otherwise.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
from test_hosts_netns import Hosts, ftrun_argv, hosts, stop  # noqa: F401  (hosts: the fixture)

from ftrun.torchft_compat import backend_unavailable, installed
from train_fixtures import FTRUN, SMALL, lighthouse_url

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        (why := backend_unavailable("gloo-native", installed())) is not None,
        reason=f"needs torchft-nightly and torch >= 2.14: {why}",
    ),
]

STORE = "host0:29520"
TRAIN = (
    "ftrun train --lighthouse http://host0:29510 --replica-group-id {k} --num-replica-groups 2 --run-name job1 "
    f"--backend gloo-native --native-store {STORE} --mode baseline --sync-every 4 --steps 12 "
    "--min-replicas 2"
)
KILL = ("--kill", "1@6", "--restarts", "1")  # group 1, on host1: killed mid-round, relaunched, healed from host0


def test_native_group_across_two_hosts(hosts: Hosts) -> None:  # noqa: F811
    log = hosts.tmp / "lighthouse.log"
    lh = hosts.popen("host0", ftrun_argv("ftrun lighthouse --bind 0.0.0.0:29510 --min-replicas 2"), log)
    try:
        assert lighthouse_url(lh, log) == "http://host0:29510"
        argv = {
            h: ftrun_argv(TRAIN.format(k=k), *SMALL, "--json", *(KILL if k else ()))
            for k, h in enumerate(("host0", "host1"))
        }
        trains = {h: hosts.popen(h, argv[h], hosts.tmp / f"{h}.train.log") for h in argv}
        summaries = {}
        for h, p in trains.items():
            out = p.communicate(timeout=180)[0]
            err = (hosts.tmp / f"{h}.train.log").read_text(errors="replace")
            assert p.returncode == 0, (h, out[-2000:], err[-3000:])
            summaries[h] = json.loads(out)
    finally:
        stop(lh)
    for k, h in enumerate(("host0", "host1")):
        run = hosts.tmp / h / "profiles" / f"job1-group{k}"
        spec = json.loads((run / "spec.json").read_text())
        assert spec["native_store"] == STORE and spec["config"]["hosts"]["native_store"] == STORE
        store_log = run / "logs" / "native_store.log"
        # group 0's ftrun hosts the store; group 1 only reaches it
        assert (f"listening on {STORE}" in store_log.read_text().splitlines()) if k == 0 else not store_log.exists()
        # every quorum handed the ranks both native handles (initial ranks 0 and 1)
        rank_log = (run / "logs" / f"replica{k}.log").read_text()
        assert '\\"native\\": \\"gloo:0:' in rank_log and '\\"native\\": \\"gloo:1:' in rank_log
        s = summaries[h]
        assert s["backend"] == "gloo-native" and [r["commits"] for r in s["replicas"]] == [3], s["replicas"]
    # group 1 killed at step 6 on host1, relaunched there, rejoined at the step-8 quorum and healed
    # from group 0 on host0 (across the veth pair), the native group reconfigured for that quorum
    rec = summaries["host1"]["faults"]
    assert rec["restarts"] == 1 and [(f["replica"], f["step"]) for f in rec["faults"]] == [(1, 6)], rec
    assert rec["faults"][0]["recovered_s"] is not None, rec
    assert [(x["replica"], x["source_replica"], x["step"]) for x in rec["heals"]] == [(1, 0, 8)], rec
    assert [q["participants"] for q in rec["quorum_changes"]] == [[0, 1], [0, 1]], rec
    # both run dirs together: one job, replicas agreeing on every commit
    both = hosts.tmp / "any" / "profiles"
    for k, h in enumerate(("host0", "host1")):
        shutil.copytree(hosts.tmp / h / "profiles" / f"job1-group{k}", both / f"job1-group{k}")
    r = subprocess.run(
        [*FTRUN, "inspect-trace", "profiles/job1-group0", "profiles/job1-group1"],
        cwd=both.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"fingerprints: replicas agreed after [1-9]\d* commit", r.stdout), r.stdout
    # the numeric check needs every group's sketches: the merged job's (the recovery section follows)
    verdict = next(ln for ln in r.stdout.splitlines() if ln.startswith(("PASS", "FAIL")))
    assert verdict.startswith("PASS") and "numerics ok (3 sync(s))" in verdict, r.stdout
    flat = " ".join(r.stdout.split())
    assert "heal of replica 1 from 0 at manager step 1: params match" in flat, r.stdout
    assert "fault: replica 1: SIGKILL at step 6" in flat and "recovery · kill 1@6" in flat, r.stdout
