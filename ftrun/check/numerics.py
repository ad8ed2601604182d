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
checked, and ``status`` says so — never "ok".

Tolerances: ``ftrun.check.numerics_core`` (each check's rounding budget, stated in the output).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

# (Z, roundoff and sketch_error are this module's API too: callers import them from here)
from ftrun.check.numerics_core import (
    NO_FINITE_BUDGET,
    Z,
    add as _add,
    average_tolerance,
    diff as _diff,
    near as _near,
    quantized_average_tolerance,
    quantized_unit,
    scale as _scale,
    sketch_error,
    sum_tolerance,
    tolerance_rule,
)
from ftrun.check.numerics_outer import OUTER_RULE, Mine, OuterChecker
from ftrun.check.numerics_rounds import ReplicaRound, in_time, outer_context, rounds_of
from ftrun.layout import EventRecord, RoundNumerics, Sketch

QUANTIZED_NOT_CHECKED_PREFIX = "quantized rounds: not checked"
# an ftrun before the quantized wrapper: no ``unsketched`` reason recorded
QUANTIZED_NOT_CHECKED = (
    f"{QUANTIZED_NOT_CHECKED_PREFIX} (torchft's quantized allreduce calls the process group's "
    "alltoall + allgather, not the allreduce the sketches hook)"
)


def quantized_not_checked(why: str | None) -> str:
    """The not-checked reason of quantized rounds without contribution sketches."""
    return f"{QUANTIZED_NOT_CHECKED_PREFIX} ({why})" if why else QUANTIZED_NOT_CHECKED


# every problem's keys (``Numerics.problems``): where, what was compared, the likely cause, its line
PROBLEM_KEYS = tuple(
    "sync_step manager_step fragment replica rank check expected observed error tolerance cause text".split()
)


def _last_commit(
    logs: dict[tuple[int, int], list[EventRecord]], rank: int, fragment: int, healed: int, source: int | None, at: int
) -> tuple[int, EventRecord] | None:
    """The (replica, sync step's record) of the last commit of ``fragment`` with its fingerprint, on
    ``rank`` of another replica than ``healed``, to a manager step <= ``at``: the global parameters
    a heal at manager step ``at`` received. The ``source``'s own commit when it is the latest; else
    another replica's: a source that itself healed since its last commit of the fragment (a chain
    of faults) holds the globals of a commit it did not make, and the replicas of a quorum agree on
    every commit (``ftrun.check.agreement``)."""
    best: tuple[int, EventRecord] | None = None
    for (replica, r), recs in sorted(logs.items(), key=lambda kv: kv[0][0] != source):  # the source first
        if r != rank or replica == healed:
            continue
        for rec in recs:
            if rec.synced == fragment and rec.commit and rec.fingerprint and (rec.manager_step_after or 0) <= at:
                if best is None or (rec.manager_step_after or 0) > (best[1].manager_step_after or 0):
                    best = (replica, rec)
    return best


@dataclass
class Numerics:
    """The check's result. ``status``: "checked" or "not checked" (``why``)."""

    status: str = "not checked"
    why: str | None = None
    checked: int = 0  # collective rounds (committed syncs) whose every check ran
    replica_syncs_checked: int = 0
    committed: int = 0  # committed syncs (replica, rank, sync step) in the logs
    not_checked: dict[str, int] = field(default_factory=dict)  # why -> how many committed replica-syncs
    problems: list[dict[str, Any]] = field(default_factory=list)
    largest_error: dict[str, Any] | None = None  # the check closest to its tolerance
    heals: list[dict[str, Any]] = field(default_factory=list)
    stages: dict[str, Any] = field(default_factory=dict)  # the outer step's (``numerics_outer.OuterChecker``)
    paths: list[str] = field(default_factory=list)
    quantized_checked: int = 0  # of ``checked``: rounds of torchft's quantized allreduce (the fp8 budget)
    quantized_without_sum: int = 0  # of ``quantized_checked``: no SUM sketched, the average checked (``_quantized``)
    # rounds whose commit failed everywhere: their SUM checked all the same (``_Checker.failed_round``)
    failed_rounds: dict[str, int] = field(
        default_factory=lambda: {"rounds": 0, "sum_right": 0, "sum_wrong": 0, "sum_not_sketched": 0}
    )

    @property
    def ok(self) -> bool:
        return not self.problems

    def texts(self) -> list[str]:
        return [p["text"] for p in self.problems]

    def evidence(self, lines: list[str]) -> None:
        """Problems with the evidence itself (``ftrun.check.log_evidence``): each a problem, so
        a damaged or missing record fails the check instead of making a count smaller."""
        for text in lines:
            self.problems.append(
                {**dict.fromkeys(PROBLEM_KEYS), "check": "event log", "cause": "evidence", "text": text}
            )
        if lines:
            self.status = "checked"  # (a check that found problems; ``why`` keeps what it could not check)

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "why": self.why,
            "checked": self.checked,
            "replica_syncs_checked": self.replica_syncs_checked,
            "committed": self.committed,
            "not_checked": self.not_checked,
            "paths": self.paths,
            "quantized_checked": self.quantized_checked,
            "quantized_without_sum": self.quantized_without_sum,
            "tolerance": {"rule": tolerance_rule(), "z": Z, "largest_error": self.largest_error, "outer": OUTER_RULE},
            "stages": self.stages,
            "problems": self.problems,
            "heals": self.heals,
            "failed_rounds": self.failed_rounds,
        }


