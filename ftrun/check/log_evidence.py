"""Evidence that cannot go missing silently: the event logs against themselves and the traces. Torch-free.

The numeric check (``ftrun.check.numerics``) counts what the event logs hold; a record that is
damaged or gone would only make a count smaller. So, before any count is trusted:

* the damage ``ftrun.event_log.read_event_log`` found in each log (a cut record the same
  incarnation wrote past, a malformed record, a step missing from an incarnation's run of steps),
  each naming file and line;
* every sync a worker's trace shows (``ftrun.check.observe``: its training step, from the
  trace's ``ftrun::step#S`` spans) must have that step's record with a sync in the worker's
  event log: "replica 1 rank 0's record of the sync at step 10 is missing". A trace numbered by
  ``ProfilerStep#k`` only (a foreign script) is not compared: its step numbers were fitted, not
  the log's. A trace is written after its window's records (the profiler exports at the next
  step's start), so a traced sync always had its record written.

Each is a line the check reports as a problem (``Numerics.evidence``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ftrun.check.observe import WorkerObs
from ftrun.event_log import EventLog
from ftrun.layout import EventRecord


def traced_syncs(seen: Sequence[WorkerObs]) -> dict[tuple[int, int], list[int]]:
    """(replica, rank) -> the training steps of the syncs its traces show (ftrun-numbered traces only)."""
    out: dict[tuple[int, int], list[int]] = {}
    for wo in seen:
        steps = [o.step for o in wo.obs if o.kind == "sync" and o.step is not None and o.trace.step_source == "ftrun"]
        if steps:
            out.setdefault((wo.worker.replica, wo.worker.rank), []).extend(steps)
    return out


def evidence_problems(
    logs: Mapping[tuple[int, int], Sequence[EventRecord]], traced: Mapping[tuple[int, int], Sequence[int]]
) -> list[str]:
    """The damage of each log (``EventLog.damage``), then each traced sync without its record.
    Nothing is compared when there are no logs (then nothing counts them either)."""
    if not logs:
        return []
    out = [d for _, recs in sorted(logs.items()) if isinstance(recs, EventLog) for d in recs.damage]
    for (replica, rank), steps in sorted(traced.items()):
        recs = logs.get((replica, rank))
        if recs is None:
            out.append(
                f"replica {replica} rank {rank} has no event log: its trace shows syncs at step(s) "
                f"{', '.join(map(str, sorted(set(steps))))}"
            )
            continue
        # (a rejoin step's trace span carries the local step number its record names in ``rejoined``)
        synced = {r.step for r in recs if r.synced is not None} | {
            r.rejoined.local_step for r in recs if r.synced is not None and r.rejoined
        }
        out += [
            f"replica {replica} rank {rank}'s record of the sync at step {s} is missing (its trace shows the sync)"
            for s in sorted(set(steps) - synced)
        ]
    return out
