"""The outer step's stages (ftrun.check.numerics_outer) on hand-made sketches: a simulated run of
Nesterov SGD in projection space, clean and with each --corrupt-sync kind, tolerance edges, a
non-participant, a healed replica, a non-linear optimizer."""

from __future__ import annotations

import random

import pytest

from ftrun.check.numerics import check_numerics
from ftrun.check.numerics_core import U32, Z, sketch_error
from ftrun.check.numerics_outer import Mine, OuterChecker, local_norm, merged_norm
from ftrun.layout import EventRecord, Healed, OuterStep, RoundNumerics, Sketch
from train_fixtures import event_record

N = 100_000  # elements per fragment
LR, MU = 0.7, 0.9


def sk(proj: list[float], norm: float | None = None) -> Sketch:
    return Sketch(
        [float(x) for x in proj], norm if norm is not None else max(1e-3, sum(x * x for x in proj) ** 0.5), N, "float32"
    )


def bare(proj: list[float]) -> Sketch:
    """A sketch without its norm, as the worker records ``local`` and ``merged`` (ftrun.worker.sketch_outer)."""
    return Sketch([float(x) for x in proj], None, N, "float32")


def vec(seed: int, scale: float = 1.0) -> list[float]:
    r = random.Random(seed)
    return [r.gauss(0, scale) for _ in range(4)]


def lin(*terms: tuple[float, list[float]]) -> list[float]:
    return [sum(k * v[j] for k, v in terms) for j in range(4)]


def rec(step: int, parts: list[RoundNumerics], **fields) -> EventRecord:
    base = dict(manager_step_after=0, participants=2, quorum_id=1, t=float(step))
    return EventRecord(**event_record(step, **{**base, **fields}, numerics=parts))


def part(phase: str, k: int, participating: bool = True, participants: int = 2, **sketches) -> RoundNumerics:
    return RoundNumerics(
        phase=phase,
        fragment=0,
        manager_step=k,
        quorum_id=1,
        sync_step=10 + 10 * k,
        participants=participants,
        participating=participating,
        world=2,
        **sketches,
    )


def simulate(
    rounds: int = 3,
    fault: str | None = None,
    at: int = 1,
    alpha: float = 0.0,
    optimizer: str = "SGD",
    loaded: int | None = None,
    healed: bool = False,
    norms: bool = False,
    derived: bool = False,
):
    """Event logs of 2 replicas, fragment 0, ``rounds`` commits of Nesterov SGD in projection space;
    ``fault`` (a --corrupt-sync kind) on replica 1 in round ``at``; ``loaded``: replica 1 gets other
    originals and momentum before that round (what a heal loads), ``healed``: its record says so.
    ``local`` and ``merged`` without their norms, as the worker records them; ``norms``: with them
    (an event log from before that). ``derived``: ``original`` recorded only where the worker
    sketches it under SGD (a chain's start: the first send, a healed replica's), else every send."""
    own_norm = sk if norms else bare
    globals_ = vec(0, 10.0)
    own = [list(globals_), list(globals_)]  # each replica's originals (stale keeps the old ones)
    buf: list[list[float] | None] = [None, None]
    logs: dict[tuple[int, int], list[EventRecord]] = {(0, 0): [], (1, 0): []}
    for k in range(rounds):
        if k == loaded:
            own[1], buf[1] = lin((1.0, own[1]), (1.0, vec(99))), lin((1.0, buf[1] or [0.0] * 4), (1.0, vec(98)))
        locs = [lin((1.0, own[r]), (-1.0, vec(100 * k + r))) for r in range(2)]
        cs = [lin((1.0, own[r]), (-1.0, locs[r])) for r in range(2)]
        if fault == "sign" and k == at:
            cs[1] = [-x for x in cs[1]]
        total = lin((1.0, cs[0]), (1.0, cs[1]))
        avg = [x / 2 for x in total]
        for r in range(2):
            o = own[r]
            b = avg if buf[r] is None else lin((MU, buf[r]), (1.0, avg))
            lr = LR * 2 if fault == "lr" and k == at and r == 1 else LR
            p = lin((1.0, o), (-lr, lin((1.0, avg), (MU, b))))
            lsync = lin((1.0, locs[r]), (-1.0, vec(7 + k)))
            a = 0.0 if fault == "alpha" and k == at and r == 1 else alpha
            merged = lin((1.0 - a, p), (a, lsync))
            step = OuterStep(
                optimizer,
                LR,
                momentum=MU,
                nesterov=True,
                first_momentum=buf[r] is None,
                # the worker sketches the buffers only where their chain starts unseen (a heal)
                momentum_after=sk(b) if k == loaded and r == 1 else None,
                alpha=alpha,
                local_sync=sk(lsync) if alpha else None,
                merged=own_norm(merged) if alpha else None,
            )
            sketched = not derived or k == 0 or (healed and k == loaded and r == 1)
            send = part(
                "send", k, contribution=sk(cs[r]), original=sk(o) if sketched else None, local=own_norm(locs[r])
            )
            sync = part("sync", k, sum=sk(total), average=sk(avg), outer=step)
            heal = {"healed": Healed(0, k, k)} if healed and k == loaded and r == 1 else {}
            logs[(r, 0)] += [
                rec(10 * k + 5, [send], **heal),
                rec(10 * k + 10, [sync], commit=True, manager_step_after=k + 1, synced=0),
            ]
            buf[r] = b
            if not (fault == "stale" and k == at and r == 1):
                own[r] = p
    return logs


