"""Did every sync compute the right numbers? A check of the sketches in the event logs. Torch-free.

Each rank logs, per fragment round (``layout.RoundNumerics``, ``ftrun.worker.sketch``): the
sketch of its contribution as the process group saw it, of the process group's SUM and of the
average the outer optimizer stepped on; the participant count, the quorum id and whether it
participated. Sketches are linear, so for every committed sync, on every replica r of the
collective (replicas grouped by rank, fragment, quorum id and manager step at the send):

* non-participants contributed zeros (their contribution's norm is exactly 0);
* SUM_r = Σ contributions of every replica in the collective;
* average_r = SUM_r / participants, participants = the replicas that said they participate,
  and r's manager counted the same;
* every participant stepped from the same average.

And after a heal (``layout.HealNumerics``): the healed replica's global parameters equal the
source's after its last commit of each fragment up to that manager step, bit for bit (the
fingerprint taken right after the heal = the one the source's event log has for that commit);
its first contribution follows the rule above (checked with the others).

A mismatch is a problem naming the sync step, manager step, fragment, replica, expected vs
observed (the projection that is off most) and the likely cause. Without sketches nothing is
checked, and ``status`` says so — never "ok". A collective missing contribution sketches is a
problem ("sketch missing"), unless each missing one belongs to a replica group that an injected
kill took out during that round (``FiredFaults.took_out``: a dead rank never wrote what it sent):
then the round is not checked, the reason naming the fault.

Tolerances: ``ftrun.check.numerics_core`` (each check's rounding budget, stated in the output).
"""

from __future__ import annotations

import math

from ftrun.check.fired_faults import ACTIONS, FiredFaults
from ftrun.check.numerics_causes import average_cause, sum_cause
from ftrun.check.numerics_core import (
    add as _add,
    average_tolerance,
    diff as _diff,
    quantized_average_tolerance,
    quantized_unit,
    scale as _scale,
    sketch_error,
    sum_tolerance,
)
from ftrun.check.numerics_heal import check_heals
from ftrun.check.numerics_outer import Mine, OuterChecker
from ftrun.check.numerics_result import (
    QUANTIZED_NOT_CHECKED,
    QUANTIZED_NOT_CHECKED_PREFIX,
    Numerics,
    quantized_not_checked,
    unplaced_problem,
)
from ftrun.check.numerics_rounds import ReplicaRound, RoundKey, in_time, outer_context, rounds_of
from ftrun.layout import EventRecord, LargestError, NumericsProblem, RoundNumerics, Sketch

__all__ = [
    "QUANTIZED_NOT_CHECKED",
    "QUANTIZED_NOT_CHECKED_PREFIX",
    "Numerics",
    "check_numerics",
    "quantized_not_checked",
]


class _Collective:
    """What every replica's check of one collective shares: its head, world, participant count,
    the contributions and their sum (``total``), the bound on the SUM's norm (the sum of the
    contributions' norms: the SUM's own norm is not recorded), and the first participant's
    average that passed its checks (the reference for the others)."""

    def __init__(self, head: RoundNumerics, world: int, participants: int, sends: list[ReplicaRound]) -> None:
        self.head, self.world, self.participants, self.sends = head, world, participants, sends
        self.contributions = [r.contribution for r in sends]
        self.total = [0.0] * len(sends[0].contribution.proj) if sends else []
        for r in sends:
            self.total = _add(self.total, r.contribution.proj)
        self.bound = sum(c.norm or 0.0 for c in self.contributions)
        self.first_average: tuple[ReplicaRound, Sketch] | None = None


