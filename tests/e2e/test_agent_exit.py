"""``python -m ftrun.worker.agent`` (a replica group's launcher under ``ftrun train``) ends as
``python -m torch.distributed.run`` does: 0 when its rank succeeded (with the rank's output),
torch's own failure report and exit status when it failed."""

from __future__ import annotations

import subprocess

import pytest

from ftrun.launch.groups import FAST_EXIT_TORCHRUN, TORCHRUN, torchrun_argv

pytestmark = pytest.mark.e2e  # starts torch's elastic agent


@pytest.mark.parametrize("code", [0, 3])
def test_agent_ends_as_torchrun_does(tmp_path, code):
    script = tmp_path / "rank.py"
    script.write_text(f"import sys\nprint('rank ran', flush=True)\nsys.exit({code})\n")
    got = {}
    for module in (TORCHRUN, FAST_EXIT_TORCHRUN):
        p = subprocess.run(
            [*torchrun_argv(1, module=module), str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path
        )
        got[module] = (p.returncode, "rank ran" in p.stdout, "ChildFailedError" in p.stderr)
    assert got[FAST_EXIT_TORCHRUN] == got[TORCHRUN] == (0 if code == 0 else 1, True, code != 0), got


def test_a_forked_rank_fails_the_group_as_a_fresh_one_does(tmp_path):
    """ftrun's own worker (``-m ftrun.worker.main``): the agent forks the rank, torchrun starts a
    fresh one; a rank that fails (a spec that is not there) fails the group alike: exit 1, torch's
    ``ChildFailedError`` report, the rank's own error in the output, and the same error line for
    ftrun's diagnosis (torch multiprocessing's note of the exit is never taken for it)."""
    from ftrun.launch.diagnose import error_line

    got = {}
    for module in (TORCHRUN, FAST_EXIT_TORCHRUN):
        argv = [*torchrun_argv(1, module=module), "-m", "ftrun.worker.main", str(tmp_path / "missing.json")]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        out = p.stdout + p.stderr
        got[module] = (p.returncode, "ChildFailedError" in p.stderr, "unreadable spec" in out, error_line(out))
    assert got[FAST_EXIT_TORCHRUN] == got[TORCHRUN], got
    assert got[TORCHRUN][:3] == (1, True, True), got
