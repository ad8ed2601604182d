"""User-facing errors and interrupts.

``BadInput`` = something the user gave us is wrong: one line, exit 2 (``NotChecked``: the input
holds no evidence to judge, a kind of it). ``RunFailed``: exit 1.
``Interrupted``: ftrun stopped because of SIGINT, SIGTERM or SIGHUP (a closed terminal; not when
``nohup`` ignores it): one line, exit 130, at any moment
(``exit_on_signal`` covers the console script's start-up, before the command body runs;
``raise_on_signal`` then turns both signals into ``KeyboardInterrupt`` for the command to
clean up after; ``Stopping`` is ``train``'s and ``launch``'s: the first signal stops the run,
later ones are only noted). The one place that handles SIGINT, SIGTERM and SIGHUP; importing ftrun
installs nothing (the console script, ``ftrun.__main__.main``, does).
"""

from __future__ import annotations

import os
import signal

INTERRUPT_EXIT = 130


def stop_signals() -> tuple[signal.Signals, ...]:
    """The signals that stop a command: SIGINT, SIGTERM, and SIGHUP (a closed terminal) unless
    it is ignored (``nohup``: the user asked the command to outlive the terminal)."""
    hup = () if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN else (signal.SIGHUP,)
    return (signal.SIGINT, signal.SIGTERM, *hup)


class BadInput(Exception):
    """A bad flag, config key, path or file. The message is one line naming what and where."""

    exit_code = 2


class NotChecked(BadInput):
    """Nothing could be checked: not a torchft trace, traces of different runs, no quorum. One
    line; exit 2 from ``inspect-trace``, turned into a failed run (exit 1) by ``ftrun launch``."""


class RunFailed(Exception):
    """The run itself failed (a group crashed, replicas disagreed). Exit 1, with a pointer to logs."""

    exit_code = 1


class Interrupted(RunFailed):
    """Stopped by SIGINT/SIGTERM (the message names the signal and any partial output). Exit 130."""

    exit_code = INTERRUPT_EXIT


def _exit_now(signum, frame) -> None:
    os.write(2, f"error: interrupted by {signal.Signals(signum).name}\n".encode())
    os._exit(INTERRUPT_EXIT)


def signal_words(name: str) -> str:
    """A stopping signal's name as a line says it: SIGHUP also says why it came."""
    return f"{name} (hung up: its terminal was closed)" if name == "SIGHUP" else name


def exit_on_signal() -> None:
    """Start-up: SIGINT/SIGTERM/SIGHUP exit at once with one line and code 130 (nothing to clean yet)."""
    for s in stop_signals():
        signal.signal(s, _exit_now)


def _raise(signum, frame) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


class Stopped(Exception):
    """The first SIGTERM/SIGINT while a ``Stopping``'s handlers are installed."""


class Stopping:
    """Whether the run is stopping, and the signal that stopped it: the one shared answer the
    signal handler sets and ``train``'s and ``launch``'s supervision read.

    ``with Stopping() as stop:`` installs handlers for SIGTERM and SIGINT (restored on exit):
    the first raises ``Stopped`` once; once stopping (``stop.begin()``, or that first signal),
    later signals are only noted in ``stop.signal``: a second Ctrl-C must not cut the clean-up
    of the children short."""

    def __init__(self) -> None:
        self.stopping = False
        self.signal: str | None = None  # the first signal received, e.g. "SIGINT"
        self._old: dict = {}

    def begin(self) -> None:
        """From now on a signal is only noted (the children are being stopped)."""
        self.stopping = True

    def _on_signal(self, signum, frame) -> None:
        self.signal = self.signal or signal.Signals(signum).name
        if not self.stopping:
            self.stopping = True
            raise Stopped(self.signal)

    def __enter__(self) -> Stopping:
        self._old = {s: signal.getsignal(s) for s in stop_signals()}
        for s in self._old:
            signal.signal(s, self._on_signal)
        return self

    def __exit__(self, *exc) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old = {}


def raise_on_signal() -> dict:
    """Command body: SIGINT, SIGTERM and SIGHUP (``stop_signals``) raise ``KeyboardInterrupt``
    (exit 130 via the CLI). Returns the handlers it replaced (for ``signal.signal`` to restore)."""
    old = {s: signal.getsignal(s) for s in stop_signals()}
    for s in old:
        signal.signal(s, _raise)
    return old
