"""The numeric check of a real GPU kill run (``tests/data/h200_kill_run``): replica 1, SIGKILLed at
the start of step 15 by ``--kill 1@15``, had sent fragment 0 at step 12, but on a GPU a rank
writes its send's sketch with the sync step's record, which it never wrote. The fired fault
explains the missing sketch: that sync is not checked, naming the kill; without the fault it is a
problem. No process."""

from __future__ import annotations

from pathlib import Path

from ftrun import layout
from ftrun.check.fired_faults import fault_marks
from ftrun.check.numerics import check_numerics
from ftrun.event_log import read_event_log

RUN = Path(__file__).parent.parent / "data" / "h200_kill_run"
MISSING = "sketch missing"


def test_sync_of_the_round_the_kill_cut_is_not_checked_and_names_the_kill():
    logs = {(r, 0): read_event_log(RUN / "events" / f"replica{r}_rank0.jsonl") for r in range(3)}
    faults = fault_marks([RUN], [layout.read_train_manifest(RUN)], logs)
    (mark,) = faults.marks
    assert (mark.replica, mark.action, mark.step, mark.manager_step) == (1, "kill", 15, 2)
    bare = check_numerics(logs, sketches_on=True)  # what the run's summary said: FAIL
    assert [(p.check, p.sync_step, p.replica) for p in bare.problems] == [(MISSING, 15, 0), (MISSING, 15, 2)]
    out = check_numerics(logs, sketches_on=True, faults=faults)
    assert out.ok and out.status == "checked" and out.checked == bare.checked == 3  # syncs 5, 10 and 20
    ((why, n),) = out.not_checked.items()
    assert n == 2 and "injected fault" in why and "replica 1, SIGKILL at step 15" in why
