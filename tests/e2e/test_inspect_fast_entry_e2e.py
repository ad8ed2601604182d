"""``ftrun inspect-trace`` through the typer-free entry (``ftrun.entry``) prints byte for byte what
the typer CLI (``python -m ftrun.cli``) prints, with the same exit code, and never imports typer.
Real processes (a few, ~0.3 s each), no training."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from train_fixtures import ROOT

pytestmark = pytest.mark.e2e

DATA = ROOT / "tests" / "data"
ENV = {**os.environ, "COLUMNS": "120"}


def _run(args: list[str], entry: bool) -> tuple[int, str, str]:
    head = [sys.executable, "-m", "ftrun"] if entry else [sys.executable, "-m", "ftrun.cli"]
    r = subprocess.run([*head, "inspect-trace", *args], capture_output=True, text=True, timeout=120, env=ENV, cwd=ROOT)
    return r.returncode, r.stdout, r.stderr


@pytest.fixture(scope="module")
def cuda_run(tmp_path_factory) -> Path:
    sys.path.insert(0, str(ROOT / "tests"))
    import kineto_cuda

    return kineto_cuda.convert_run(DATA / "cpu_run", tmp_path_factory.mktemp("cuda") / "run")


@pytest.mark.parametrize("case", ["cpu", "cpu-text", "kill", "cuda", "cuda-text", "file-flags", "missing", "help"])
def test_the_entry_prints_what_the_typer_cli_prints(case, cuda_run, tmp_path) -> None:
    gz = next((DATA / "cpu_run" / "traces").glob("replica0*"))
    args = {
        "cpu": [str(DATA / "cpu_run"), "--json"],
        "cpu-text": [str(DATA / "cpu_run")],
        "kill": [str(DATA / "kill_run"), "--json"],
        "cuda": [str(cuda_run), "--json"],
        "cuda-text": [str(cuda_run)],
        "file-flags": [
            str(gz),
            "--fragments=2",
            "--sync-every",
            "20",
            "--fragment-sync-delay",
            "5",
            "--step-numbering",
            "auto",
        ],
        "missing": [str(tmp_path / "nothing"), "--json"],
        "help": ["--help"],
    }[case]
    fast, slow = _run(args, entry=True), _run(args, entry=False)
    assert fast == slow
    assert fast[0] == {"missing": 2, "help": 0}.get(case, 0), fast


def test_the_entry_does_not_import_typer() -> None:
    # the command ends its process with os._exit once its output is written (ftrun.entry._exit_now):
    # here that exit raises instead, so what was imported by then can be read
    code = (
        "import os, runpy, sys; sys.argv = ['ftrun', 'inspect-trace', sys.argv[1], '--json']\n"
        "def _exit(c):\n    raise SystemExit(c)\nos._exit = _exit\n"
        "try:\n    runpy.run_module('ftrun', run_name='__main__')\nexcept SystemExit as e:\n    code = e.code\n"
        "print(code, sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'rich', 'click', 'torch')))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(DATA / "cpu_run")], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert r.stdout.strip().splitlines()[-1] == "0 []", r.stdout[-2000:] + r.stderr[-2000:]
