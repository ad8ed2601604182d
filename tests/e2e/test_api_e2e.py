"""ftrun.api in a fresh interpreter and on traces of torchft's own DiLoCo: the same verdicts as
the CLI. Real processes (the interpreter; the foreign_traces fixture trains)."""

from __future__ import annotations

import shutil

import pytest

import ftrun
from train_fixtures import drop_sync, move_send, read, same_as_cli, write


@pytest.mark.e2e
def test_import_is_cheap_and_leaves_signals_alone():
    """A fresh interpreter: importing ftrun, its API names and the pytest plugin imports no torch
    (nor the CLI's typer/rich, msgspec, matplotlib) and installs no signal handler."""
    import subprocess
    import sys

    code = (
        "import signal, sys\n"
        "before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))\n"
        "import ftrun, ftrun.pytest_plugin\n"
        "ftrun.Schedule(2, 20, 5).events(40); ftrun.check_traces; ftrun.Report; ftrun.train\n"
        "heavy = ('torch', 'torchft', 'typer', 'rich', 'msgspec', 'matplotlib', 'numpy')\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in heavy)\n"
        "print(heavy, before == (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[] True"


@pytest.mark.e2e  # the foreign_traces fixture runs torchft's own DiLoCo (shared with the mutation tests)
@pytest.mark.parametrize("mutation", [None, "move_send", "drop_sync"])
def test_torchfts_own_traces_same_verdict_as_cli(tmp_path, foreign_traces, mutation):
    from train_fixtures import FOREIGN, FOREIGN_FLAGS

    root = tmp_path / "foreign"
    shutil.copytree(foreign_traces, root)
    schedule = ftrun.Schedule(FOREIGN["fragments"], FOREIGN["sync_every"], FOREIGN["delay"])
    if mutation is not None:
        f = root / "r0" / "step-12.json"
        d = read(f)
        first = next(
            e
            for e in ftrun.check_traces(root, schedule=schedule).events
            if e.replica == 0 and e.kind == ("send" if mutation == "move_send" else "sync")
        )
        (move_send if mutation == "move_send" else drop_sync)(d, first.observed_step)
        write(f, d)
    r = ftrun.check_traces(root, schedule=schedule)
    assert r.ok == (mutation is None)
    same_as_cli(r, str(root), *FOREIGN_FLAGS)
