"""Steps lost to injected faults, from the manifest(s) and the event logs. Torch-free.

For each fired ``kill``/``sigterm`` fault (manifest ``faults.fired``) of replica group R at
step S (the fault fires before step S runs, so S is the first step the group did not train):

* ``rejoined_step``: the step of the first event-log record of R after the fault that has a
  ``rejoined`` entry (a relaunched group aligned with the live ones), else the first record
  after the fault with a step number; ``None`` = never rejoined (no relaunch, or the others
  finished first). A group whose aligned step lies past the run's last step came back only
  after the others had finished (``late_step``): it never rejoined the run.
* ``lost``: steps ``S .. rejoined_step - 1`` (``S .. steps`` when it never rejoined).
* ``heal``: the first ``healed`` record after the fault (source replica, manager step, peer step).

Inspect does not expect events from R in its lost steps, and a replica without a trace is
explained by such a fault (the killed incarnation never exported its profiler window; a
relaunched group has no window trace: its profile covers its recovery, in ``traces/recovery/``).

A fired ``fail-commit`` fault (``CommitVote``) loses no steps: it explains exactly the failed
commits of its replica group at the sync it fired in (``fired_step``), and nothing else.

A missing contribution sketch (``ftrun.check.numerics``): a kill or SIGTERM of R that fired during
a round R had entered (its last record before the fault reached the round's manager step) and
before R trained the round's sync step (lost) explains why R's event log lacks that round: on a
GPU a rank writes its send's sketch at the sync step's record, which a process killed in between
never writes (``FiredFaults.took_out``). The round then counts as not checked, never as checked.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from ftrun.layout import AnyManifest, EventRecord, Healed, Manifest

ACTIONS = {"kill": "SIGKILL", "sigterm": "SIGTERM"}


class FaultHeal(msgspec.Struct):
    """Where a faulted group healed from: the source replica, its step, the manager step, and
    the group's training step then (None: not recorded)."""

    source_replica: int | None
    peer_step: int
    manager_step: int
    step: int | None


class FaultRow(msgspec.Struct):
    """A kill or SIGTERM as ``Report.faults`` records it (``FaultMark.row``)."""

    replica: int
    action: str
    step: int
    lost_steps: tuple[int, int] | None
    rejoined_step: int | None
    never_rejoined: bool
    late_step: int | None
    heal: FaultHeal | None
    has_trace: bool
    run_dir: str | None
    text: str


class VoteRow(msgspec.Struct):
    """A ``--fail-commit`` as ``Report.faults`` records it (``CommitVote.row``): it loses no steps."""

    replica: int
    action: str
    step: int
    sync_step: int
    lost_steps: None
    text: str


class FaultMark(msgspec.Struct):
    replica: int
    action: str  # "kill" | "sigterm"
    step: int  # the fault fired at the start of this step
    lost_steps: tuple[int, int] | None  # inclusive; None when no step was lost
    rejoined_step: int | None  # None = never rejoined
    heal: FaultHeal | None = None
    late_step: int | None = None  # came back at this step, past the run's last: never rejoined the run
    last_step: int | None = None  # the run's last step
    has_trace: bool = False
    run_dir: str | None = None
    text: str = ""
    cause: str | None = None  # relaunched, never back: why (ftrun.worker.stop.never_back_cause)
    # the manager step the group had reached when the fault fired (its last record before it);
    # None: no record before the fault
    manager_step: int | None = None

    @property
    def never_rejoined(self) -> bool:
        return self.rejoined_step is None

    def row(self) -> FaultRow:
        return FaultRow(
            self.replica,
            self.action,
            self.step,
            self.lost_steps or None,
            self.rejoined_step,
            self.never_rejoined,
            self.late_step,
            self.heal,
            self.has_trace,
            self.run_dir,
            self.text,
        )


class CommitVote(msgspec.Struct, frozen=True):
    """A fired ``--fail-commit R@S``: group R voted against its commit at sync step ``sync_step``."""

    replica: int
    step: int  # as asked: the first sync at or after it
    sync_step: int

    def row(self) -> VoteRow:
        text = (
            f"replica {self.replica}: voted against its commit at sync step {self.sync_step} "
            f"(--fail-commit {self.replica}@{self.step})"
        )
        return VoteRow(self.replica, "fail-commit", self.step, self.sync_step, None, text)


