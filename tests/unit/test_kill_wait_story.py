"""One story when a relaunched group never rejoins within --quorum-timeout (issue 42 item 13):
the survivors trained past --steps waiting for it, then stopped; train's summary, inspect-trace's
fault line and the recovery breakdown give the same cause. From the recorded kill run (no process)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ftrun import layout
from ftrun.event_log import read_event_log

KILL_RUN = Path(__file__).parent.parent / "data" / "kill_run"  # --replicas 3 --steps 60 --kill 1@25 (trimmed)
CAUSE = (
    "not back within --quorum-timeout 60 s: the others trained 4 step(s) past --steps 60 waiting for it, then stopped"
)


def _gave_up(tmp_path: Path) -> Path:
    """The kill run as the survivors would end it if group 1's relaunch never came back in time:
    groups 0 and 2 train steps 61-64 waiting, stop; group 1 comes back alone after that."""
    run = tmp_path / "run"
    shutil.copytree(KILL_RUN, run)
    end = 0.0
    for r in (0, 2):
        log = run / "events" / f"replica{r}_rank0.jsonl"
        recs = [json.loads(ln) for ln in log.read_text().splitlines() if ln.strip()]
        last = recs[-1]
        extra = [
            {
                **last,
                "step": s,
                "sent": None,
                "synced": None,
                "commit": None,
                "fingerprint": None,
                "t": last["t"] + s - 60,
            }
            for s in range(61, 65)
        ]
        for k in ("sync_s", "exposed_s", "commit_s"):
            for x in extra:
                x.pop(k, None)
        end = max(end, extra[-1]["t"])
        log.write_text("".join(json.dumps(x) + "\n" for x in recs + extra))
    log = run / "events" / "replica1_rank0.jsonl"
    recs = [json.loads(ln) for ln in log.read_text().splitlines() if ln.strip()]
    keep = [x for x in recs if x["restart"] == 0]
    alone = {
        **{k: v for k, v in keep[-1].items() if k not in ("healed", "rejoined", "quorums")},
        "step": None,
        "restart": 1,
        "participants": 1,
        "t": end + 2.0,
        "rejoined": {"local_step": 5, "aligned_step": 65},
        "quorums": [
            {"quorum_id": 9, "participants": [1], "replica_rank": 0, "max_step": 0, "heal": False, "heal_source": None}
            | {"t": end + 1.9}
        ],
    }
    log.write_text("".join(json.dumps(x) + "\n" for x in keep + [alone]))
    return run


def _logs(run: Path) -> dict[tuple[int, int], list[layout.EventRecord]]:
    return {(r, 0): read_event_log(run / "events" / f"replica{r}_rank0.jsonl") for r in range(3)}


def test_summary_inspect_and_breakdown_give_one_cause(tmp_path):
    from ftrun.check.fired_faults import describe, fault_marks
    from ftrun.check.recovery import recovery_of_run_dir
    from ftrun.launch.results import fault_history

    run = _gave_up(tmp_path)
    manifest = layout.read_train_manifest(run)
    assert any(e.event == "restart" and e.replica == 1 for e in manifest.run_events)
    rec = fault_history(_logs(run), manifest)
    (f,) = rec.faults
    assert rec.extra_steps == 4 and f.recovered_s is None and f.cause == CAUSE, rec
    (mark,) = fault_marks([run], [manifest], _logs(run)).marks
    assert mark.late_step == 65 and mark.last_step == 64 and CAUSE in describe(mark), describe(mark)
    (x,) = recovery_of_run_dir(run)
    assert x.total_s is None and x.reasons["catch_up"] == CAUSE, x.reasons
