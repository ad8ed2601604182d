"""The chaos fault schedule (ftrun.chaos_plan): parsing, the seeded draw, the firing rule."""

import itertools
import math
import statistics

import pytest

from ftrun.chaos_plan import (
    DEFAULT_HANG_S,
    ChaosKind,
    blocked,
    combined_mtbf_s,
    draw,
    marker_key,
    marker_prefix,
    parse_kinds,
)
from ftrun.errors import BadInput


def _first(kinds, replicas, seed, n):
    return list(itertools.islice(draw(kinds, replicas, seed), n))


def test_parse_kinds_units_hang_seconds_and_comma_lists():
    kinds = parse_kinds(["kill:60,hang:2m:7", "sigterm:30s"])
    assert kinds == [ChaosKind("kill", 60.0), ChaosKind("hang", 120.0, 7.0), ChaosKind("sigterm", 30.0)]
    assert parse_kinds(["hang:10"]) == [ChaosKind("hang", 10.0, DEFAULT_HANG_S)]


@pytest.mark.parametrize(
    "text, words",
    [
        ("kill", "expected KIND:MTBF"),
        ("boom:10", "expected KIND:MTBF"),
        ("kill:0", "MTBF must be > 0"),
        ("kill:10:3", "only a hang takes :SECONDS"),
        ("hang:10:0", "SECONDS must be > 0"),
        ("kill:10,kill:20", "kind kill is given twice"),
    ],
)
def test_parse_kinds_bad_input_is_one_line_naming_the_flag(text, words):
    with pytest.raises(BadInput) as e:
        parse_kinds([text])
    assert str(e.value).startswith("--chaos") and words in str(e.value) and "\n" not in str(e.value)


def test_same_seed_same_faults_other_seed_other_faults():
    kinds = [ChaosKind("kill", 10.0), ChaosKind("hang", 20.0, 3.0)]
    a, b = _first(kinds, 8, 7, 50), _first(kinds, 8, 7, 50)
    assert a == b
    assert _first(kinds, 8, 8, 50) != a
    assert [f.index for f in a] == list(range(50))
    assert all(x.at_s < y.at_s for x, y in itertools.pairwise(a))  # in time order
    assert {f.replica for f in a} <= set(range(8)) and len({f.replica for f in a}) > 1
    assert all(f.seconds == (3.0 if f.action == "hang" else 0.0) for f in a)


def test_gaps_are_exponential_with_the_combined_mtbf_and_kinds_in_rate_proportion():
    kinds = [ChaosKind("kill", 10.0), ChaosKind("sigterm", 30.0)]
    faults = _first(kinds, 4, 1, 4000)
    gaps = [faults[0].at_s] + [y.at_s - x.at_s for x, y in itertools.pairwise(faults)]
    assert combined_mtbf_s(kinds) == pytest.approx(7.5)
    assert statistics.fmean(gaps) == pytest.approx(7.5, rel=0.05)
    # exponential: the median is ln 2 times the mean, and the share of gaps above the mean is 1/e
    assert statistics.median(gaps) == pytest.approx(7.5 * math.log(2), rel=0.08)
    assert sum(g > 7.5 for g in gaps) / len(gaps) == pytest.approx(math.exp(-1), abs=0.03)
    kills = sum(f.action == "kill" for f in faults) / len(faults)
    assert kills == pytest.approx(0.75, abs=0.03)  # rate 1/10 of a total 1/7.5


def test_no_kinds_draws_nothing():
    assert _first([], 4, 0, 3) == []


def test_blocked_target_must_be_up_and_min_alive_others_stay_up():
    assert blocked(2, {0, 1, 2}, min_alive=1) is None
    assert "not up" in (blocked(2, {0, 1}, min_alive=1) or "")
    # never all at once: the last group up is never hit, with min_alive 1
    assert "fewer than --chaos-min-alive 1" in (blocked(0, {0}, min_alive=1) or "")
    assert blocked(0, {0, 1, 2}, min_alive=2) is None
    assert "fewer than --chaos-min-alive 3" in (blocked(0, {0, 1, 2}, min_alive=3) or "")


def test_marker_keys_are_unique_per_fault_and_found_by_prefix():
    a, b = marker_key(3, "kill", 1, 40), marker_key(4, "kill", 1, 40)
    assert a != b and a.startswith(marker_prefix(3)) and not b.startswith(marker_prefix(3))
    assert not marker_key(30, "kill", 1, 40).startswith(marker_prefix(3))


@pytest.mark.parametrize(
    "keys, words",
    [
        (dict(replicas=1, chaos=["kill:10"]), "--chaos kill:10: needs at least 2 replica groups"),
        (dict(replicas=3, chaos=["kill:10"], chaos_min_alive=3), "--chaos-min-alive 3: must be between 1"),
        (dict(replicas=3, min_replicas=2, chaos=["kill:10"], chaos_min_alive=1), "between 2 (--min-replicas"),
        (dict(replicas=3, chaos=["hang:10:200"]), "as long as --stall-timeout 120 s"),
        (dict(replicas=3, chaos=["kill:10"], chaos_max_faults=-1), "--chaos-max-faults -1: must be >= 0"),
        (dict(replicas=3, chaos=["kill"]), "--chaos 'kill': expected KIND:MTBF"),
    ],
)
def test_config_rules_are_one_line_naming_the_flag(keys, words, tmp_path):
    from ftrun.config import RunConfig, validate_config

    with pytest.raises(BadInput) as e:
        validate_config(RunConfig.from_keys(out=str(tmp_path), **keys))
    assert words in str(e.value), str(e.value)


def test_a_valid_chaos_config_passes_and_chaos_settings_without_chaos_are_refused(tmp_path):
    from ftrun.config import RunConfig, validate_config

    validate_config(RunConfig.from_keys(out=str(tmp_path), replicas=3, chaos=["kill:10,hang:30:2"], chaos_min_alive=2))
    given = RunConfig.from_keys(out=str(tmp_path), replicas=3, chaos_seed=4)
    validate_config(given)  # made in code: nothing says the seed was given
    with pytest.raises(BadInput, match="--chaos-seed 4: needs --chaos KIND:MTBF"):
        validate_config(given, origin=lambda name: "flag" if name == "chaos_seed" else "default")