class _Checker:
    def __init__(self, outer: OuterChecker | None = None, faults: FiredFaults | None = None) -> None:
        self.out = Numerics(status="checked")
        self.outer = outer or OuterChecker({}, {})
        self.faults = faults or FiredFaults()  # the run's injected faults that fired
        self.prev: dict[tuple[int, int, int], ReplicaRound] = {}  # (replica, rank, fragment) -> its previous round
        self.groups: dict[RoundKey, list[ReplicaRound]] = {}  # every collective (``_rounds``), to name a missing send

    def measure(self, err: float, tol: float, check: str, where: str) -> bool:
        ratio = err / tol if tol > 0 else (0.0 if err == 0 else math.inf)
        le = self.out.largest_error
        if math.isfinite(ratio) and (le is None or ratio > le.ratio):
            self.out.largest_error = LargestError(check, where, err, tol, ratio)
        return err <= tol and math.isfinite(tol)  # (norms too large for a finite budget: not a pass)

    def problem(
        self,
        rr: ReplicaRound,
        head: RoundNumerics,
        check: str,
        expected: float | None,
        observed: float | None,
        error: float | None,
        tol: float | None,
        cause: str,
        what: str,
    ) -> None:
        where = (
            f"sync step {rr.sync_step if rr.sync_step is not None else head.sync_step} "
            f"(manager step {head.manager_step}), "
            f"fragment {head.fragment}, replica {rr.replica} rank {rr.rank}"
        )
        nums = ""
        if expected is not None and observed is not None:
            nums = f": expected {expected:.9g}, observed {observed:.9g}"
            if error is not None and tol is not None:
                nums += f" (error {error:.3g}, tolerance {tol:.3g})"
        self.out.problems.append(
            NumericsProblem(
                sync_step=rr.sync_step if rr.sync_step is not None else head.sync_step,
                manager_step=head.manager_step,
                fragment=head.fragment,
                replica=rr.replica,
                rank=rr.rank,
                check=check,
                expected=expected,
                observed=observed,
                error=error,
                tolerance=tol,
                cause=cause,
                text=f"{where}: {what}{nums}; likely cause: {cause}",
            )
        )

    def _other_fragment(self, head: RoundNumerics, rank: int, have: list[int]) -> str | None:
        """The cause when the missing replicas sent another fragment in the same round (same rank,
        quorum and manager step): the replicas averaged different fragments in one collective."""
        other = sorted(
            (r.replica, key[1])
            for key, rounds in self.groups.items()
            if key[0] == rank and key[1] != head.fragment and key[2:4] == (head.quorum_id, head.manager_step)
            for r in rounds
            if r.send is not None and r.replica not in have
        )
        if not other:
            return None
        sent = ", ".join(f"replica {r} sent fragment {f}" for r, f in other)
        return f"replicas averaged different fragments in one collective ({sent}; torchft's fragment order differs)"

    def failed_round(self, rounds: list[ReplicaRound]) -> None:
        """A round no replica committed (e.g. torchft 0.2.0's Baby process groups): was its SUM
        still right? Reported apart (``failed_rounds``), never a problem: nothing stepped on it."""
        world = max((r.head.world or 0) for r in rounds)
        sends = [r for r in rounds if r.send is not None and r.send.contribution is not None]
        sums = [(r, r.sync.sum) for r in rounds if r.sync is not None and r.sync.sum is not None]
        fr = self.out.failed_rounds
        fr.rounds += 1
        if not sums or len(sends) < world:
            fr.sum_not_sketched += 1
            return
        total = [0.0] * len(sends[0].contribution.proj)
        for r in sends:
            total = _add(total, r.contribution.proj)
        contribs = [r.contribution for r in sends]
        ok = all(_diff(s.proj, total)[0] <= sum_tolerance(contribs, s, world, r.head.path) for r, s in sums)
        if ok:
            fr.sum_right += 1
        else:
            fr.sum_wrong += 1

    def group(self, rounds: list[ReplicaRound]) -> None:
        """One collective's rounds (every replica's send and sync of one fragment): the SUM, the
        average and the outer step of each replica that committed it, each failure a problem."""
        done = [r for r in rounds if r.sync is not None and r.commit]
        if not done:
            if any(r.sync is not None for r in rounds):
                self.failed_round(rounds)
            return
        head = done[0].head
        world = max((r.head.world or 0) for r in rounds)
        sends = [r for r in rounds if r.send is not None and r.send.contribution is not None]
        if head.path == "quantized" and not any(r.synced.sum is not None for r in done):
            self._quantized_without_sum(rounds, done, sends, head, world)
            return
        if len(sends) < world:
            self._sends_missing(done, sends, head, world)
            return
        n = sum(1 for r in sends if r.sent.participating)
        self._non_participants(sends, head)
        coll = _Collective(head, world, n, sends)
        checked_all = True
        for rr in done:
            outer_ok = self.outer_stages(rr, head, coll.bound / n if n else 0.0)
            s, a = rr.synced.sum, rr.synced.average
            if s is None or a is None:
                checked_all = False
                why = "SUM not sketched (the collective did not complete)" if s is None else "average not sketched"
                self.out.not_checked[why] = self.out.not_checked.get(why, 0) + 1
                continue
            ok = self._replica_sync(rr, coll, s, a) and outer_ok
            if ok and n and rr.send is not None and rr.sent.participating:
                ok = self._same_average(rr, coll, s, a)
            if ok:
                self.out.replica_syncs_checked += 1
        if checked_all:
            self.out.checked += 1
            self.out.quantized_checked += head.path == "quantized"

    def _quantized_without_sum(
        self,
        rounds: list[ReplicaRound],
        done: list[ReplicaRound],
        sends: list[ReplicaRound],
        head: RoundNumerics,
        world: int,
    ) -> None:
        """A quantized collective with no SUM sketched: with every contribution, the fp8 budget on
        the average; without them (the wrapper not installed, or an ftrun before it), not
        checked, saying why."""
        if len(sends) < world or not world or any(not r.contribution.numel for r in sends):
            why = next((r.head.unsketched for r in rounds if r.head.unsketched), None)
            if why is None and world and any(r.contribution.numel for r in sends):  # the wrapper ran
                have = sorted(r.replica for r in sends if r.contribution.numel)
                why = f"the collective had {world} replicas, contribution sketches from replica(s) {have} only"
            why = quantized_not_checked(why)
            self.out.not_checked[why] = self.out.not_checked.get(why, 0) + len(done)
            return
        checked = self.out.checked
        self._quantized(rounds, done, sends, head)
        self.out.quantized_checked += self.out.checked - checked
        self.out.quantized_without_sum += self.out.checked - checked

    def _sends_missing(
        self, done: list[ReplicaRound], sends: list[ReplicaRound], head: RoundNumerics, world: int
    ) -> None:
        """Fewer contribution sketches than replicas in the collective: the SUM cannot be checked
        (a problem on each replica that committed it, naming the likely cause), or, when injected
        faults took out as many other replicas during the round, not checked (``_killed``)."""
        have = sorted(r.replica for r in sends)
        why = self._killed(head, have, world, done)
        if why is not None:
            self.out.not_checked[why] = self.out.not_checked.get(why, 0) + len(done)
            return
        for rr in done:
            self.problem(
                rr,
                head,
                "sketch missing",
                None,
                None,
                None,
                None,
                self._other_fragment(head, rr.rank, have) or "a sketch missing (a rank's event log lacks its send)",
                f"the collective had {world} replicas, contribution sketches from replica(s) {have} only: "
                "the SUM cannot be checked",
            )

    def _killed(self, head: RoundNumerics, have: list[int], world: int, done: list[ReplicaRound]) -> str | None:
        """Why the collective is not checked when every missing contribution sketch belongs to a
        replica group an injected kill or SIGTERM took out during the round (one group per missing
        sketch; ``FiredFaults.took_out``); None when that does not account for them all."""
        sync_step = next((r.sync_step for r in done if r.sync_step is not None), head.sync_step)
        if sync_step is None:
            return None
        others = sorted({m.replica for m in self.faults.marks} - set(have))
        marks = [m for r in others if (m := self.faults.took_out(r, sync_step, head.manager_step)) is not None]
        if not marks or len(have) + len(marks) < world:
            return None
        who = "; ".join(f"replica {m.replica}, {ACTIONS.get(m.action, m.action)} at step {m.step}" for m in marks)
        return (
            "contribution sketch missing from a group an injected fault killed mid-round "
            f"(before its event log recorded the send): {who}"
        )

    def _non_participants(self, sends: list[ReplicaRound], head: RoundNumerics) -> None:
        """A replica not participating must contribute zeros (torchft zeroes a healing replica's)."""
        for r in sends:
            c = r.contribution
            if not r.sent.participating and c.norm != 0.0:
                self.problem(
                    r,
                    head,
                    "non-participant",
                    0.0,
                    c.norm,
                    c.norm,
                    0.0,
                    "a non-participant's values reached the SUM",
                    "a replica not participating contributed non-zero values (norm of its contribution)",
                )

    def _replica_sync(self, rr: ReplicaRound, coll: _Collective, s: Sketch, a: Sketch) -> bool:
        """One replica's view of the collective: its participant count, SUM = sum of the
        contributions, average = SUM / participants. False: a problem was recorded."""
        head, n, quantized = coll.head, coll.participants, coll.head.path == "quantized"
        where = f"replica {rr.replica} rank {rr.rank} sync step {rr.sync_step}"
        prev = self.prev.get((rr.replica, rr.rank, head.fragment))
        ok = True
        if rr.head.participants != n:
            ok = False
            self.problem(
                rr,
                head,
                "participants",
                float(n),
                float(rr.head.participants or 0),
                None,
                None,
                "a wrong participant count",
                f"its manager counted {rr.head.participants} participants, "
                f"{n} replica(s) of the collective participated",
            )
        tol = sum_tolerance(coll.contributions, s, coll.world, head.path)
        err, j = _diff(s.proj, coll.total)
        label = "quantized SUM = sum of contributions (fp8)" if quantized else "SUM = sum of contributions"
        if not self.measure(err, tol, label, where):
            ok = False
            cause = sum_cause(s, coll.total, coll.sends, prev, tol, coll.bound)
            what = "the process group's SUM is not the sum of the contributions"
            self.problem(rr, head, "sum", coll.total[j], s.proj[j], err, tol, cause, what)
        if not n:
            return ok
        # a quantized SUM's norm: up to two e4m3 roundings above sum||c|| (each contribution, the sum)
        bound = coll.bound * (1 + quantized_unit(s.numel)) ** 2 if quantized else coll.bound
        tol = average_tolerance(s, a, n, bound)
        want = _scale(s.proj, 1.0 / n)
        err, j = _diff(a.proj, want)
        if not self.measure(err, tol, "average = SUM / participants", where):
            cause = average_cause(s, a, n, coll.world, prev, tol)
            what = f"the average the outer optimizer stepped on is not SUM / {n} participants"
            self.problem(rr, head, "average", want[j], a.proj[j], err, tol, cause, what)
            return False
        return ok

    def _same_average(self, rr: ReplicaRound, coll: _Collective, s: Sketch, a: Sketch) -> bool:
        """Every participant stepped from the same average: each one that passed its own checks
        against the first that did (one that failed them is already named). False: a problem."""
        if coll.first_average is None:
            coll.first_average = (rr, a)
            return True
        q, qa = coll.first_average
        size = (s.norm if s.norm is not None else coll.bound) / coll.participants
        tol = sketch_error(a, size) + sketch_error(qa, size)
        err, j = _diff(a.proj, qa.proj)
        where = f"replica {rr.replica} rank {rr.rank} sync step {rr.sync_step}"
        if self.measure(err, tol, "same average on every participant", where):
            return True
        self.problem(
            rr,
            coll.head,
            "same average",
            qa.proj[j],
            a.proj[j],
            err,
            tol,
            "values changed after the collective on one replica",
            f"participants stepped from different averages (replica {q.replica}'s is the reference)",
        )
        return False

    def outer_stages(self, rr: ReplicaRound, head: RoundNumerics, avg_bound: float) -> bool:
        """The outer step's stages of ``rr``'s commit (``ftrun.check.numerics_outer``); False: a problem."""
        mine = Mine(
            rr.replica, rr.rank, rr.sync_step or 0, rr.send, rr.synced.average, rr.synced.outer, avg_bound, rr.restart
        )
        mine.ref = (rr, head)
        findings = self.outer.check(mine, head.fragment)
        for f in findings:  # (a finding about the previous commit's step names that sync)
            at, at_head = f.ref if f.ref is not None else (rr, head)
            self.problem(at, at_head, f.stage, f.expected, f.observed, f.error, f.tolerance, f.cause, f.what)
        return not any(f.ref is None for f in findings)

    def _quantized(
        self, rounds: list[ReplicaRound], done: list[ReplicaRound], sends: list[ReplicaRound], head: RoundNumerics
    ) -> None:
        """A quantized round with every contribution sketched: average = Σ contributions / n
        within ``quantized_average_tolerance`` (no SUM is observable on that path)."""
        n = sum(1 for r in sends if r.sent.participating)
        contribs = [r.contribution for r in sends]
        want = [0.0] * len(contribs[0].proj)
        for c in contribs:
            want = _add(want, c.proj)
        checked_all = True
        for rr in done:
            a = rr.synced.average
            self.outer_stages(rr, head, sum(c.norm or 0.0 for c in contribs) * 2 / n if n else 0.0)
            if a is None or not n:
                checked_all = False
                self.out.not_checked["average not sketched"] = self.out.not_checked.get("average not sketched", 0) + 1
                continue
            tol = quantized_average_tolerance(contribs, a, n)
            exp = _scale(want, 1.0 / n)
            err, j = _diff(a.proj, exp)
            where = f"replica {rr.replica} rank {rr.rank} sync step {rr.sync_step}"
            if self.measure(err, tol, "quantized average = sum of contributions / participants", where):
                self.out.replica_syncs_checked += 1
            else:
                self.problem(
                    rr,
                    head,
                    "average",
                    exp[j],
                    a.proj[j],
                    err,
                    tol,
                    "values beyond the fp8 quantization error (or a wrong divide)",
                    f"the quantized round's average is not the sum of the contributions / {n} participants "
                    "within the fp8 e4m3 budget",
                )
        if checked_all:
            self.out.checked += 1

    def remember(self, rounds: list[ReplicaRound]) -> None:
        for r in rounds:
            if r.sync is not None:
                self.prev[(r.replica, r.rank, r.head.fragment)] = r


