"""The numeric check on a user's own torchft script under ``ftrun launch`` (issue 41 item 3): the
launch hook (``ftrun.launch.autohook``) sketches ``tests/torchft_example.py``'s own DiLoCo, the
script unchanged. A clean launch checks every sync (test_launch_e2e's launch of the same script
is that clean launch); torchft patched to divide the SUM by the
job's replica groups instead of the quorum's participants FAILs once a group trains alone (a
kill); a script averaging with LocalSGD says once why numerics were not checked. The patched
torchft is a copy of the installed package first on the groups' ``PYTHONPATH`` (the venv is never
modified); the hook's own entry goes before it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ftrun import layout
from train_fixtures import FTRUN, NATIVE_CRASH, flat, patched_torchft

pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).resolve().parents[1] / "torchft_example.py"
SCHED = ["--fragments", "2", "--sync-every", "4", "--fragment-sync-delay", "1"]
# torchft's Manager divides the SUM by the quorum's participants; the bug: by the job's groups
DIVIDE_BY_GROUPS = ("tensor /= num_participants", 'tensor /= int(os.environ["NUM_REPLICA_GROUPS"])')


def launch(out: Path, name: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    argv = [*FTRUN, "launch", "--out", str(out), "--run-name", name, *args]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})})
    return res.returncode, res.stdout, f"rc={res.returncode}\n{res.stdout[-4000:]}\n{res.stderr[-3000:]}"


SLOW_RELAUNCHED_IMPORT = """\
import os as _os, time as _time
if _os.environ.get("FTRUN_RESTART", "0") not in ("", "0"):
    _time.sleep(4.0)
"""


def test_patched_divide_fails_the_launch_with_its_cause(tmp_path):
    env = patched_torchft(tmp_path / "torchft-divide", "manager.py", *DIVIDE_BY_GROUPS)
    # the relaunched incarnation's ranks wait 4 s when they import the manager: replica 0 then
    # surely trains rounds alone (on a quiet machine a relaunch could otherwise be back before
    # replica 0's next quorum, and no round of one would show the divide)
    manager = tmp_path / "torchft-divide" / "torchft" / "manager.py"
    manager.write_text(SLOW_RELAUNCHED_IMPORT + manager.read_text())
    # --min-replicas 1: replica 0 trains alone while replica 1 is killed and relaunched (the
    # quorum's one participant is not the job's 2 groups); a sleep per step keeps the kill
    # between steps (a record is written at each step's end)
    rc, out, explain = launch(
        tmp_path,
        "divide",
        *SCHED,
        "--min-replicas",
        "1",
        "--kill",
        "1@line:inner step 7 ",
        "--",
        str(SCRIPT),
        "--manager-steps",
        "12",
        "--step-sleep",
        "0.2",
        env=env,
    )
    assert rc == 1, explain
    s = layout.read_launch_summary(tmp_path / "divide")
    assert s.check is not None and s.check.verdict == "fail" and s.check.line is not None, explain
    line = flat(s.check.line)
    assert line.startswith("FAIL ") and "first: numerics: sync step" in line, line
    assert "divided by participants + 1 = 2 instead of 1 participants (the world size instead" in line, line
    problems = (s.inspection or {})["numerics"]["problems"]
    # (either group may have trained alone first, before the other joined: a round of one too)
    assert problems and all(p["check"] == "average" and "participants + 1" in p["cause"] for p in problems), problems


def test_a_script_without_diloco_says_once_why_numerics_were_not_checked(tmp_path):
    """LocalSGD averages parameters with no outer optimizer: nothing for the sketches to hook. The
    schedule check has no DiLoCo send or sync either (exit 1, "nothing checked"); the launch says
    once why numerics were not checked."""
    rc, out, explain = launch(tmp_path, "lsgd", *SCHED, "--", str(SCRIPT), "--manager-steps", "3", "--local-sgd")
    assert rc == 1, explain
    said = flat(out)
    assert said.count("numerics not checked:") == 1, explain
    assert "numerics not checked: torchft_example.py averages with torchft's LocalSGD" in said, explain
    assert not list((tmp_path / "lsgd" / "events").glob("*.jsonl"))  # no event log: nothing sketched


# torchft's DiLoCo picks the fragment to send and sync from the manager step; the bug: replica
# group 1 walks its three fragments in the order 1, 0, 2 (equal sizes: the collectives match)
SWAPPED_ORDER = (
    "        step = self._manager.current_step()\n        return step % len(self._fragments)\n",
    "        step = self._manager.current_step()\n"
    "        n = len(self._fragments)\n"
    '        order = [1, 0, 2] if os.environ.get("REPLICA_GROUP_ID") == "1" and n == 3 else list(range(n))\n'
    "        return order[step % n]\n",
)


# Replicas that allreduce different fragments in one Gloo collective are the bug this test
# patches in: a rank of the script has died of it by SIGSEGV in a Gloo thread (its main thread
# waiting on the collective), once in a suite run: rerun once for that signature only.
@NATIVE_CRASH
def test_replicas_syncing_different_fragments_fail_from_torchfts_log_lines(tmp_path):
    """Issue 40 item 3: equal-sized fragments, so the traces cannot tell them apart; the hook raises
    torchft's local_sgd logger to INFO, its ``Preparing/Syncing fragment=N`` lines reach the group
    logs, and the check reads the fragments from them: the replicas disagree."""
    env = patched_torchft(tmp_path / "torchft-order", "local_sgd.py", *SWAPPED_ORDER)
    sched = ["--fragments", "3", "--sync-every", "6", "--fragment-sync-delay", "1"]
    script_args = [*sched, "--equal-fragments", "--manager-steps", "6"]  # the script takes ftrun's flag names
    rc, out, explain = launch(tmp_path, "order", *sched, "--", str(SCRIPT), *script_args, env=env)
    assert rc == 1, explain
    logs = [(tmp_path / "order" / "logs" / f"replica{r}.log").read_text() for r in (0, 1)]
    assert all("Preparing fragment=" in g and "Syncing fragment=" in g for g in logs), explain
    s = layout.read_launch_summary(tmp_path / "order")
    assert s.check is not None and s.check.verdict == "fail" and flat(s.check.line or "").startswith("FAIL "), explain
    cross = [c["problem"] for c in (s.inspection or {})["cross_replica"] if not c["ok"]]
    assert any(p.startswith("replicas disagree on the sync at step ") for p in cross), cross
    assert "cross-replica: replicas disagree on the sync at step 2 (manager step 0)" in flat(out), explain
    # the sketches see it too: each replica's round lacks the other's send of the same fragment
    causes = {p["cause"] for p in (s.inspection or {})["numerics"]["problems"]}
    assert causes and all(c.startswith("replicas averaged different fragments in one collective") for c in causes)
