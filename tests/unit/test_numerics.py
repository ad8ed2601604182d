"""The numeric check (ftrun.check.numerics) on hand-made sketches, and the sketches themselves."""

from __future__ import annotations

import random
from pathlib import Path

import msgspec
import pytest

from ftrun.check.fired_faults import FaultMark, FiredFaults
from ftrun.check.numerics import check_numerics
from ftrun.check.numerics_core import average_tolerance, sum_tolerance
from ftrun.layout import EventRecord, Healed, HealNumerics, RoundNumerics, Sketch
from train_fixtures import event_record

N = 100_000  # elements per fragment


def sk(proj, norm=None, numel=N, dtype="float32"):
    return Sketch(
        [float(x) for x in proj],
        float(norm if norm is not None else max(1e-3, sum(x * x for x in proj) ** 0.5)),
        numel,
        dtype,
    )


def vec(seed, scale=1.0):
    r = random.Random(seed)
    return [r.gauss(0, scale) for _ in range(4)]


def add(*vs):
    return [sum(x) for x in zip(*vs, strict=False)]


def mul(v, k):
    return [x * k for x in v]


def rec(step, parts, commit=None, mstep_after=0, **extra):
    fields = dict(manager_step_after=mstep_after, participants=2, quorum_id=1, commit=commit, t=float(step))
    return EventRecord(**event_record(step, **fields, numerics=parts, **extra))


def part(phase, mstep=0, fragment=0, participants=2, participating=True, world=2, qid=1, **sketches):
    return RoundNumerics(
        phase=phase,
        fragment=fragment,
        manager_step=mstep,
        quorum_id=qid,
        sync_step=10 + 10 * mstep,
        participants=participants,
        participating=participating,
        world=world,
        **sketches,
    )


def round_logs(
    contribs, sums, avgs, participating=(True, True), mstep=0, participants=None, fingerprints=None, base_step=0
):
    """Event records of one round on len(contribs) replicas: send at step 5, sync at step 10."""
    n = participants if participants is not None else sum(participating)
    logs = {}
    for r, (c, s, a) in enumerate(zip(contribs, sums, avgs, strict=False)):
        fp = fingerprints[r] if fingerprints else f"{100 + r:032x}"
        logs[(r, 0)] = [
            rec(
                base_step + 5,
                [
                    part(
                        "send",
                        mstep,
                        participants=n,
                        participating=participating[r],
                        world=len(contribs),
                        contribution=c,
                    )
                ],
            ),
            rec(
                base_step + 10,
                [
                    part(
                        "sync",
                        mstep,
                        participants=n,
                        participating=participating[r],
                        world=len(contribs),
                        sum=s,
                        average=a,
                    )
                ],
                commit=True,
                mstep_after=mstep + 1,
                synced=0,
                fingerprint=fp,
            ),
        ]
    return logs


def clean(seed=1, n=2):
    cs = [sk(vec(seed + r)) for r in range(n)]
    s = sk(add(*[c.proj for c in cs]), norm=sum(c.norm for c in cs))
    a = sk(mul(s.proj, 1 / n), norm=s.norm / n)
    return cs, s, a


def test_clean_round_passes_with_tolerance_stated():
    cs, s, a = clean()
    out = check_numerics(round_logs(cs, [s, s], [a, a]), sketches_on=True)
    assert out.status == "checked" and out.ok and out.checked == 1 and out.replica_syncs_checked == 2
    d = msgspec.to_builtins(out.record())
    assert set(d) >= {"checked", "tolerance", "problems"} and "Z=8" in d["tolerance"]["rule"]
    assert d["tolerance"]["largest_error"]["ratio"] < 1


def causes(out):
    return [p.cause for p in out.problems]


def test_wrong_count():
    cs, s, a = clean()
    bad = sk(mul(s.proj, 1 / 3), norm=s.norm / 3)
    out = check_numerics(round_logs(cs, [s, s], [a, bad]), sketches_on=True)
    assert [p.replica for p in out.problems] == [1]
    p = out.problems[0]
    assert "participants + 1 = 3 instead of 2" in p.cause and p.check == "average"
    assert p.sync_step == 10 and p.manager_step == 0 and p.fragment == 0
    assert (
        abs(
            p.expected
            - a.proj[
                [abs(x - y) for x, y in zip(a.proj, bad.proj, strict=True)].index(
                    max(abs(x - y) for x, y in zip(a.proj, bad.proj, strict=True))
                )
            ]
        )
        < 1e-12
    )


