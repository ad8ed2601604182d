"""When a rank stops training: after ``--steps``, unless a relaunched group is on its way back. Torch-free.

A user who asks for a kill with a restart wants to see the recovery. On a busy machine the
relaunch (torchrun, imports, the model) can take longer than the steps left, so the survivors
keep training past ``--steps`` while a group the parent relaunched (a ``restart`` record in
``events/run.jsonl``, which the parent writes when it relaunches it) has not yet been through a
decided sync round in a quorum with them: a commit, or a commit that failed (when every commit
fails — Baby-NCCL on torchft 0.2 — waiting for a successful one would only run to the bound;
the check reports the failed commits); the extra steps are ordinary steps (event log, schedule,
commits). The wait
is bounded: ``bound_s`` (``--quorum-timeout``) after the run's last step ended, the rank stops
and says which groups it gave up on (``Decision.gave_up``).

Every rank decides from what all ranks in the quorum share: the quorum's participants and the
commits, which are collective, so all groups stop after the same step (the time bound is the
one exception, evaluated on each rank's clock). A relaunched group that rejoins past
``--steps`` runs the same rule: it stops after its first commit with the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ftrun.layout import EventRecord, Quorum, RunEvent

GIVEN_UP = ("group_lost", "group_done")  # run events after which nothing of the group comes back


@dataclass(frozen=True)
class Decision:
    """``stop``: end the loop after this step. ``waiting``: relaunched groups not yet back with a
    commit (the reason to go on, or — when ``stop`` — the groups given up on at the bound)."""

    stop: bool
    waiting: tuple[int, ...] = ()

    @property
    def gave_up(self) -> bool:
        return self.stop and bool(self.waiting)


def relaunched_pending(events: list[RunEvent], committed_at: dict[int, float]) -> tuple[int, ...]:
    """Groups whose latest ``restart`` (run event time) came after their latest decided round seen
    by this rank (``committed_at``: replica -> when the quorum of its last commit, or failed
    commit, was formed: a quorum formed before the relaunch still lists the killed incarnation,
    and a round in it says nothing of the new one), and that the parent has not since given up on
    (lost for good, or done)."""
    restarted: dict[int, float] = {}
    for e in events:
        if not isinstance(e.replica, int):
            continue
        if e.event == "restart":
            restarted[e.replica] = e.t
        elif e.event in GIVEN_UP:
            restarted.pop(e.replica, None)
    return tuple(sorted(r for r, t in restarted.items() if committed_at.get(r, float("-inf")) <= t))


@dataclass
class StopRule:
    """The stop decision of one rank's loop (``ftrun.worker.step_loop.StepLoop``).

    Feed it every step's new quorums and whether the step committed (``saw``), then ask
    ``decide``. ``steps``: ``--steps``; ``bound_s``: how long past the last step to wait."""

    steps: int
    bound_s: float
    members: tuple[int, ...] = ()  # the latest quorum's participants (replica numbers)
    formed: float = float("-inf")  # when that quorum was formed
    committed_at: dict[int, float] = field(default_factory=dict)  # replica -> its last decided round's quorum
    past_since: float | None = None  # when the run's last step ended on this rank

    def saw(self, quorums: list[Quorum], committed: bool, failed: bool = False) -> None:
        """A step's new quorums (``QuorumProbe.take``: ``participants``, ``t`` formed) and whether
        the step's sync round was decided: ``committed``, or its commit ``failed``."""
        if quorums:
            self.members = tuple(r for r in quorums[-1].participants if isinstance(r, int))
            self.formed = float(quorums[-1].t or 0.0)
        if committed or failed:
            for r in self.members:
                self.committed_at[r] = self.formed

    def decide(self, step: int, events: list[RunEvent], now: float) -> Decision:
        """After training step ``step`` (the run's numbering), with the parent's run events."""
        if step < self.steps:
            return Decision(stop=False)
        if self.past_since is None:
            self.past_since = now
        waiting = relaunched_pending(events, self.committed_at)
        if not waiting:
            return Decision(stop=True)
        return Decision(stop=now - self.past_since > self.bound_s, waiting=waiting)


def left_behind(aligned: int | None, steps: int, quorums: list[Quorum], replica: int) -> bool:
    """A relaunched group came back past the run's last step with nobody else in its quorum:
    the others finished (or gave up waiting for it) first, so no step of the run is left for it.
    With others in its quorum they are waiting for it (``StopRule``): it trains on with them."""
    if aligned is None or aligned <= steps:
        return False
    others = {r for q in quorums for r in q.participants if r != replica}
    return not others


def ran_to(logs: dict[tuple[int, int], list[EventRecord]]) -> int | None:
    """The run's last training step: ``--steps``, or past it where the groups waited for a relaunch.
    A relaunched group's record of where it rejoined (``rejoined``) does not count: one that came
    back alone after the others stopped (an older worker logged that step) ran no step of the run."""
    return max((x.step for recs in logs.values() for x in recs if x.step is not None and not x.rejoined), default=None)


def never_back_cause(planned: int | None, last: int | None, bound_s: float | None) -> str:
    """Why a relaunched group never committed with the others again: the one line ``train``'s
    summary, ``inspect-trace`` and the recovery breakdown share. ``planned``: ``--steps``;
    ``last``: the run's last step (``ran_to``); ``bound_s``: ``--quorum-timeout``."""
    extra = last - planned if last is not None and planned is not None and last > planned else 0
    if extra and bound_s is not None:
        return (
            f"not back within --quorum-timeout {bound_s:g} s: the others trained {extra} step(s) past "
            f"--steps {planned} waiting for it, then stopped"
        )
    return "the other groups finished before it rejoined"
