"""Survivors held in a collective with a dead group until torchft's process-group timeout.
Torch-free.

A group that dies while a fragment's allreduce it joined is in flight (sent, not yet synced)
does not fail that allreduce for every survivor: Gloo's ring allreduce exchanges data only
between ring neighbours, so the dead group's neighbours fail at once while the others wait for
data that never comes, until torchft's process-group timeout (the Manager's and the process
group's ``timeout``: the run's ``timeout_s``, a ``--config`` key) or until a neighbour's next
reconfigure closes its old connections. While they wait they still heartbeat, and torchft's
lighthouse issues no quorum while fewer than half of the heartbeating groups have asked for
one, so with many groups the whole run, the dead group's relaunch included, can wait for that
timeout.

The evidence, per survivor, from its own step log: its first sync after the fault, of a round
whose quorum came before the fault and held the faulted group, failed to commit, and ended at
least ``HOLD_SHARE`` of ``timeout_s`` after that quorum (the timeout runs from the allreduce's
issue, right after the quorum). Nothing else ends a sync that late with a failed commit; a shorter
failed sync (a neighbour, or one released by a neighbour's reconfigure) is not a hold.
"""

from __future__ import annotations

from ftrun.layout import CollectiveHold, EventRecord, Quorum

HOLD_SHARE = 0.9  # a failed sync this share of timeout_s after its round's quorum waited for the timeout
ERROR_CHARS = 120  # of the commit error kept as evidence


def survivor_hold(records: list[EventRecord], replica: int, t0: float) -> tuple[float, float, str | None] | None:
    """(seconds from the round's quorum to its failed sync's end, that end's unix time, that
    sync's commit error) of the survivor whose rank-0 ``records`` these are, for its first sync
    after ``t0`` of a round whose quorum, computed before ``t0``, held ``replica`` (the group
    asked for that quorum, so it issued the round's allreduce right after); None when there is
    no such sync or it committed."""
    last_quorum: Quorum | None = None
    start: Quorum | None = None  # the quorum of the round in flight (its send's)
    for x in records:
        if x.quorums:
            last_quorum = x.quorums[-1]
        if x.sent is not None:
            start = last_quorum
        if x.synced is None:
            continue
        if x.t > t0:
            if start is None or start.t > t0 or replica not in start.participants or x.commit is not False:
                return None
            return x.t - start.t, x.t, x.commit_error or None
        start = None
    return None


def collective_hold(
    logs: dict[tuple[int, int], list[EventRecord]],
    survivors: list[int],
    replica: int,
    t0: float,
    timeout_s: float,
) -> CollectiveHold | None:
    """The survivors held until the timeout after ``replica``'s fault at ``t0`` (module
    docstring); None when none was."""
    held: dict[int, tuple[float, float, str | None]] = {}
    for s in survivors:
        got = survivor_hold(logs.get((s, 0), []), replica, t0)
        if got is not None and got[0] >= HOLD_SHARE * timeout_s:
            held[s] = got
    if not held:
        return None
    named = [e for _, _, e in held.values() if e and any(w in e.lower() for w in ("timeout", "timed out"))]
    return CollectiveHold(
        replicas=sorted(held),
        held_s=round(max(h for h, _, _ in held.values()), 3),
        released_s=round(max(end for _, end, _ in held.values()) - t0, 3),
        timeout_s=timeout_s,
        error=named[0][:ERROR_CHARS] if named else None,
    )


def hold_text(h: CollectiveHold) -> str:
    """The breakdown's line for a hold: who waited, how long, which timeout and its key, when
    the last of them was released (to set beside the detect and join intervals)."""
    who = ", ".join(map(str, h.replicas))
    return (
        f"replica(s) {who} waited {h.held_s:.2f} s from the round's quorum before the fault to a failed commit"
        f" (the last released {h.released_s:.2f} s after the fault): the round's allreduce lost the group"
        f" mid-flight and Gloo's ring leaves the survivors not next to it waiting for torchft's process-group"
        f" timeout (timeout_s = {h.timeout_s:g} s, a --config key)"
        + (f"; their commit error: {h.error!r}" if h.error else "")
    )