def test_sum_never_divided():
    cs, s, a = clean()
    undivided = sk(s.proj, norm=s.norm)  # as torchft 0.2.0's Baby-Gloo with bucketization did (docs/sweep.md)
    out = check_numerics(round_logs(cs, [s, s], [undivided, undivided]), sketches_on=True)
    assert len(out.problems) == 2 and all("not divided at all" in c for c in causes(out))


def test_drop_names_the_missing_contribution_on_every_replica():
    cs, s, a = clean()
    s_bad = sk(cs[0].proj, norm=cs[0].norm)  # replica 1's contribution never reached the SUM
    a_bad = sk(mul(s_bad.proj, 0.5), norm=s_bad.norm / 2)
    out = check_numerics(round_logs(cs, [s_bad, s_bad], [a_bad, a_bad]), sketches_on=True)
    assert len(out.problems) == 2 and all("replica 1's is not in the SUM" in c for c in causes(out))
    assert "a contribution missing" in out.problems[0].text


def test_stale_buffer():
    cs, s, a = clean(1)
    cs2, s2, a2 = clean(7)
    logs = round_logs(cs, [s, s], [a, a])
    stale_avg = sk(mul(s.proj, 0.5), norm=s.norm / 2)
    logs2 = round_logs(cs2, [s2, s], [a2, stale_avg], mstep=2, base_step=20)  # replica 1 got round 1's SUM again
    for k in logs:
        logs[k] += logs2[k]
    out = check_numerics(logs, sketches_on=True)
    assert out.checked == 2 and [p.replica for p in out.problems] == [1]
    assert "stale buffer" in out.problems[0].cause and "manager step 0" in out.problems[0].cause


def test_late_write_after_the_collective():
    cs, s, a = clean()
    late = sk(mul(a.proj, 1.1), norm=a.norm * 1.1)
    out = check_numerics(round_logs(cs, [s, s], [late, a]), sketches_on=True)
    assert [p.replica for p in out.problems] == [0]
    assert "values changed after the collective" in out.problems[0].cause


def test_noise_in_one_element():
    cs, s, a = clean()
    tol = sum_tolerance(cs, s, 2)
    noisy = sk(add(s.proj, [3 * tol, -3 * tol, 3 * tol, 3 * tol]), norm=s.norm)
    out = check_numerics(round_logs(cs, [s, noisy], [a, sk(mul(noisy.proj, 0.5), norm=s.norm / 2)]), sketches_on=True)
    assert [p.replica for p in out.problems] == [1]
    assert "values changed in the collective" in out.problems[0].cause


def test_sum_tolerance_edges():
    cs, s, a = clean()
    tol = sum_tolerance(cs, s, 2)
    assert tol > 0
    for k, ok in ((0.9, True), (1.1, False)):
        off = sk(add(s.proj, [k * tol, 0, 0, 0]), norm=s.norm)
        avg = sk(mul(off.proj, 0.5), norm=off.norm / 2)
        out = check_numerics(round_logs(cs, [off, off], [avg, avg]), sketches_on=True)
        assert out.ok is ok, (k, out.problems)


def test_average_tolerance_edges():
    cs, s, a = clean()
    tol = average_tolerance(s, a, 2)
    for k, ok in ((0.9, True), (1.1, False)):
        avg = sk(add(a.proj, [0, 0, k * tol, 0]), norm=a.norm)  # on both: they still agree with each other
        out = check_numerics(round_logs(cs, [s, s], [avg, avg]), sketches_on=True)
        assert out.ok is ok, (k, out.problems)


def test_tolerance_scales_with_dtype_and_participants():
    cs, s, _ = clean()
    bf = [sk(c.proj, c.norm, dtype="bfloat16") for c in cs]
    assert sum_tolerance(bf, sk(s.proj, s.norm, dtype="bfloat16"), 2) > 1000 * sum_tolerance(cs, s, 2)
    assert sum_tolerance(cs, s, 4) > 2.5 * sum_tolerance(cs, s, 2)


