"""Stage 5 of the check, cross-replica: do all workers agree, step by step, on each event?

For every (kind, step) observed on some worker, each worker that captured that step (and did
not lose it to a fault) must show the same event with the same fragment: ``CrossCheck`` per
(kind, step) seen by at least two workers. An event the evidence cannot identify (fragment
None) but that was observed is no disagreement; one not observed is.
"""

from __future__ import annotations

from ftrun.check.match import WorkerMatch
from ftrun.check.result import CrossCheck, EventResult


def cross_replica(matches: list[WorkerMatch], results: list[EventResult]) -> list[CrossCheck]:
    if len(matches) < 2:
        return []
    seen: dict[tuple[str, int], dict[str, int | None]] = {}
    manager_step_of: dict[tuple[str, int], int | None] = {}
    for r in results:
        if r.observed_step is None:
            continue
        key = (r.kind, r.observed_step)
        seen.setdefault(key, {})[f"{r.replica}/{r.rank}"] = r.fragment
        if manager_step_of.get(key) is None:
            manager_step_of[key] = r.manager_step
    observed = {(r.replica, r.rank, r.kind, r.observed_step) for r in results}
    out = []
    for (kind, step), frags in sorted(seen.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        for m in matches:
            name = f"{m.seen.worker.replica}/{m.seen.worker.rank}"
            lost = any(a <= step <= b for a, b in m.lost)
            if name not in frags and any(lo <= step <= hi for lo, hi in m.seen.ranges) and not lost:
                frags[name] = None
        if len(frags) < 2:
            continue
        absent = [k for k, v in frags.items() if v is None and (*map(int, k.split("/")), kind, step) not in observed]
        values = {v for v in frags.values() if v is not None}
        ok = not absent and len(values) <= 1
        cc = CrossCheck(kind, step, manager_step_of.get((kind, step)), dict(sorted(frags.items())), ok)
        if not ok:
            desc = ", ".join(
                f"replica {k.split('/')[0]} rank {k.split('/')[1]}: "
                + ("none" if k in absent else f"fragment {'?' if v is None else v}")
                for k, v in sorted(frags.items())
            )
            at = f" (manager step {cc.manager_step})" if cc.manager_step is not None else ""
            cc.problem = f"replicas disagree on the {kind} at step {step}{at}: {desc}"
        out.append(cc)
    return out
