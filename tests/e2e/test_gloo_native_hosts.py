"""``--backend gloo-native`` across hosts: one replica group per network namespace (the two hosts
of ``test_hosts_netns.py``: a veth pair, each host's own name on 127.0.1.1), the lighthouse and
group 0 on host0, group 1 on host1, both with ``--native-store host0:PORT``. Group 0's ftrun hosts
the bootstrap store; group 1's ranks reach it across the veth pair (``host0`` resolves to host0's
address there, to loopback on host0 itself). Both groups commit every sync of a short plain
DiLoCo run over torch's native group; ``inspect-trace`` of both run dirs copied together passes,
their fingerprints agreeing and the numeric check holding on both syncs (it needs every group's
sketches, so a single group's own summary leaves it to this inspection).

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
    f"--backend gloo-native --native-store {STORE} --mode baseline --sync-every 4 --steps 8 "
    "--min-replicas 2"
)


def test_native_group_across_two_hosts(hosts: Hosts) -> None:  # noqa: F811
    log = hosts.tmp / "lighthouse.log"
    lh = hosts.popen("host0", ftrun_argv("ftrun lighthouse --bind 0.0.0.0:29510 --min-replicas 2"), log)
    try:
        assert lighthouse_url(lh, log) == "http://host0:29510"
        argv = {h: ftrun_argv(TRAIN.format(k=k), *SMALL, "--json") for k, h in enumerate(("host0", "host1"))}
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
        assert s["backend"] == "gloo-native" and [r["commits"] for r in s["replicas"]] == [2], s["replicas"]
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
    last = r.stdout.splitlines()[-1]  # the numeric check needs every group's sketches: the merged job's
    assert last.startswith("PASS") and "numerics ok (2 sync(s))" in last, r.stdout
