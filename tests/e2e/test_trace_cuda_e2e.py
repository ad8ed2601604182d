"""A fresh ftrun CPU run converted to CUDA shape (``tests/kineto_cuda.py``) passes inspection."""

from __future__ import annotations

import pytest

import kineto_cuda as kc
from ftrun.check.analyze import analyze


@pytest.mark.e2e
@pytest.mark.parametrize("config", ["streaming", "baseline"])
def test_fresh_run_converted_passes(ftrun_run, tmp_path, config):
    """A fresh ftrun CPU run (trained once per session, shared with other tests), in CUDA shape."""
    run = kc.convert_run(ftrun_run(config), tmp_path / "run", "sendrecv", launch="runtime")
    rep = analyze([run])
    assert rep.verdict == "pass", [e.problem for e in rep.events if e.problem]
    assert all(sp.kernels and not sp.notes for sp in rep.spans.values())
