"""Commands that don't train never import torch: each case runs in a fresh interpreter (hence e2e),
does what the command does without training, and lists the forbidden packages it finds loaded."""

from __future__ import annotations

import subprocess
import sys

import pytest

RUN = (
    "from typer.testing import CliRunner\nfrom ftrun.cli import app\n"
    "def run(*args):\n    return CliRunner().invoke(app, list(args))\n"
)

# case id -> (code to run, top-level packages it must not load)
CASES = {
    "ftrun.cli import": ("import ftrun.cli\n", {"torch"}),
    "train --help and bad input": (
        RUN + "r = run('train', '--help')\n"
        "assert r.exit_code == 0, r.output\n"
        "assert '--sync-every' in r.output and '--fragment-sync-delay' in r.output\n"
        "r = run('train', '--fragments', '3', '--sync-every', '4')\n"
        "assert r.exit_code == 2, r.output\n",
        {"torch"},
    ),
    "inspect-trace import": (
        "import ftrun.commands.inspect_trace, ftrun.check.analyze, ftrun.report.inspect_view\n",
        {"torch"},
    ),
    "plan with a sweep and a png": (
        RUN
        + "r = run('plan', '--params', '1000000', '--step-ms', '50', '--sweep-link', '10mbit..1gbit', '--png', PNG)\n"
        "assert r.exit_code == 0, r.output\n",
        {"torch"},
    ),
    "view import": ("import ftrun.cli, ftrun.commands.view\n", {"torch", "tensorboard"}),
}


@pytest.mark.e2e
@pytest.mark.parametrize("case", list(CASES))
def test_commands_that_do_not_train_do_not_import_torch(tmp_path, case):
    code, forbidden = CASES[case]
    check = f"import sys\nprint(sorted(m for m in sys.modules if m.split('.')[0] in {sorted(forbidden)!r}))\n"
    prog = f"PNG = {str(tmp_path / 'p.png')!r}\n" + code + check
    res = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "[]", res.stdout
