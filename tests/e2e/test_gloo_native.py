"""``--backend gloo-native`` end to end: torch's own reconfigurable Gloo group under torchft-nightly's
Manager (``ftrun.worker.native_pg``), its bootstrap store hosted by ftrun (``ftrun.launch.native_store``).

Runs only where the installed torchft and torch offer it (torchft-nightly, torch >= 2.14: CI's
nightly leg on torch 2.14.1); elsewhere skipped with the refusal ``ftrun train`` gives. Two runs:
a streaming run with a kill and one restart (PASS, numerics held on every sync, the group healed
over the native group and its numbers checked) and a plain DiLoCo run (PASS, numerics)."""

from __future__ import annotations

import json

import pytest

from ftrun.torchft_compat import backend_unavailable, installed
from train_fixtures import SMALL, run_train

pytestmark = pytest.mark.e2e

WHY_NOT = backend_unavailable("gloo-native", installed())
needs_native = pytest.mark.skipif(WHY_NOT is not None, reason=f"needs torchft-nightly and torch >= 2.14: {WHY_NOT}")


def _native_store_was_used(run) -> None:
    """The spec named ftrun's bootstrap store, the store child said it listened there, every
    quorum's handles carried a native Gloo handle on it, and the child is gone after the run."""
    spec = json.loads((run.run_dir / "spec.json").read_text())
    store = spec["native_store"]
    assert store and (run.run_dir / "logs" / "native_store.log").read_text().strip() == f"listening on {store}"
    assert '\\"native\\": \\"gloo:0:' in (run.run_dir / "logs" / "replica0.log").read_text()
    assert not run.survivors, run.survivors


@needs_native
def test_streaming_with_a_kill_heals_over_the_native_group(tmp_path):
    run = run_train(
        tmp_path,
        "kill",
        *SMALL,
        "--backend",
        "gloo-native",
        "--fragments",
        "2",
        "--sync-every",
        "10",
        "--fragment-sync-delay",
        "3",
        "--steps",
        "40",
        "--step-sleep-ms",
        "120",
        "--kill",
        "1@15",
        "--restarts",
        "1",
        # the schedule's window before the kill; the survivors train on unprofiled until the
        # relaunched group (its imports: tens of seconds on a busy host) rejoined and committed
        "--profile",
        "4:13",
        "--profile-recovery",
        "off",
        timeout=300,
    )
    assert run.rc == 0, run.explain()
    s = run.summary()
    assert s["backend"] == "gloo-native" and s["check"]["verdict"] == "pass", s["check"]
    _native_store_was_used(run)
    rec = s["faults"]
    assert rec["restarts"] == 1 and [f["step"] for f in rec["faults"]] == [15]
    (heal,) = rec["heals"]
    assert heal["replica"] == 1 and heal["source_replica"] == 0
    assert rec["faults"][0]["recovered_s"] is not None
    num = s["numerics"]
    assert num["status"] == "checked" and not num["problems"] and num["checked"] >= 4, num
    (h,) = num["heals"]
    assert h["replica"] == 1 and h["params_match"] is True and h["first_contribution"]["follows_rule"] is True
    assert s["agreement"]["ok"]


@needs_native
def test_plain_diloco_passes_with_numerics(tmp_path):
    run = run_train(
        tmp_path, "plain", *SMALL, "--backend", "gloo-native", "--mode", "baseline", "--sync-every", "4", "--steps", "8"
    )
    assert run.rc == 0, run.explain()
    s = run.summary()
    assert s["check"]["verdict"] == "pass", s["check"]
    num = s["numerics"]
    assert num["status"] == "checked" and not num["problems"] and num["checked"] >= 1, num
    _native_store_was_used(run)