def test_non_participant_contributes_zeros():
    c0 = sk(vec(3))
    zero = Sketch([0.0] * 4, 0.0, N, "float32")
    s = sk(c0.proj, norm=c0.norm)
    out = check_numerics(round_logs([c0, zero], [s, s], [s, s], participating=(True, False)), sketches_on=True)
    assert out.ok and out.checked == 1
    leak = sk(vec(4))
    s2 = sk(add(c0.proj, leak.proj), norm=c0.norm + leak.norm)
    out = check_numerics(round_logs([c0, leak], [s2, s2], [s2, s2], participating=(True, False)), sketches_on=True)
    assert any(p.check == "non-participant" and p.replica == 1 for p in out.problems)


def test_participants_stepped_from_different_averages():
    cs, s, a = clean()
    tol = average_tolerance(s, a, 2)
    other = sk(add(a.proj, [0, 0.5 * tol, 0, 0]), norm=a.norm)  # within SUM/n's budget, but not bit-equal
    out = check_numerics(round_logs(cs, [s, s], [a, other]), sketches_on=True)
    assert [p.check for p in out.problems] == ["same average"] and out.problems[0].replica == 1


def test_participant_count_mismatch():
    cs, s, a = clean()
    logs = round_logs(cs, [s, s], [a, a])
    logs[(1, 0)][0].numerics[0].participants = 3  # its manager's num_participants() at the send
    out = check_numerics(logs, sketches_on=True)
    assert any(p.check == "participants" and p.replica == 1 for p in out.problems)


def test_sketch_missing_on_one_replica():
    cs, s, a = clean()
    logs = round_logs(cs, [s, s], [a, a])
    logs[(1, 0)][0].numerics = []  # replica 1's send part is gone
    out = check_numerics(logs, sketches_on=True)
    assert not out.ok and all(p.check == "sketch missing" for p in out.problems)
    assert "contribution sketches from replica(s) [0] only" in out.problems[0].text


def test_not_checked_is_never_ok():
    cs, s, a = clean()
    off = check_numerics(round_logs(cs, [s, s], [a, a]), sketches_on=False)
    assert off.status == "not checked" and "sketches off" in off.why and off.checked == 0
    logs = round_logs(cs, [s, s], [a, a])
    for recs in logs.values():
        for r in recs:
            r.numerics = []
    foreign = check_numerics(logs, sketches_on=None)
    assert foreign.status == "not checked" and "no sketches" in foreign.why
    assert check_numerics({}, None).status == "not checked"
    assert check_numerics(round_logs(cs, [s, s], [a, a]), True, partial="only group 0").why == "only group 0"
    on_but_none = check_numerics(logs, sketches_on=True)  # sketches on, commits, no sketch: a problem
    assert not on_but_none.ok


def test_failed_commit_is_not_checked():
    cs, s, a = clean()
    logs = round_logs(cs, [s, s], [None, None])
    for recs in logs.values():
        recs[1].commit = False
    out = check_numerics(logs, sketches_on=True)
    assert out.status == "not checked" and out.checked == 0 and "no sync committed" in out.why
    assert msgspec.to_builtins(out.failed_rounds) == {
        "rounds": 1,
        "sum_right": 1,
        "sum_wrong": 0,
        "sum_not_sketched": 0,
    }


