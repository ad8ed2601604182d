"""Evidence that cannot go missing silently, on a real run: ``--corrupt-allreduce 1@10:late``
FAILs on replica 1's step-10 average; cut that record in half, replace a value with NaN or
delete the line, and inspect-trace still FAILs, naming the line and the missing record (before:
"numerics ok (4 sync(s))", 7 replica-syncs instead of 8). A 400-digit numel is one line, exit 2."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from train_fixtures import SMALL, inspect, one_line, run_train

pytestmark = pytest.mark.e2e

# H=10, F=2, tau=2: a fragment syncs every 5 steps (5, 10, 15, 20), every step traced
RUN = [*SMALL, "--sync-every", "10", "--fragments", "2", "--fragment-sync-delay", "2", "--steps", "20"]
MISSING = "numerics: replica 1 rank 0's record of the sync at step 10 is missing (its trace shows the sync)"


@pytest.fixture(scope="module")
def late(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("evidence")
    run = run_train(out, "late", *RUN, "--profile", "1:20", "--corrupt-allreduce", "1@10:late", timeout=240)
    assert run.rc == 1, run.explain()
    return run.run_dir


def _edited(late: Path, tmp_path: Path, edit) -> tuple[Path, Path]:
    run = tmp_path / "run"
    shutil.copytree(late, run)
    log = run / "events" / "replica1_rank0.jsonl"
    lines = log.read_text().splitlines()
    i = next(i for i, x in enumerate(lines) if json.loads(x)["step"] == 10)
    log.write_text("".join(x + "\n" for x in edit(lines, i)))
    return run, log


def _problems(run: Path) -> list[str]:
    res = inspect(str(run), "--json")
    assert res.exit_code == 1, res.output
    return [p for p in json.loads(res.output)["problems"] if p.startswith("numerics: ")]


def test_the_corrupted_run_fails_on_its_average_and_nothing_is_missing(late):
    got = _problems(late)
    assert any("sync step 10" in p and "values changed after the collective" in p for p in got), got
    assert not any("is missing" in p or ".jsonl:" in p for p in got), got


@pytest.mark.parametrize(
    "how, says",
    [
        ("cut", ":10: a cut record, not where its writer ended"),
        ("nan", ":10: a damaged record (JSON is malformed"),
        ("delete", ":10: step 11 follows step 9 of the same incarnation"),  # (step 11's record is line 10 now)
    ],
)
def test_a_damaged_or_deleted_record_fails_naming_it(late, tmp_path, how, says):
    def edit(lines, i):
        if how == "cut":
            return [*lines[:i], lines[i][: len(lines[i]) // 2], *lines[i + 1 :]]
        if how == "nan":
            return [*lines[:i], re.sub(r'"proj":\[[^,\]]+', '"proj":[NaN', lines[i], count=1), *lines[i + 1 :]]
        return lines[:i] + lines[i + 1 :]

    run, log = _edited(late, tmp_path, edit)
    got = _problems(run)
    assert got[0].startswith(f"numerics: {log}{says}"), got
    assert got[1] == MISSING, got


def test_a_400_digit_numel_is_one_line(late, tmp_path):
    def edit(lines, i):
        j = next(j for j, x in enumerate(lines) if '"numel":' in x)
        return [*lines[:j], re.sub(r'"numel":\d+', '"numel":' + "9" * 400, lines[j], count=1), *lines[j + 1 :]]

    run, log = _edited(late, tmp_path, edit)
    one_line(inspect(str(run)), f"{log}:", "a number out of range at $.numerics[0].contribution.numel (400 digits)")