def check_numerics(
    logs: dict[tuple[int, int], list[EventRecord]],
    sketches_on: bool | None = None,
    partial: str | None = None,
    faults: FiredFaults | None = None,
) -> Numerics:
    """``logs``: (replica, rank) -> records, merged across the job's groups. ``sketches_on``: the
    run's ``sketches`` setting (None: not known — a foreign run or an ftrun before sketches);
    ``partial``: why only part of the job is here (then nothing is checked); ``faults``: the
    injected faults that fired (``ftrun.check.fired_faults.fault_marks``; None: none known), which
    may explain a missing contribution sketch (module docstring)."""
    if not logs:
        return Numerics(why="no event logs")
    if partial:
        return Numerics(why=partial)
    groups, committed, missing = rounds_of(logs)
    if sketches_on is False:
        return Numerics(why="sketches off (--no-sketches)", committed=committed)
    if not groups:
        why = "no sketches in the event logs (a run without them)" if sketches_on is None else "no sync was sketched"
        out = Numerics(why=why, committed=committed)
        if sketches_on and committed:
            out.status, out.why = "checked", None
            out.problems.append(
                unplaced_problem(
                    "sketch missing",
                    "a sketch missing",
                    f"sketches were on but none was recorded for the {committed} committed sync(s)",
                )
            )
        return out
    c = _Checker(OuterChecker(*outer_context(logs)), faults)
    c.out.committed = committed
    c.out.not_checked.update(missing)
    c.groups = groups
    order = sorted(groups.items(), key=in_time)
    for _, rounds in order:
        c.group(rounds)
        c.remember(rounds)
    check_heals(logs, c.out, c.problem)
    c.outer.finish()
    c.out.stages = c.outer.stages
    c.out.paths = sorted({r.head.path for rs in groups.values() for r in rs})
    if not c.out.checked and not c.out.problems:
        c.out.status = "not checked"
        c.out.why = (
            "no sync committed (nothing stepped on an average)"
            if not committed
            else next(
                (why for why in c.out.not_checked if why.startswith(QUANTIZED_NOT_CHECKED_PREFIX)),
                "no committed sync had its sketches",
            )
        )
    return c.out