def test_heal_params_checked_against_the_source():
    cs, s, a = clean()
    g = "0123456789abcdef0123456789abcdef"  # the globals' fingerprint after both replicas' commit
    logs = round_logs(cs, [s, s], [a, a], fingerprints=[g, g])

    def healed(fp):
        send = [part("send", 1, contribution=cs[1])]
        return rec(25, send, healed=Healed(0, 20, 1), heal_numerics=HealNumerics(1, [fp]))

    logs[(1, 0)].append(healed(g))
    out = check_numerics(logs, sketches_on=True)
    assert out.ok and out.heals[0].params_match is True and out.heals[0].fragments_checked == 1
    assert out.heals[0].first_contribution.participating is True
    logs[(1, 0)][-1] = healed(g[:-1] + "0")  # one bit of one parameter: another hash
    out = check_numerics(logs, sketches_on=True)
    (p,) = [p for p in out.problems if p.check == "heal"]
    assert out.heals[0].params_match is False and "the checkpoint transport delivered other parameters" in p.text
    assert "commit to manager step 1" in p.text and g in p.text
    # the source's commit is after the heal's manager step, or failed: nothing to compare with
    logs[(0, 0)][1].manager_step_after = 2
    out = check_numerics(logs, sketches_on=True)
    assert out.heals[0].params_match is None and out.heals[0].fragments_not_checked == [0]
    logs[(0, 0)][1].manager_step_after, logs[(0, 0)][1].commit = 1, False
    assert check_numerics(logs, sketches_on=True).heals[0].params_match is None
    # an event log of an ftrun that sketched the healed parameters instead: read, not checked
    logs[(0, 0)][1].commit = True
    logs[(1, 0)][-1] = rec(25, [], healed=Healed(0, 20, 1), heal_numerics=HealNumerics(1))
    assert check_numerics(logs, sketches_on=True).heals[0].fragments_checked == 0


def test_heal_from_a_source_that_itself_healed_is_checked_against_the_latest_commit():
    # a chain of faults: replicas 0 and 2 commit fragment 0 together (manager step 1), replica 2
    # alone once more (manager step 2, fingerprint ``new``); replica 0 heals from 2 at manager step
    # 2; replica 1 then heals from replica 0 at manager step 2 and must hold replica 2's latest
    # commit, not replica 0's own older one
    cs, s, a = clean()
    old, new = "1" * 32, "2" * 32
    first = round_logs(cs, [s, s], [a, a], fingerprints=[old, old])
    again = round_logs(cs, [s, s], [a, a], mstep=1, fingerprints=[new, new], base_step=10)
    logs = {(0, 0): first[(0, 0)], (2, 0): first[(1, 0)] + again[(1, 0)]}
    logs[(0, 0)].append(rec(30, [], healed=Healed(2, 20, 2), heal_numerics=HealNumerics(2, [new])))
    logs[(1, 0)] = [rec(35, [], healed=Healed(0, 30, 2), heal_numerics=HealNumerics(2, [new]))]
    out = check_numerics(logs, sketches_on=True)
    assert [(h.replica, h.params_match) for h in out.heals] == [(0, True), (1, True)]
    logs[(1, 0)][0].heal_numerics = HealNumerics(2, [old])  # what the source's own last commit held
    out = check_numerics(logs, sketches_on=True)
    (p,) = [p for p in out.problems if p.check == "heal"]
    assert p.replica == 1 and "after healing from replica 2" in p.text and "manager step 2" in p.text


@pytest.mark.parametrize(
    "flags,message",
    [
        ({"corrupt_allreduce": ["1@30:bogus"]}, "KIND one of wrong-count, drop, stale, late, noise"),
        ({"corrupt_allreduce": ["1@25:drop"]}, "step 25 is not a sync step"),
        ({"corrupt_allreduce": ["1@20:stale"]}, "stale needs a previous round"),
        ({"corrupt_allreduce": ["2@30:drop"]}, "replica group 2 does not exist"),
        ({"corrupt_allreduce": ["1@30:drop"], "sketches": False}, "needs the sketches"),
    ],
)
def test_corrupt_allreduce_bad_input_is_one_line(flags, message):
    from ftrun import config
    from ftrun.errors import BadInput

    with pytest.raises(BadInput) as e:
        config.build(**flags)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_corrupt_allreduce_is_a_typed_fault_and_never_kills():
    from ftrun import config, layout
    from ftrun.worker.fault_injection import FaultInjector

    cfg = config.build(corrupt_allreduce=["1@30:late"])
    (f,) = cfg.planned_faults()
    assert (f.replica, f.step, f.action, f.kind) == (1, 30, "corrupt", "late") and cfg.faults.max_restarts == 0
    spec = layout.FaultSpec(f.replica, f.step, f.action, kind=f.kind)
    assert FaultInjector([spec], 1, 0, None).mine == {}  # before_step never fires it


# --- the sketches themselves (torch) ----------------------------------------------------------


