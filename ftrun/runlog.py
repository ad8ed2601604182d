"""ftrun's own log of a run: ``logs/ftrun.log`` (``layout.run_log``), written with ``logging``
by the launcher (``ftrun.launch``) and by every rank (``ftrun.worker``). Torch-free.

One line per thing that happened: who (process, pid, logger), level, what. Processes append
(``O_APPEND``), so lines of different ranks interleave but are not torn. Failures are found
from structured records (a rank's meta ``error``/``phase``, the event logs), never by reading
this file; it is for people.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ftrun import layout

LINE = "%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"
ROOT = "ftrun"


class _RunLogHandler(logging.FileHandler):
    """A record that cannot be written (a full disk) is dropped: this file is for people, and
    logging's default would print a traceback on the user's terminal for every record. What
    matters is failed on by the writers of the run's records (``RunState.log_run_event``)."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass


def attach(run_dir: Path) -> logging.Handler:
    """Send ftrun's log records (logger ``ftrun`` and below, INFO and up) to the run's log file."""
    path = layout.run_log(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = _RunLogHandler(path, mode="a", encoding="utf-8")
    handler.setFormatter(logging.Formatter(LINE))
    logger = logging.getLogger(ROOT)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # the run's file, not whatever the embedding program configured
    return handler


def detach(handler: logging.Handler) -> None:
    logging.getLogger(ROOT).removeHandler(handler)
    try:
        handler.close()  # flushes: on a full disk that fails too
    except OSError:
        pass
