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

``manager_step`` counts successful commits only, so a failed commit repeats the same fragment in
the next cycle. Cycle ``c`` (0-based) therefore sends at step ``c*w + w - tau`` and syncs at
``c*w + w``, whatever happened before; only the fragment depends on the commit history.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

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

        ``failed_cycles``: cycles whose commit failed (``should_commit`` returned False); the
        manager step does not advance, so the next cycle repeats that fragment.
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


def label(schedule: dict) -> str:
    """``F=.. H=.. tau=..``: how every view names a schedule (``schedule``: the manifest's
    ``{"fragments", "sync_every", "fragment_sync_delay", ...}``)."""
    return f"F={schedule['fragments']} H={schedule['sync_every']} tau={schedule['fragment_sync_delay']}"