def test_sketch_is_linear_and_placed_by_offset():
    torch = pytest.importorskip("torch")
    from ftrun.layout import SKETCH_STAGE
    from ftrun.worker.sketch import Builder, Projector

    p = Projector()
    g = torch.Generator().manual_seed(0)
    parts = [torch.randn(n, generator=g) for n in (7, 5000, SKETCH_STAGE + 123, 3 * SKETCH_STAGE + 5)]

    def sketch(tensors):
        b = Builder(p)
        for t in tensors:
            b.add(t)
        return b.sketch()

    whole = sketch([torch.cat(parts)])
    pieces = sketch(parts)
    from ftrun.check.numerics_core import sketch_error

    tol = sketch_error(whole) + sketch_error(pieces)
    assert max(abs(x - y) for x, y in zip(whole.proj, pieces.proj, strict=False)) <= tol
    assert abs(whole.norm - pieces.norm) < 1e-4 * whole.norm
    twice = sketch([2 * torch.cat(parts)])
    assert max(abs(2 * x - y) for x, y in zip(whole.proj, twice.proj, strict=False)) <= 2 * tol + sketch_error(twice)
    shifted = sketch([torch.zeros(3), torch.cat(parts)])  # other offsets: other projections
    assert max(abs(x - y) for x, y in zip(whole.proj, shifted.proj, strict=False)) > 100 * tol


def _killed_round(kill_step, lost, manager_step=0, killed=(1,), missing=(1,)):
    """A round of 3 replicas synced at step 10 (manager step 0) whose ``missing`` replicas logged
    neither part (on a GPU a rank writes its send's sketch at the sync step's record), with a
    fired kill of each of ``killed`` at ``kill_step`` that lost the steps ``lost``."""
    cs, s, a = clean(n=3)
    logs = round_logs(cs, [s] * 3, [a] * 3, participating=(True,) * 3)
    for r in missing:
        logs[(r, 0)] = []
    marks = [FaultMark(r, "kill", kill_step, lost, None, manager_step=manager_step) for r in killed]
    return check_numerics(logs, sketches_on=True, faults=FiredFaults(marks))


def test_sketch_missing_of_a_group_killed_during_the_round_is_not_checked_never_ok():
    out = _killed_round(8, (8, 40))
    assert out.ok and not out.problems and out.checked == 0 and out.replica_syncs_checked == 0
    (why,) = out.not_checked
    assert "injected fault" in why and "replica 1, SIGKILL at step 8" in why
    assert out.not_checked[why] == 2  # replicas 0 and 2 committed it
    assert out.status == "not checked"  # nothing else was checked: never "checked" on this round
    assert _killed_round(10, (10, 40)).ok  # killed at the sync step itself, before its record


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kill_step": 11, "lost": (11, 40)},  # killed after the sync's record: it should have its sketch
        {"kill_step": 8, "lost": (8, 9)},  # back before the sync: alive, its sketch lost all the same
        {"kill_step": 3, "lost": (3, 40), "manager_step": None},  # killed before the round (no record)
        {"kill_step": 8, "lost": (8, 40), "manager_step": 1},  # at another round's manager step
        {"kill_step": 8, "lost": (8, 40), "killed": (2,)},  # another group was killed
        {"kill_step": 8, "lost": (8, 40), "missing": (1, 2)},  # two sketches missing, one group killed
    ],
)
def test_sketch_missing_no_fault_explains_fails(kwargs):
    out = _killed_round(**kwargs)
    assert not out.ok and out.problems and all(p.check == "sketch missing" for p in out.problems)
    assert not out.not_checked


def test_fault_mark_records_the_manager_step_its_group_had_reached():
    from ftrun import layout
    from ftrun.check.fired_faults import fault_marks
    from ftrun.event_log import read_event_log

    run = Path(__file__).parent.parent / "data" / "kill_run"  # --kill 1@25: step 24's record, manager step 2
    logs = {(r, 0): read_event_log(run / "events" / f"replica{r}_rank0.jsonl") for r in range(3)}
    (mark,) = fault_marks([run], [layout.read_train_manifest(run)], logs).marks
    assert (mark.step, mark.manager_step) == (25, 2)
    faults = FiredFaults([mark])
    assert faults.took_out(1, 25, 2) is mark and faults.took_out(1, 25, 3) is None and faults.took_out(0, 25, 2) is None
