"""``ftrun train --chaos``: the supervisor's side of a chaos run. Torch-free.

The faults come from ``ftrun.chaos_plan.draw`` (seeded, exponential gaps) and fire in the
drawn order. The chaos clock starts when every group has trained a step (start-up is not
fault time). A fault due at ``at_s`` on group R fires as soon as ``chaos_plan.blocked`` allows
it: R up, and ``--chaos-min-alive`` others up after it (a blocked fault waits, and the ones
after it wait behind it, so a seed always gives the same sequence of faults). Firing writes
``<run>/chaos/replica{R}.json``; R's rank 0 fires it at the start of its next step through
the very path of ``--kill``/``--hang`` (``ftrun.worker.fault_injection``: a marker in
``faults/``, which the manifest, the checks and the recovery breakdown read). R is down from
then until its first commit after the fault (after a hang's end); a group whose processes
exited is down until its next commit too.

No fault fires once a group has reached step ``--steps`` - H - the steps the leading group
makes in the longest recovery seen so far (a group hit that late could not be back before the
others finish: its loss would be the run's end, not the fault's), nor after
``--chaos-max-faults``. Each fired fault grants its group one relaunch beyond ``--restarts``.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from ftrun import chaos_plan, layout
from ftrun.config import RunConfig
from ftrun.launch.groups import Group
from ftrun.layout import EventRecord
from ftrun.output import atomic_write


class ChaosMonkey:
    """The fault schedule of one run and who is up (module docstring). ``tick`` after every look
    at the groups; ``saw`` with each group's new event-log records."""

    def __init__(
        self, cfg: RunConfig, run_dir: Path, log_event: Callable[..., None], clock: Callable[[], float] = time.time
    ) -> None:
        f = cfg.faults
        self.now = clock  # unix seconds (a test's own clock)
        self.run_dir = run_dir
        self.log_event = log_event
        self.replicas = cfg.hosts.replicas
        self.min_alive = f.chaos_min_alive
        self.max_faults = f.chaos_max_faults
        self.steps, self.sync_every = cfg.steps, cfg.schedule.sync_every
        self.longest_recovery_s = 0.0  # request -> the group up again, the longest seen so far
        self.requested_at: dict[int, float] = {}
        self._draw = chaos_plan.draw(chaos_plan.parse_kinds(f.chaos), cfg.hosts.replicas, f.chaos_seed)
        self.next: chaos_plan.ChaosFault | None = next(self._draw)
        self.clock: float | None = None  # unix time every group had trained a step
        self.up: set[int] = set()
        self.down_since: dict[int, float] = {}  # a group hit (or exited): up again at its first commit after
        self.pending: dict[int, chaos_plan.ChaosFault] = {}  # requested, not yet fired (no marker)
        self.requested: list[chaos_plan.ChaosFault] = []
        self.granted: Counter[int] = Counter()
        self.lead_step = 0
        self.blocked_by: str | None = None  # why the next fault waits (logged once per fault)
        self.ended: str | None = None  # why no more faults fire

    def saw(self, replica: int, records: list[EventRecord]) -> None:
        """Fold a group's new records into who is up."""
        for rec in records:
            if rec.step is None:
                continue
            self.lead_step = max(self.lead_step, rec.step)
            since = self.down_since.get(replica)
            if since is None:
                self.up.add(replica)
            elif rec.commit and rec.t > since:
                del self.down_since[replica]
                self.up.add(replica)
                if replica in self.requested_at:
                    self.longest_recovery_s = max(self.longest_recovery_s, rec.t - self.requested_at.pop(replica))

    def restarts_granted(self, replica: int) -> int:
        """Relaunches beyond ``--restarts`` for this group: one per chaos fault it was hit by."""
        return self.granted[replica]

    def tick(self, groups: list[Group]) -> None:
        now = self.now()
        for g in groups:
            if g.proc is not None and g.proc.poll() is not None and g.replica in self.up:
                self._down(g.replica, now)
        self._settle_pending()
        if self.clock is None:
            if len(self.up) < self.replicas:
                return
            self.clock = now
            self.log_event("chaos_start")
        while self.next is not None and self.ended is None and self.next.at_s <= now - self.clock:
            if not self._may_fire(self.next, now):
                return
            self._request(self.next, now)
            self.next = next(self._draw)

    def last_fault_step(self, now: float) -> int:
        """The step from which no fault fires: --steps - H - the steps the leading group makes in the
        longest recovery seen so far (a group hit later could not be back before the others finish)."""
        elapsed = now - self.clock if self.clock is not None else 0.0
        rate = self.lead_step / elapsed if elapsed > 0 else 0.0
        return self.steps - self.sync_every - math.ceil(self.longest_recovery_s * rate)

    def _may_fire(self, fault: chaos_plan.ChaosFault, now: float) -> bool:
        if self.max_faults and len(self.requested) >= self.max_faults:
            self.ended = f"--chaos-max-faults {self.max_faults} reached"
        elif self.lead_step >= (last := self.last_fault_step(now)):
            self.ended = (
                f"a group reached step {self.lead_step} (faults stop at --steps - H - the steps of the "
                f"longest recovery so far = {last})"
            )
        if self.ended is not None:
            self.log_event("chaos_end", fault=self.ended)
            return False
        why = chaos_plan.blocked(fault.replica, self.up, self.min_alive)
        if why is not None and why != self.blocked_by:
            self.log_event("chaos_wait", replica=fault.replica, fault=f"#{fault.index}: {why}")
        self.blocked_by = why
        return why is None

    def _request(self, fault: chaos_plan.ChaosFault, now: float) -> None:
        path = chaos_plan.request_path(self.run_dir, fault.replica)
        path.parent.mkdir(exist_ok=True)
        req = chaos_plan.ChaosRequest(fault.index, fault.action, fault.seconds)
        atomic_write(path, layout.to_json(req), "chaos request")  # the group's rank reads it meanwhile
        self.pending[fault.replica] = fault
        self.requested.append(fault)
        self.granted[fault.replica] += 1
        self.requested_at[fault.replica] = now
        self._down(fault.replica, now + fault.seconds)
        self.blocked_by = None
        self.log_event(
            "chaos", replica=fault.replica, fault=fault.describe(), seconds=round(now - (self.clock or now), 3)
        )

    def _down(self, replica: int, since: float) -> None:
        self.up.discard(replica)
        self.down_since[replica] = max(since, self.down_since.get(replica, since))

    def _settle_pending(self) -> None:
        """A request whose marker is written has fired: remove it (a relaunched group must not see it)."""
        if not self.pending:
            return
        names = [p.name for p in layout.fault_markers(self.run_dir)]
        for r, fault in list(self.pending.items()):
            prefix = chaos_plan.marker_prefix(fault.index)
            if any(n.startswith(prefix) for n in names):
                chaos_plan.request_path(self.run_dir, r).unlink(missing_ok=True)
                del self.pending[r]
