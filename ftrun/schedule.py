"""The expected streaming-DiLoCo schedule, as torchft 0.2.x runs it. Pure Python, no torch.

Step numbering (used everywhere in ftrun): training step ``s`` is the s-th inner
``optimizer.step()``, counted from 1. torchft's example calls ``prof.step()`` at the top of
each loop iteration, so ``ProfilerStep#s`` holds step ``s`` — ftrun uses the same convention.

What ``torchft.local_sgd.DiLoCo`` does (``_step_post_hook``), with w = H / F:

* after every inner step, ``local_step += 1``;
* when ``local_step == w - tau``: ``start_quorum()`` and fragment ``manager_step % F`` runs
  ``prepare_sync`` (pseudo-gradients, one allreduce per parameter, not waited): the **send**;
* when ``local_step == w``: the same fragment runs ``perform_sync`` (wait, restore, should_commit,
  outer step on success): the **sync**; ``local_step`` resets to 0.

``manager_step`` counts successful commits only. Cycle ``c`` (0-based) therefore sends at step
``c*w + w - tau`` and syncs at ``c*w + w``, whatever happened before; only the fragment depends on
the commit history, and that history is the whole job's, not one replica group's (``rounds``):
``should_commit`` is a vote inside one group; at the next send's quorum a group behind the
quorum's ``max_step`` heals from a peer (the state dict, manager step included) before
``prepare_sync`` picks the fragment, so it carries on with its peers' schedule. Only a cycle in
which no group of the quorum committed repeats its fragment (``stalled``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from ftrun.errors import BadInput

Kind = Literal["send", "sync"]


class ScheduleError(BadInput, ValueError):
    """A schedule that torchft's ``DiLoCo`` constructor would reject (same rules, same order), or
    one whose F, H or tau is not an integer: bad input (one line, exit 2), and a ``ValueError``."""

    def __init__(self, field: str, value: object, rule: str) -> None:
        super().__init__(f"{field}={value}: {rule}")
        self.field, self.value, self.rule = field, value, rule


@dataclass(frozen=True)
class Event:
    """One expected send or sync: at training ``step``, of ``fragment``, in ``cycle``.

    ``manager_step`` is the manager's step (commits so far) when the event happens.
    """

    step: int
    kind: Kind
    fragment: int
    cycle: int
    manager_step: int


@dataclass(frozen=True)
class Schedule:
    """F = ``fragments``, H = ``sync_every``, tau = ``fragment_sync_delay`` (torchft's names)."""

    fragments: int
    sync_every: int
    fragment_sync_delay: int = 0

    def __post_init__(self) -> None:
        validate(self.fragments, self.sync_every, self.fragment_sync_delay)

    @property
    def window(self) -> int:
        """w = H / F: inner steps between two consecutive syncs (of different fragments)."""
        return self.sync_every // self.fragments

    def send_step(self, cycle: int) -> int:
        return cycle * self.window + self.window - self.fragment_sync_delay

    def sync_step(self, cycle: int) -> int:
        return (cycle + 1) * self.window

    def cycle_of(self, step: int) -> int:
        """The cycle a step belongs to (the cycle whose sync closes it)."""
        return (step - 1) // self.window

    def local_step(self, step: int) -> int:
        """torchft's ``DiLoCo._local_step`` right after the post-hook of training step ``step``."""
        return (step - 1) % self.window + 1

    def events(
        self,
        steps: int,
        failed_cycles: Iterable[int] = (),
        first_step: int = 1,
        start_manager_step: int = 0,
    ) -> list[Event]:
        """Expected events for training steps ``first_step..steps`` (inclusive).

        ``failed_cycles``: cycles after which this replica's manager step did not advance, so the
        next cycle repeats that fragment: the job's ``stalled`` cycles (``rounds``), not merely the
        cycles whose commit this replica failed (it heals past those when a peer committed).
        ``start_manager_step``: manager step at the start of cycle 0 (0 for a fresh job).
        """
        failed = set(failed_cycles)
        out: list[Event] = []
        mstep = start_manager_step
        cycle = 0
        while self.send_step(cycle) <= steps or self.sync_step(cycle) <= steps:
            frag = mstep % self.fragments
            send, sync = self.send_step(cycle), self.sync_step(cycle)
            if first_step <= send <= steps:
                out.append(Event(send, "send", frag, cycle, mstep))
            if first_step <= sync <= steps:
                out.append(Event(sync, "sync", frag, cycle, mstep))
            if cycle not in failed:
                mstep += 1
            cycle += 1
        return out

    def auto_window(self, steps: int) -> tuple[int, int]:
        """The profiled steps for ``--profile auto``: one full round of F cycles.

        Skips the first round (process-group set-up, first quorum, allocator warm-up) when
        the run is long enough, so the window holds steady-state steps: ``[H+1, 2H]`` when
        ``steps >= 2H``, else ``[1, H]``. Every fragment's send and sync lie inside it.
        """
        h = self.sync_every
        if steps < h:
            raise ScheduleError("steps", steps, f"profiling needs at least one full cycle of H={h} steps")
        return (h + 1, 2 * h) if steps >= 2 * h else (1, h)


@dataclass(frozen=True)
class ReleaseBehaviour:
    """What a torchft release does around a failed commit, as the heal model needs it
    (``ftrun.torchft_compat.release_behaviour`` maps a release to one; torch-free).

    ``heals_behind_groups``: at a quorum, a group whose manager step is below ``max_step`` fetches
    a peer's state dict (manager step included) and, the quorum being synchronous (``DiLoCo``
    requires ``use_async_quorum=False``), applies it inside ``start_quorum``, before
    ``prepare_sync`` picks ``current_step() % F``. ``baby_pg_commits_fail``: every commit on a
    Baby process group fails (``_ManagedWork``'s late-bound callback), so every cycle stalls.
    """

    name: str
    heals_behind_groups: bool = True
    baby_pg_commits_fail: bool = False

    def commits_fail_always(self, backend: str | None) -> bool:
        """Does every commit fail on ``backend`` (ftrun's ``--backend`` name) in this release?"""
        return self.baby_pg_commits_fail and backend is not None and backend.startswith("baby-")


@dataclass(frozen=True)
class Round:
    """One cycle of the job: the quorum at its send, the votes at its sync.

    ``steps``: each participating group's manager step after the quorum (healed ones at
    ``max_step``), so group g sends and syncs fragment ``steps[g] % F``; ``healed``: the groups that
    healed at this quorum; ``committed``: those whose commit succeeded; ``advanced``: did any
    group of the job commit (an unseen one included, when evidence says so).
    """

    cycle: int
    steps: Mapping[int, int]
    healed: frozenset[int]
    committed: frozenset[int]
    advanced: bool

    def fragment(self, group: int, fragments: int) -> int | None:
        """The fragment ``group`` sends and syncs in this cycle (None: not in the quorum)."""
        step = self.steps.get(group)
        return None if step is None else step % fragments


def rounds(
    cycles: int,
    groups: Collection[int],
    failed: Mapping[int, Collection[int]],
    behaviour: ReleaseBehaviour,
    *,
    away: Callable[[int, int], bool] = lambda group, cycle: False,
    outcome: Mapping[int, bool] | None = None,
    start_manager_step: int = 0,
) -> list[Round]:
    """Cycles ``0..cycles-1`` of a job of replica ``groups``, as torchft runs them.

    ``failed``: cycle -> the groups whose ``should_commit`` returned False there; a group of the
    quorum with no failure is taken to have committed. ``away(group, cycle)``: the group is not in
    that cycle's quorum (lost to a fault); it keeps its step and heals when it is back.
    ``outcome``: cycle -> whether any group committed, where evidence outside ``failed`` says so
    (a heal recorded after the cycle, the next send's fragment): False stalls every group; True
    with every known group failed means an unseen group committed, and the known ones heal to it.
    """
    outcome = outcome or {}
    steps = {g: start_manager_step for g in groups}
    unseen: int | None = None  # the step of groups outside ``groups`` that evidence shows committing
    out: list[Round] = []
    for c in range(cycles):
        present = sorted(g for g in groups if not away(g, c))
        top = max([steps[g] for g in present] + ([unseen] if unseen is not None else []), default=start_manager_step)
        healed = frozenset(g for g in present if steps[g] < top) if behaviour.heals_behind_groups else frozenset()
        for g in healed:
            steps[g] = top
        mine = {g: steps[g] for g in present}
        bad = set(failed.get(c, ()))
        committed = frozenset(g for g in present if g not in bad)
        advanced = outcome.get(c, bool(committed) or unseen is not None)
        if not advanced:
            committed = frozenset()
        elif not committed or unseen is not None:
            unseen = top + 1  # an unseen group committed (evidence), or is taken to have (as known ones are)
        for g in committed:
            steps[g] += 1
        out.append(Round(c, mine, healed, committed, advanced))
    return out


def stalled(played: Sequence[Round], group: int, behaviour: ReleaseBehaviour, start_manager_step: int = 0) -> list[int]:
    """The cycles ``Schedule.events`` must take as ``failed_cycles`` for ``group`` so that each
    cycle it takes part in carries its manager step from ``played``: between two cycles it took
    part in, ``i`` and ``j``, ``(j - i) - (step_j - step_i)`` of the cycles ``i..j-1`` did not
    advance it (the job's stalled ones first: which of the cycles it missed is immaterial, nothing
    is expected of it there); after its last one, the job's stalled cycles (``behaviour`` without
    heals: its own failed commit there)."""
    anchors = [(r.cycle, r.steps[group]) for r in played if group in r.steps]
    if not anchors or anchors[0][0] > 0:
        anchors.insert(0, (0, start_manager_step))
    out: list[int] = []
    for (i, si), (j, sj) in zip(anchors, anchors[1:], strict=False):
        span = played[i:j]
        k = min(max((j - i) - (sj - si), 0), len(span))
        ranked = sorted(span, key=lambda r: (r.advanced, r.cycle))
        out += sorted(r.cycle for r in ranked[:k])
    last = anchors[-1][0]
    for r in played[last:]:
        # a group that heals moves on with the job; one that did not would keep its own step
        moved = r.advanced if behaviour.heals_behind_groups or r.cycle > last else group in r.committed
        if not moved:
            out.append(r.cycle)
    return out


def validate(fragments: int, sync_every: int, fragment_sync_delay: int, fragment_update_alpha: float = 0.0) -> None:
    """torchft's constructor rules (``DiLoCo.__init__``), as one-line ``ScheduleError``s; first,
    F, H and tau must be integers (a bool, a float such as 2.0 or NaN, a string: refused, never
    compared or divided into an internal ``TypeError``)."""
    for field, value in (("fragments", fragments), ("sync_every", sync_every)):
        _integer(field, value)
    _integer("fragment_sync_delay", fragment_sync_delay)
    if isinstance(fragment_update_alpha, bool) or not isinstance(fragment_update_alpha, int | float):
        raise ScheduleError("fragment_update_alpha", fragment_update_alpha, "must be a number between 0 and 1")
    if fragments < 1:
        raise ScheduleError("fragments", fragments, "must be at least 1")
    if sync_every < 1:
        raise ScheduleError("sync_every", sync_every, "must be at least 1")
    if sync_every < fragments:
        raise ScheduleError(
            "sync_every", sync_every, f"must be >= fragments ({fragments}); torchft syncs one fragment at a time"
        )
    if sync_every % fragments != 0:
        raise ScheduleError("sync_every", sync_every, f"must be a multiple of fragments ({fragments})")
    w = sync_every // fragments
    if fragment_sync_delay < 0:
        raise ScheduleError("fragment_sync_delay", fragment_sync_delay, "must be >= 0")
    if fragment_sync_delay >= w:
        raise ScheduleError(
            "fragment_sync_delay",
            fragment_sync_delay,
            f"must be < sync_every/fragments = {w}; a fragment must sync before it is sent again",
        )
    if not 0.0 <= fragment_update_alpha <= 1.0:
        raise ScheduleError("fragment_update_alpha", fragment_update_alpha, "must be between 0 and 1")


def _integer(field: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScheduleError(field, repr(value), f"must be an integer, not {type(value).__name__}")


class Named(Protocol):
    """What ``label`` reads of a schedule: any record with its three fields (``Schedule``, the
    config's ``ScheduleConfig``, the run-dir records' ``ScheduleInfo``)."""

    @property
    def fragments(self) -> int: ...
    @property
    def sync_every(self) -> int: ...
    @property
    def fragment_sync_delay(self) -> int: ...


def label(schedule: Named) -> str:
    """``F=.. H=.. tau=..``: how every view names a schedule."""
    return f"F={schedule.fragments} H={schedule.sync_every} tau={schedule.fragment_sync_delay}"