def causes(out) -> list[tuple[int, str, str]]:
    return [(p.replica, p.check, p.cause) for p in out.problems]


LAST = "the fragment's last sync in the log (no next send shows its globals)"


def test_a_clean_run_passes_every_stage_with_its_tolerance():
    out = check_numerics(simulate(), sketches_on=True)
    assert out.ok, out.texts()
    st = out.stages
    assert st["pseudo-gradient"].checked == 6
    # each step against the next round's originals: the last round of each replica has none
    assert st["outer step"].checked == 4 and st["outer step"].not_checked == {LAST: 2}
    assert all(0 <= st[s].largest_error.ratio < 1 for s in ("pseudo-gradient", "outer step"))
    assert "outer step" in out.record().tolerance.outer


def test_sign_flipped():
    out = check_numerics(simulate(fault="sign"), sketches_on=True)
    cause = "sign flipped: the contribution is local - original (the pseudo-gradient negated)"
    assert causes(out) == [(1, "pseudo-gradient", cause)]
    assert out.problems[0].sync_step == 20
    assert "likely cause: sign flipped" in out.texts()[0]


def test_stale_originals_are_named_at_the_sync_that_did_not_store_them():
    out = check_numerics(simulate(fault="stale"), sketches_on=True)
    (replica, check, cause), *rest = causes(out)
    assert (replica, check) == (1, "outer step") and not rest, out.texts()
    assert cause.startswith("stale original parameters: the next round's (sync step 30) equal this round's")
    assert out.problems[0].sync_step == 20


def test_wrong_lr_is_fitted():
    out = check_numerics(simulate(fault="lr"), sketches_on=True)
    assert [(r, c) for r, c, _ in causes(out)] == [(1, "outer step")], out.texts()
    assert "wrong lr: the step fits lr 1.4, the optimizer's param_groups say 0.7" in out.problems[0].cause
    assert out.problems[0].sync_step == 20


def test_alpha_ignored_and_a_clean_merge():
    clean = check_numerics(simulate(alpha=0.5), sketches_on=True)
    assert clean.ok and clean.stages["merge"].checked == 4, clean.texts()
    out = check_numerics(simulate(fault="alpha", alpha=0.5), sketches_on=True)
    assert [(r, c) for r, c, _ in causes(out)] == [(1, "merge")], out.texts()
    assert out.problems[0].cause.startswith("alpha ignored") and out.problems[0].sync_step == 20
    assert check_numerics(simulate(), sketches_on=True).stages["merge"].not_checked == {
        "alpha = 0 (the merge leaves the globals)": 6
    }


