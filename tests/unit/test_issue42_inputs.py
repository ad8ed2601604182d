"""Numbers and values refused in one line before they are used (issue 42 items 7, 8 and the
smaller ones): ``plan``'s derived numbers are range-checked and its ``--json`` is strict; a
schedule of non-integers is ``BadInput``; ``--link`` in bytes is refused naming the bits; counts
read "1 file", "1 commit". No process is started (the CLI runs in process)."""

from __future__ import annotations

import json
import math

import pytest

import ftrun
from ftrun import layout
from ftrun.console import count
from ftrun.errors import BadInput
from ftrun.json_out import strict_json
from ftrun.link_spec import parse_link
from ftrun.plan.bounds import MAX_REPLICAS
from ftrun.report.train_view import agreement_text
from train_fixtures import cli, one_line

PLAN = ("plan", "--params", "1e9", "--step-ms", "400", "--link", "1gbit")


def test_plan_replicas_is_bounded() -> None:
    # was: MemoryError after minutes (a list of R built per simulated step)
    one_line(cli(*PLAN, "--replicas", "100000000000"), "--replicas 100000000000", f"{MAX_REPLICAS:,}")
    one_line(cli(*PLAN, "--sync-every", "100000000", "--fragment-sync-delay", "1"), "--sync-every 100000000")
    one_line(cli(*PLAN, "--replicas", "100", "--sync-every", "10000"), "replica-steps per round")


def test_plan_derived_step_and_training_steps_are_finite() -> None:
    flops = ("plan", "--params", "1e9", "--tokens-per-step", "1e30", "--flops-per-gpu", "1e-300", "--link", "1gbit")
    # was: "step inf ms", "util nan%", exit 0
    one_line(cli(*flops), "--tokens-per-step/--flops-per-gpu", "inf ms")
    one_line(cli(*flops, "--json"), "inf ms")
    one_line(cli(*PLAN, "--train-tokens", "1e300", "--tokens-per-step", "1e-300"), "training steps")
    one_line(cli("plan", "--params", "1e20", "--step-ms", "1", "--link", "1gbit"), "--params 1e+20")


def test_plan_json_is_strict() -> None:
    res = cli(*PLAN, "--json")
    assert res.exit_code == 0, res.output
    json.loads(res.output, parse_constant=lambda c: pytest.fail(f"non-JSON token {c}"))
    text = strict_json({"a": math.inf, "b": [math.nan, 1.5], "c": {"d": -math.inf}})
    assert json.loads(text) == {"a": None, "b": [None, 1.5], "c": {"d": None}}


@pytest.mark.parametrize("bad", [math.nan, 2.0, True, "2", None])
def test_schedule_refuses_non_integers_as_bad_input(bad: object) -> None:
    for args in ((bad, 20, 5), (2, bad, 5), (2, 20, bad)):
        with pytest.raises(BadInput, match="must be an integer"):  # was: accepted, or a TypeError
            ftrun.Schedule(*args)  # type: ignore[arg-type]
    with pytest.raises(ValueError):  # still a ValueError for callers that catch one
        ftrun.Schedule(2, 20, 2.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["10GB", "10 GB,5ms", "100MBps", "1gbyte", "10B/s"])
def test_link_in_bytes_is_refused_naming_bits(text: str) -> None:
    with pytest.raises(BadInput, match=r"is bytes; give the bandwidth in bits, e\.g\. \d+[kmgt]?bit "):
        parse_link(text)  # was: 10GB read as 10 Gbit/s
    assert parse_link("10gb").bandwidth_bps == 1e10  # a small b stays bits, as before


def test_counts_read_as_english() -> None:
    assert (count(1, "file"), count(2, "file"), count(0, "commit")) == ("1 file", "2 files", "0 commits")
    one = layout.AgreementSummary(ok=True, disagreements=[], commits_checked=1, groups_here=2, groups_in_job=2)
    assert str(agreement_text(one)) == "replicas agreed after 1 commit"  # was: "after all 1 commits"
    six = layout.AgreementSummary(ok=True, disagreements=[], commits_checked=6, groups_here=2, groups_in_job=2)
    assert str(agreement_text(six)) == "replicas agreed after all 6 commits"


@pytest.mark.parametrize("paths", ["", "  ", [""]])
def test_check_traces_refuses_a_blank_path(paths: object) -> None:
    with pytest.raises(BadInput, match="must not be empty"):  # was: checked the current directory
        ftrun.check_traces(paths)  # type: ignore[arg-type]


def test_check_traces_refuses_a_non_bool_allow_failed_commits() -> None:
    with pytest.raises(BadInput, match="allow_failed_commits must be True or False, not 'no'"):
        ftrun.check_traces("tests/data/cpu_run", allow_failed_commits="no")  # type: ignore[arg-type]
