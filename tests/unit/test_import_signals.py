"""Importing ftrun installs no signal handler (issue 20); ``Stopping`` is the stop state the
commands install. Unit tests: no process."""

from __future__ import annotations

import importlib
import os
import signal
import sys

import pytest

from ftrun.errors import Stopped, Stopping

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGPIPE)


def _dispositions() -> dict:
    return {s: signal.getsignal(s) for s in SIGNALS}


@pytest.mark.parametrize("module", ["ftrun", "ftrun.__main__"])
def test_importing_ftrun_changes_no_signal_disposition(monkeypatch, module):
    monkeypatch.setattr(sys, "argv", ["ftrun", "train"])  # as the console script: the old trigger
    saved = {k: v for k, v in sys.modules.items() if k == "ftrun" or k == "ftrun.__main__"}
    for k in saved:
        del sys.modules[k]
    before = _dispositions()
    try:
        importlib.import_module(module)  # a fresh import: the package's code runs again
        after = _dispositions()
    finally:
        sys.modules.update(saved)  # the session's own module objects back
    assert after == before


def test_stopping_raises_once_then_only_notes_and_restores():
    before = _dispositions()
    with Stopping() as stop:
        assert signal.getsignal(signal.SIGINT) != before[signal.SIGINT]
        with pytest.raises(Stopped, match="SIGTERM"):
            os.kill(os.getpid(), signal.SIGTERM)
        assert stop.stopping and stop.signal == "SIGTERM"
        os.kill(os.getpid(), signal.SIGINT)  # during the clean-up: noted, not raised
        assert stop.signal == "SIGTERM"
    assert _dispositions() == before


def test_stopping_begun_notes_the_first_signal_without_raising():
    with Stopping() as stop:
        stop.begin()
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.stopping and stop.signal == "SIGINT"
