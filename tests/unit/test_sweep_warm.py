"""``sweep --warm-start``'s runner on hand-made cells, no process started (``subprocess.Popen``
replaced): which cell starts when, gated or not, and its configuration's start gate."""

from __future__ import annotations

import os
import types

import pytest

from ftrun import grid
from ftrun.config import build
from ftrun.errors import BadInput
from ftrun.sweep import runner as sw


class FakePopen:
    """Records each start; ``communicate`` sees whether the cell's gate was open by then."""

    started: list[tuple[str, bool]] = []

    def __init__(self, cmd, **_kw) -> None:
        self.cfg_path = cmd[cmd.index("--config") + 1]
        self.name = self.cfg_path.rsplit("/", 1)[-1].removesuffix(".toml")
        self.gated = "start_gate" in open(self.cfg_path).read()
        FakePopen.started.append((self.name, self.gated))
        self.pid, self.returncode = 0, None

    def communicate(self):
        gate = open(self.cfg_path).read().split("start_gate = ")[-1].strip().strip('"') if self.gated else None
        self.returncode = 0 if gate is None or os.path.exists(gate) else 99
        return "", ""

    def poll(self):
        return self.returncode


def _cells(tmp_path, n: int) -> list[grid.Cell]:
    cells = grid.product([grid.Axis("seed", tuple(range(1, n + 1)))])
    for c in cells:
        c.config = build(seed=c.params["seed"], steps=8, profile="none", out=str(tmp_path), run_name=c.name)
    return cells


def test_each_cell_parks_the_next_and_opens_its_own_gate(tmp_path, monkeypatch):
    monkeypatch.setattr(sw.subprocess, "Popen", FakePopen)
    FakePopen.started = []
    cells = _cells(tmp_path, 3)
    (tmp_path / sw.CELLS).mkdir()
    (tmp_path / sw.CELLS / "seed-2.gate").touch()  # an earlier sweep's: closed again before seed-2 parks
    runner = sw.Runner(tmp_path, cells)
    assert runner.train(cells[0]) == (0, "")
    assert FakePopen.started == [("seed-1", False), ("seed-2", True)]
    assert runner.is_parked("seed-2") and not runner.gate("seed-2").exists()
    assert runner.train(cells[1]) == (0, "")  # the parked one, its gate opened (else exit 99)
    assert FakePopen.started[2:] == [("seed-3", True)] and not runner.is_parked("seed-2")
    assert runner.train(cells[2]) == (0, "")
    assert len(FakePopen.started) == 3 and runner.procs == {}
    assert "start_gate" not in str(sw.differing(cells[1].config))  # the recorded config (--resume) has none


def test_cold_runner_starts_each_cell_ungated(tmp_path, monkeypatch):
    monkeypatch.setattr(sw.subprocess, "Popen", FakePopen)
    FakePopen.started = []
    cells = _cells(tmp_path, 2)
    (tmp_path / sw.CELLS).mkdir()
    runner = sw.Runner(tmp_path)
    for c in cells:
        assert runner.train(c) == (0, "")
    assert FakePopen.started == [("seed-1", False), ("seed-2", False)]


def test_warm_start_with_parallel_is_refused(tmp_path):
    from ftrun.commands import sweep as cmd

    with pytest.raises(BadInput, match=r"^--warm-start with --parallel 2: warm starts run the cells one at a time$"):
        cmd.sweep(
            None,
            ["seed=1,2"],
            types.SimpleNamespace(out=str(tmp_path)),
            None,
            "s",
            2,
            False,
            "steps_per_s",
            False,
            warm_start=True,
        )
