"""launch's table fits COLUMNS=80 without cutting a state (issue 42: 87 columns, "runni…")."""

from __future__ import annotations

import io

import pytest

from ftrun import layout
from ftrun.console import console
from ftrun.report import launch_view


def _rows() -> list[layout.LaunchGroupRow]:
    long = "[rank0]: step 120 loss 3.21 manager_step 60 and a log line that goes on for a long while"
    return [
        layout.LaunchGroupRow(replica=r, state="running", exit_codes=[], restarts=1, quorums=12, last_line=long)
        for r in range(3)
    ]


@pytest.mark.parametrize("soft_wrap", [True, False])
def test_the_table_fits_80_columns_and_cuts_only_the_log_line(soft_wrap):
    buf = io.StringIO()
    con = console(file=buf, width=80, soft_wrap=soft_wrap)
    con.print(launch_view._table("ftrun launch · profiles/launch-20261204-000000 · quorum id 7", _rows(), con.width))
    lines = buf.getvalue().splitlines()
    assert max(len(ln.rstrip()) for ln in lines) <= 80, lines
    body = [ln for ln in lines if ln.lstrip().startswith(("0 ", "1 ", "2 "))]
    assert len(body) == 3 and all("running" in ln and ln.rstrip().endswith("…") for ln in body), lines


def test_a_wide_console_shows_at_most_the_stated_log_columns():
    buf = io.StringIO()
    con = console(file=buf, width=200)
    con.print(launch_view._table("t", _rows(), con.width))
    assert max(len(ln.rstrip()) for ln in buf.getvalue().splitlines()) <= 41 + launch_view.LOG_MAX