class _Checker:
    def __init__(self, outer: OuterChecker | None = None) -> None:
        self.out = Numerics(status="checked")
        self.outer = outer or OuterChecker({}, {})
        self.prev: dict[tuple[int, int, int], ReplicaRound] = {}  # (replica, rank, fragment) -> its previous round
        self.groups: dict[tuple, list[ReplicaRound]] = {}  # every collective (``_rounds``), to name a missing send

    def measure(self, err: float, tol: float, check: str, where: str) -> bool:
        ratio = err / tol if tol > 0 else (0.0 if err == 0 else math.inf)
        le = self.out.largest_error
        if math.isfinite(ratio) and (le is None or ratio > le["ratio"]):
            self.out.largest_error = {"check": check, "where": where, "error": err, "tolerance": tol, "ratio": ratio}
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
            {
                "sync_step": rr.sync_step if rr.sync_step is not None else head.sync_step,
                "manager_step": head.manager_step,
                "fragment": head.fragment,
                "replica": rr.replica,
                "rank": rr.rank,
                "check": check,
                "expected": expected,
                "observed": observed,
                "error": error,
                "tolerance": tol,
                "cause": cause,
                "text": f"{where}: {what}{nums}; likely cause: {cause}",
            }
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
        fr["rounds"] += 1
        if not sums or len(sends) < world:
            fr["sum_not_sketched"] += 1
            return
        total = [0.0] * len(sends[0].contribution.proj)
        for r in sends:
            total = _add(total, r.contribution.proj)
        contribs = [r.contribution for r in sends]
        ok = all(_diff(s.proj, total)[0] <= sum_tolerance(contribs, s, world, r.head.path) for r, s in sums)
        fr["sum_right" if ok else "sum_wrong"] += 1

    def group(self, rounds: list[ReplicaRound]) -> None:
        done = [r for r in rounds if r.sync is not None and r.commit]
        if not done:
            if any(r.sync is not None for r in rounds):
                self.failed_round(rounds)
            return
        head = done[0].head
        world = max((r.head.world or 0) for r in rounds)
        sends = [r for r in rounds if r.send is not None and r.send.contribution is not None]
        quantized = head.path == "quantized"
        if quantized and not any(r.synced.sum is not None for r in done):
            # no SUM sketched: with every contribution, the fp8 budget on the average; without
            # them (the wrapper not installed, or an ftrun before it), not checked, saying why
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
            return
        if len(sends) < world:
            have = sorted(r.replica for r in sends)
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
            return
        participants = [r for r in sends if r.sent.participating]
        n = len(participants)
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
        total = [0.0] * len(sends[0].contribution.proj)
        for r in sends:
            total = _add(total, r.contribution.proj)
        contribs = [r.contribution for r in sends]
        bound = sum(c.norm or 0.0 for c in contribs)  # >= ||SUM||: the SUM's norm is not recorded
        first_avg: tuple[ReplicaRound, Sketch] | None = None
        checked_all = True
        for rr in done:
            outer_ok = self.outer_stages(rr, head, bound / n if n else 0.0)
            s, a = rr.synced.sum, rr.synced.average
            if s is None or a is None:
                checked_all = False
                why = "SUM not sketched (the collective did not complete)" if s is None else "average not sketched"
                self.out.not_checked[why] = self.out.not_checked.get(why, 0) + 1
                continue
            where = f"replica {rr.replica} rank {rr.rank} sync step {rr.sync_step}"
            prev = self.prev.get((rr.replica, rr.rank, head.fragment))
            ok = outer_ok
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
            tol = sum_tolerance(contribs, s, world, head.path)
            err, j = _diff(s.proj, total)
            label = "quantized SUM = sum of contributions (fp8)" if quantized else "SUM = sum of contributions"
            if not self.measure(err, tol, label, where):
                ok = False
                cause = self._sum_cause(s, total, sends, prev, tol, bound)
                self.problem(
                    rr,
                    head,
                    "sum",
                    total[j],
                    s.proj[j],
                    err,
                    tol,
                    cause,
                    "the process group's SUM is not the sum of the contributions",
                )
            if n:
                # a quantized SUM's norm: up to two e4m3 roundings above sum||c|| (each contribution, the sum)
                tol = average_tolerance(s, a, n, bound * (1 + quantized_unit(s.numel)) ** 2 if quantized else bound)
                want = _scale(s.proj, 1.0 / n)
                err, j = _diff(a.proj, want)
                if not self.measure(err, tol, "average = SUM / participants", where):
                    ok = False
                    self.problem(
                        rr,
                        head,
                        "average",
                        want[j],
                        a.proj[j],
                        err,
                        tol,
                        self._avg_cause(s, a, n, world, prev, tol),
                        f"the average the outer optimizer stepped on is not SUM / {n} participants",
                    )
            # every participant stepped from the same average: each one that passed its own checks
            # against the first that did (one that failed them is already named above)
            if ok and n and rr.send is not None and rr.sent.participating:
                if first_avg is None:
                    first_avg = (rr, a)
                else:
                    q, qa = first_avg
                    size = (s.norm if s.norm is not None else bound) / n
                    tol = sketch_error(a, size) + sketch_error(qa, size)
                    err, j = _diff(a.proj, qa.proj)
                    if not self.measure(err, tol, "same average on every participant", where):
                        ok = False
                        self.problem(
                            rr,
                            head,
                            "same average",
                            qa.proj[j],
                            a.proj[j],
                            err,
                            tol,
                            "values changed after the collective on one replica",
                            f"participants stepped from different averages (replica {q.replica}'s is the reference)",
                        )
            if ok:
                self.out.replica_syncs_checked += 1
        if checked_all:
            self.out.checked += 1
            self.out.quantized_checked += quantized

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

    def _sum_cause(
        self,
        s: Sketch,
        total: list[float],
        sends: list[ReplicaRound],
        prev: ReplicaRound | None,
        tol: float,
        bound: float,
    ) -> str:
        if not math.isfinite(tol):
            return NO_FINITE_BUDGET
        for q in sends:
            if (
                q.sent.participating
                and q.contribution.norm != 0.0
                and _near(s.proj, _add(total, q.contribution.proj, -1.0), tol)
            ):
                return f"a contribution missing (replica {q.replica}'s is not in the SUM)"
        if prev is not None and prev.synced.sum is not None and _near(s.proj, prev.synced.sum.proj, 2 * tol):
            return (
                "a stale buffer (the SUM equals this replica's previous round of the fragment, "
                f"manager step {prev.head.manager_step})"
            )
        rel = _diff(s.proj, total)[0] / max(s.norm if s.norm is not None else bound, 1e-300)
        return f"values changed in the collective (the SUM is off by {rel:.3g} of its norm)"

    def _avg_cause(self, s: Sketch, a: Sketch, n: int, world: int, prev: ReplicaRound | None, tol: float) -> str:
        if not math.isfinite(tol):
            return NO_FINITE_BUDGET
        if n > 1 and _near(a.proj, s.proj, n * tol):
            return "not divided at all: the average is the SUM (torchft's divide-by-participants callback did not run)"
        if _near(a.proj, _scale(s.proj, 1.0 / (n + 1)), tol):
            return (
                f"divided by participants + 1 = {n + 1} instead of {n} participants "
                "(the world size instead of the participants?)"
            )
        if world != n and world > 0 and _near(a.proj, _scale(s.proj, 1.0 / world), tol):
            return f"divided by the world size {world} instead of {n} participants"
        if prev is not None and prev.synced.average is not None and _near(a.proj, prev.synced.average.proj, 2 * tol):
            return (
                "a stale buffer (the average equals this replica's previous round, "
                f"manager step {prev.head.manager_step})"
            )
        return "values changed after the collective (between torchft's divide and the outer step)"

    def heals(self, logs: dict[tuple[int, int], list[EventRecord]]) -> None:
        for (replica, rank), recs in sorted(logs.items()):
            for i, rec in enumerate(recs):
                if not rec.heal_numerics:
                    continue
                hn = rec.heal_numerics
                src = rec.healed.source_replica if rec.healed else None
                entry: dict[str, Any] = {
                    "replica": replica,
                    "rank": rank,
                    "source_replica": src,
                    "manager_step": hn.manager_step,
                    "step": rec.step,
                    "fragments_checked": 0,
                    "fragments_not_checked": [],
                    "params_match": None,
                }
                for f, mine in enumerate(hn.fingerprints):
                    ref = _last_commit(logs, rank, f, replica, src, hn.manager_step)
                    if ref is None:
                        entry["fragments_not_checked"].append(f)
                        continue
                    (ref_replica, ref_rec) = ref
                    entry["fragments_checked"] += 1
                    if mine != ref_rec.fingerprint:
                        entry["params_match"] = False
                        rr = ReplicaRound(replica, rank, sync_step=rec.step)
                        head = RoundNumerics("heal", f, hn.manager_step, None)
                        self.problem(
                            rr,
                            head,
                            "heal",
                            None,
                            None,
                            None,
                            None,
                            "the checkpoint transport delivered other parameters",
                            f"after healing from replica {ref_replica}, fragment {f}'s global parameters (fingerprint "
                            f"{mine}) differ from the source's after its commit to manager step "
                            f"{ref_rec.manager_step_after} ({ref_rec.fingerprint})",
                        )
                    elif entry["params_match"] is None:
                        entry["params_match"] = True
                first = next((p for x in recs[i:] for p in (x.numerics or []) if p.phase == "send"), None)
                if first is not None and first.contribution is not None:
                    # the rule: a non-participant contributes zeros; a participant's values are in
                    # the SUM, which the round's own check verified (no problem named it)
                    zero = first.contribution.norm == 0.0
                    flagged = any(
                        p["fragment"] == first.fragment and p["manager_step"] == first.manager_step
                        for p in self.out.problems
                    )
                    entry["first_contribution"] = {
                        "fragment": first.fragment,
                        "manager_step": first.manager_step,
                        "participating": first.participating,
                        "zero": zero,
                        "follows_rule": (not flagged) if first.participating else zero,
                    }
                self.out.heals.append(entry)


def check_numerics(
    logs: dict[tuple[int, int], list[EventRecord]], sketches_on: bool | None = None, partial: str | None = None
) -> Numerics:
    """``logs``: (replica, rank) -> records, merged across the job's groups. ``sketches_on``: the
    run's ``sketches`` setting (None: not known — a foreign run or an ftrun before sketches);
    ``partial``: why only part of the job is here (then nothing is checked)."""
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
                {
                    "check": "sketch missing",
                    "cause": "a sketch missing",
                    "sync_step": None,
                    "manager_step": None,
                    "fragment": None,
                    "replica": None,
                    "rank": None,
                    "expected": None,
                    "observed": None,
                    "error": None,
                    "tolerance": None,
                    "text": f"sketches were on but none was recorded for the {committed} committed sync(s)",
                }
            )
        return out
    c = _Checker(OuterChecker(*outer_context(logs)))
    c.out.committed = committed
    c.out.not_checked.update(missing)
    c.groups = groups
    order = sorted(groups.items(), key=in_time)
    for _, rounds in order:
        c.group(rounds)
        c.remember(rounds)
    c.heals(logs)
    c.outer.finish()
    c.out.stages = c.outer.to_json()
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