class FiredFaults(msgspec.Struct):
    marks: list[FaultMark] = msgspec.field(default_factory=list)
    votes: list[CommitVote] = msgspec.field(default_factory=list)

    def lost(self, replica: int) -> list[tuple[int, int]]:
        return [m.lost_steps for m in self.marks if m.replica == replica and m.lost_steps]

    def explains_missing_trace(self, replica: int) -> bool:
        return any(m.replica == replica for m in self.marks)

    def took_out(self, replica: int, sync_step: int, manager_step: int) -> FaultMark | None:
        """The kill or SIGTERM of ``replica`` that fired during the round at ``manager_step``
        synced at ``sync_step`` (module docstring): the group had reached that manager step, and
        the sync step is among the steps the fault lost. None: no fault explains its absence."""
        for m in self.marks:
            if (
                m.replica == replica
                and m.manager_step == manager_step
                and m.lost_steps is not None
                and m.lost_steps[0] <= sync_step <= m.lost_steps[1]
            ):
                return m
        return None


def fault_marks(
    run_dirs: list[Path], manifests: list[AnyManifest], logs: dict[tuple[int, int], list[EventRecord]]
) -> FiredFaults:
    """``logs``: (replica, rank) -> records (the merged event logs of the job)."""
    from ftrun.worker.stop import never_back_cause, ran_to

    out = FiredFaults()
    seen: set[tuple[int, int, str]] = set()
    last = ran_to(logs)  # past --steps where the groups waited for a relaunched one (ftrun.worker.stop)
    for rd, m in zip(run_dirs, manifests, strict=True):  # a manifest per run dir, same order
        planned = steps = m.schedule.steps
        if steps is not None and last is not None:
            steps = max(steps, last)
        fired = m.faults.fired if isinstance(m, Manifest) else []  # ftrun launch: its faults are not steps
        for f in sorted(fired, key=lambda f: f.fired_at):
            if f.action == "fail-commit":
                vote = CommitVote(f.replica, f.step, f.fired_step or f.step)
                if vote not in out.votes:  # merged group dirs of one job hold the same marker
                    out.votes.append(vote)
                continue
            if f.action not in ACTIONS:
                continue
            r, s = f.replica, f.fired_step or f.step
            if (r, s, f.action) in seen:
                continue
            seen.add((r, s, f.action))
            at = f.fired_at
            ranks = sorted(g for (x, g) in logs if x == r)
            mine = logs.get((r, ranks[0]), []) if ranks else []
            recs = [x for x in mine if x.t > at]
            before = [x for x in mine if x.t <= at]
            rejoined = next((x for x in recs if x.rejoined), None)
            if rejoined is None:
                rejoined = next((x for x in recs if x.step is not None), None)
            back = rejoined.step if rejoined is not None else None
            if back is None and rejoined is not None and rejoined.rejoined:
                back = rejoined.rejoined.aligned_step
            healed = next((x for x in recs if x.healed), None)
            heal = (
                FaultHeal(h.source_replica, h.peer_step, h.manager_step, healed.step)
                if healed is not None and isinstance(h := healed.healed, Healed)
                else None
            )
            late = None
            if back is not None and steps is not None and back > steps:  # after the run's last step
                late, back = back, None
                if heal is not None and (heal.step is None or heal.step > steps):
                    heal = None  # a heal after the end is no part of the run
            lost: tuple[int, int] | None  # the steps the fault cost, first..last
            if back is None:
                lost = (s, steps) if steps is not None and steps >= s else (s, s)
            else:
                lost = (s, back - 1) if back > s else None
            out.marks.append(
                FaultMark(
                    r,
                    f.action,
                    s,
                    lost,
                    back,
                    heal,
                    late_step=late,
                    last_step=steps,
                    run_dir=str(rd),
                    cause=never_back_cause(planned, last, m.config.timeouts.quorum_timeout_s)
                    if isinstance(m, Manifest)
                    and back is None
                    and any(e.event == "restart" and e.replica == r and e.t > at for e in m.run_events)
                    else None,
                    manager_step=before[-1].manager_step_after if before else None,
                )
            )
    return out


def describe(m: FaultMark) -> str:
    what = f"replica {m.replica}: {ACTIONS.get(m.action, m.action)} at step {m.step}"
    if m.lost_steps:
        a, b = m.lost_steps
        what += f", lost step{'s' if b > a else ''} {a}" + (f"-{b}" if b > a else "")
    else:
        what += ", no steps lost"
    if m.late_step is not None:
        what += (
            f", never rejoined the run (relaunched, it came back at step {m.late_step}, after the run's last "
            f"step {m.last_step}: {m.cause or 'the other groups had finished'})"
        )
    elif m.never_rejoined:
        what += ", never rejoined" + (f" ({m.cause})" if m.cause else "")
    else:
        what += f", rejoined at step {m.rejoined_step}"
    if m.heal:
        src = m.heal.source_replica
        what += f", healed from replica {'?' if src is None else src} at manager step {m.heal.manager_step}"
    if not m.has_trace:
        what += (
            "; no trace (the killed incarnation never wrote its profiler window; "
            "a relaunched group is profiled only through its recovery, traces/recovery/)"
        )
    return what