def test_local_and_merged_norms_recorded_or_bounded():
    """The worker records ``local`` and ``merged`` without norms; the check bounds them, and a log that
    has them (from before) is checked with them: clean passes, each fault is caught the same."""
    for norms in (False, True):
        assert check_numerics(simulate(alpha=0.5, norms=norms), sketches_on=True).ok
    for kind, stage in (("sign", "pseudo-gradient"), ("alpha", "merge"), ("stale", "outer step"), ("lr", "outer step")):
        found = [
            causes(check_numerics(simulate(fault=kind, alpha=0.5, norms=n), sketches_on=True)) for n in (False, True)
        ]
        assert found[0] == found[1] and found[0][0][:2] == (1, stage), found


def test_the_bounds_of_unmeasured_norms():
    o, c = sk([3.0, 0.0, 0.0, 0.0], norm=10.0), sk([1.0, 0.0, 0.0, 0.0], norm=0.5)
    assert local_norm(bare([2.0, 0, 0, 0]), o.norm, c) == 10.5  # ||original|| + ||contribution||
    assert local_norm(sk([2.0, 0, 0, 0], norm=9.7), o.norm, c) == 9.7  # recorded: its own
    g, ls = sk([1.0, 0, 0, 0], norm=8.0), sk([1.0, 0, 0, 0], norm=12.0)
    assert merged_norm(bare([1.0, 0, 0, 0]), g.norm, ls, 0.25) == 0.75 * 8.0 + 0.25 * 12.0
    assert merged_norm(sk([1.0, 0, 0, 0], norm=9.0), g.norm, ls, 0.25) == 9.0


def test_an_unmeasured_local_norm_loosens_the_pseudo_gradient_tolerance_only_by_the_contribution():
    """The tolerance with ||local|| bounded is the one with ||local|| measured, but for
    ||original|| + ||contribution|| in place of ||local|| (each a parameter vector's norm; the
    contribution, a pseudo-gradient, small beside them)."""
    o, loc = sk(vec(1, 10.0), norm=100.0), sk(vec(2, 10.0), norm=99.0)
    c = sk(lin((1.0, o.proj), (-1.0, loc.proj)), norm=2.0)
    measured = sketch_error(loc)
    bounded = sketch_error(bare(loc.proj), local_norm(bare(loc.proj), o.norm, c))
    assert measured < bounded <= measured * (100.0 + 2.0) / 99.0 * (1 + 1e-12)


def test_a_non_linear_optimizer_is_checked_up_to_the_average_and_says_so():
    out = check_numerics(simulate(optimizer="Adam"), sketches_on=True)
    assert out.ok and out.stages["pseudo-gradient"].checked == 6
    why = "outer step of Adam: not checked (not linear in its state; checked up to the average)"
    assert out.stages["outer step"].not_checked == {why: 6}


def test_pseudo_gradient_tolerance_edges():
    o, loc = sk(vec(1, 10.0)), sk(vec(2, 10.0))
    c = sk(lin((1.0, o.proj), (-1.0, loc.proj)), norm=5.0)
    tol = Z * U32 * 5.0 + sketch_error(c) + sketch_error(o) + sketch_error(loc)
    for bump, ok in ((0.99 * tol, True), (1.01 * tol, False)):
        send = part(
            "send", 0, contribution=Sketch([c.proj[0] + bump, *c.proj[1:]], 5.0, N, "float32"), original=o, local=loc
        )
        found = OuterChecker({}, {}).check(Mine(0, 0, 10, send, None, None, 0.0), 0)
        assert (not found) == ok, (bump, tol, found)
    # bfloat16's unit roundoff is 2^16 times float32's: the same error passes
    send = part(
        "send", 0, contribution=Sketch([c.proj[0] + 1.01 * tol, *c.proj[1:]], 5.0, N, "bfloat16"), original=o, local=loc
    )
    assert not OuterChecker({}, {}).check(Mine(0, 0, 10, send, None, None, 0.0), 0)


def test_a_non_participant_is_not_held_to_the_pseudo_gradient():
    o, loc = sk(vec(1, 10.0)), sk(vec(2, 10.0))
    send = part(
        "send",
        0,
        participating=False,
        participants=1,
        contribution=Sketch([0.0] * 4, 0.0, N, "float32"),
        original=o,
        local=loc,
    )
    c = OuterChecker({}, {})
    assert not c.check(Mine(1, 0, 10, send, None, None, 0.0), 0)
    assert c.stages["pseudo-gradient"].not_checked == {"not participating (contributes zeros: checked with the SUM)": 1}


