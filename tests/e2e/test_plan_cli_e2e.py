"""``ftrun plan`` in a fresh interpreter: it never imports torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.e2e
def test_plan_never_imports_torch(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from ftrun.cli import app\n"
        f"r = CliRunner().invoke(app, ['plan', '--params', '1000000', '--step-ms', '50', '--sweep-link', '10mbit..1gbit', '--png', {str(tmp_path / 'p.png')!r}])\n"
        "assert r.exit_code == 0, r.output\n"
        "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
