"""The supervision policy of ``ftrun train`` (``launch.supervise``) and ``ftrun launch``
(``launch.watch``): what a replica group's exit and the lighthouse's death mean. Torch-free.

* a group that exits 0 is *done*;
* one that exits non-zero is relaunched while it has restarts left (``--restarts``);
* one killed on purpose (a fault that fired) with none left is *lost*: the others carry on;
* any other non-zero exit *fails* the run (``group_failed``: the group, how it exited, its
  error, its log) and the rest is stopped;
* the lighthouse ftrun started exiting fails the run (``lighthouse_failed``).

The two supervisors differ only in what they watch besides exits (train: step progress and
the watchdog; launch: ``--kill`` triggers and ``--timeout``) and in how they find a group's
error (train: the rank's meta record first; launch: its log, ``launch.diagnose``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from ftrun import layout
from ftrun.launch.diagnose import error_line, exit_description, read_log
from ftrun.launch.groups import Group, Lighthouse

Outcome = Literal["done", "restart", "lost", "fail"]


def on_exit(code: int, restarts: int, max_restarts: int, fault: str | None) -> Outcome:
    """What a group's exit ``code`` means (module rules); ``restarts``: its relaunches so far;
    ``fault``: the fault that killed it on purpose (None: none did)."""
    if code == 0:
        return "done"
    if restarts < max_restarts:
        return "restart"
    return "lost" if fault is not None else "fail"


def relaunch(g: Group) -> None:
    """Start the group's next incarnation (it reads its number from ``FTRUN_RESTART``)."""
    g.restarts += 1
    g.env[layout.ENV_RESTART] = str(g.restarts)
    g.start()


def lighthouse_failed(lighthouse: Lighthouse | None) -> str | None:
    """The run's one failure line when the lighthouse ftrun started has exited (its log's error
    line and where the log is); None while it runs (or when another host runs it)."""
    if lighthouse is None or lighthouse.proc.poll() is None:
        return None
    cause = error_line(read_log(lighthouse.log) or "")
    return (
        f"lighthouse exited with code {lighthouse.proc.returncode}"
        + (f": {cause}" if cause else "")
        + f"; see {lighthouse.log}"
    )


def group_failed(replica: int, code: int, restarts: int, reason: str, log: Path, at: str = "") -> str:
    """The run's one failure line for a group whose exit fails it: ``replica group R exited with
    code N [AT] [after K restart(s)]: REASON; see LOG``."""
    return (
        f"replica group {replica} {exit_description(code)}"
        + (f" {at}" if at else "")
        + (f" after {restarts} restart(s)" if restarts else "")
        + f": {reason}; see {log}"
    )