def test_a_healed_replica_is_held_to_what_it_loaded_not_to_its_own_history():
    out = check_numerics(simulate(loaded=1), sketches_on=True)  # other state with no heal: wrong
    assert [(r, c) for r, c, _ in causes(out)] == [(1, "outer step"), (1, "momentum")], out.texts()
    assert out.problems[0].sync_step == 10  # the step whose globals the next send did not start from
    out = check_numerics(simulate(loaded=1, healed=True), sketches_on=True)
    assert out.ok, out.texts()  # its step from what it loaded is checked; its history is not compared
    nc = out.stages["outer step"].not_checked
    assert nc == {
        "a heal before the next send (its originals came with the checkpoint: the heal's fingerprints)": 1,
        LAST: 2,
    }
    assert out.stages["momentum"].not_checked == {
        "sketched where the chain starts (loaded buffers): nothing to compare with": 1
    }
    assert out.stages["outer step"].checked == 3


def test_the_line_names_each_stage():
    from ftrun.report.numerics_view import numerics_line

    line = numerics_line(check_numerics(simulate(), sketches_on=True).record())
    assert "; outer stages: pseudo-gradient 6 ok (worst" in line and "merge 0 ok + 6 not checked" in line


@pytest.mark.parametrize("kind", ["sign", "stale", "lr"])
def test_the_same_run_without_the_fault_passes(kind):
    assert not check_numerics(simulate(fault=kind), sketches_on=True).ok
    assert check_numerics(simulate(), sketches_on=True).ok


@pytest.mark.parametrize(
    "spec, alpha, message",
    [
        (
            "1@15:bogus",
            0.0,
            "--corrupt-sync '1@15:bogus': expected REPLICA@SYNC_STEP:KIND with KIND one of sign, stale",
        ),
        ("1@12:sign", 0.0, "--corrupt-sync 1@12:sign: step 12 is not a sync step"),
        ("1@25:stale", 0.0, "--corrupt-sync 1@25:stale: stale shows in the fragment's next round, at step 35"),
        ("1@15:alpha", 0.0, "--corrupt-sync 1@15:alpha: alpha needs a merge to ignore (--fragment-update-alpha > 0)"),
        ("2@15:lr", 0.0, "--corrupt-sync 2@15:lr: replica group 2 does not exist"),
    ],
)
def test_bad_corrupt_sync_specs_are_one_line(spec, alpha, message):
    from ftrun.errors import BadInput
    from ftrun.fault_flags import parse_faults

    with pytest.raises(BadInput) as e:
        parse_faults([], [], 2, 30, [], 5, sync_every=10, corrupt_syncs=[spec], alpha=alpha)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_corrupt_sync_specs_parse_and_describe():
    from ftrun.fault_flags import parse_faults

    (f,) = parse_faults([], [], 2, 30, [], 5, sync_every=10, corrupt_syncs=["1@15:alpha"], alpha=0.5)
    assert (f.action, f.kind, f.key) == ("corrupt-sync", "alpha", "corrupt-sync-r1-s15")
    assert f.describe() == "corrupt-sync alpha in replica group 1's outer step at sync step 15"


def test_outer_step_tolerance_edges():
    """The next round's originals off by just under / over the step's budget (the budget read from
    a grossly wrong round: it depends on the recorded norms, not on the error)."""

    def with_bump(bump: float):
        logs = simulate()
        send = logs[(1, 0)][2].numerics[0]  # replica 1's second send: the first step's globals
        o = send.original
        send.original = Sketch([o.proj[0] + bump, *o.proj[1:]], o.norm, o.numel, o.dtype)
        send.local = Sketch([send.local.proj[0] + bump, *send.local.proj[1:]], send.local.norm, N, "float32")
        return check_numerics(logs, sketches_on=True)

    # the first step's globals are off, and the second step starts from them: both steps are named
    gross = with_bump(1.0).problems
    assert [(q.check, q.sync_step) for q in gross] == [("outer step", 10), ("outer step", 20)]
    tols = [q.tolerance for q in gross]
    assert with_bump(0.9 * min(tols)).ok
    assert [q.check for q in with_bump(1.1 * max(tols)).problems] == ["outer step", "outer step"]


# --- originals derived: the worker sketches them only where a chain starts (ftrun.worker.sketch_outer)

DERIVED_NOT = "originals not sketched and the last commit's globals not derivable"


def test_derived_originals_check_the_pseudo_gradient_and_the_step_in_one_comparison():
    out = check_numerics(simulate(derived=True), sketches_on=True)
    assert out.ok, out.texts()
    st = out.stages
    # every send's pseudo-gradient; each step against its next send (the last one's has none)
    assert st["pseudo-gradient"].checked == 6 and not st["pseudo-gradient"].not_checked
    assert st["outer step"].checked == 4 and st["outer step"].not_checked == {LAST: 2}
    assert 0 <= st["outer step"].largest_error.ratio < 1


@pytest.mark.parametrize(
    "kind, stage, start, sync_step",
    [
        ("sign", "pseudo-gradient", "sign flipped: the contribution is local - original", 20),
        ("stale", "outer step", "stale original parameters: the next round's (sync step 30) equal this round's", 20),
        ("lr", "outer step", "wrong lr: the step fits lr 1.4, the optimizer's param_groups say 0.7", 20),
        ("alpha", "merge", "alpha ignored", 20),
    ],
)
def test_each_corrupt_sync_kind_is_named_with_derived_originals(kind, stage, start, sync_step):
    alpha = 0.5 if kind == "alpha" else 0.0
    assert check_numerics(simulate(alpha=alpha, derived=True), sketches_on=True).ok
    out = check_numerics(simulate(fault=kind, alpha=alpha, derived=True), sketches_on=True)
    assert [(r, c) for r, c, _ in causes(out)] == [(1, stage)], out.texts()
    assert out.problems[0].cause.startswith(start), out.problems[0].cause
    assert out.problems[0].sync_step == sync_step


def test_a_merge_is_checked_against_derived_globals():
    out = check_numerics(simulate(alpha=0.5, derived=True), sketches_on=True)
    assert out.ok and out.stages["merge"].checked == 4, out.texts()


def test_a_long_chain_of_derived_originals_stays_clean():
    out = check_numerics(simulate(rounds=20, derived=True), sketches_on=True)
    assert out.ok and out.stages["outer step"].checked == 38, out.texts()


def test_derived_tolerance_edges():
    """A derived send's local parameters off by just under / over its budget: contribution + local
    (the originals) off by as much from the derived globals."""

    def with_bump(bump: float):
        logs = simulate(derived=True)
        send = logs[(1, 0)][2].numerics[0]  # replica 1's second send: originals derived
        assert send.original is None
        loc = send.local
        send.local = Sketch([loc.proj[0] + bump, *loc.proj[1:]], loc.norm, N, "float32")
        return check_numerics(logs, sketches_on=True)

    # the originals the send shows are off, and the next step starts from them: both steps are named
    gross = with_bump(1.0).problems
    assert [(q.check, q.sync_step) for q in gross] == [("outer step", 10), ("outer step", 20)]
    assert "the pseudo-gradient against the globals of sync step 10, or that step's outer step" in gross[0].cause
    tols = [q.tolerance for q in gross]
    assert with_bump(0.9 * min(tols)).ok
    assert [q.check for q in with_bump(1.1 * max(tols)).problems] == ["outer step", "outer step"]


def test_underivable_originals_are_not_checked_and_say_why():
    """A send without originals after a commit the check cannot derive (Adam) is never ok."""
    out = check_numerics(simulate(optimizer="Adam", derived=True), sketches_on=True)
    assert out.stages["pseudo-gradient"].checked == 2
    assert out.stages["pseudo-gradient"].not_checked == {DERIVED_NOT: 4}


def test_a_healed_replica_with_derived_originals():
    out = check_numerics(simulate(loaded=1, healed=True, derived=True), sketches_on=True)
    assert out.ok, out.texts()
    assert out.stages["pseudo-gradient"].checked == 6
