"""Which fragment each send and sync moved, as torchft's own log lines say. Torch-free.

torchft's ``DiLoCo`` logs, at INFO, ``Preparing fragment=N step=L`` at every send and ``Syncing
fragment=N step=L manager_step=M`` at every sync (``local_sgd.py``, both releases); a script that
logs at INFO (torchft's ``train_diloco.py`` does) leaves them in the replica group's log, which
``ftrun launch`` keeps (``layout.group_log``). They are evidence of the fragment id where the
trace has none: fragments with equal sizes, or a run without a manifest.

The k-th ``Preparing`` line of a process is its k-th send, cycle k (``ftrun.schedule``), and the
k-th ``Syncing`` line its k-th sync. That holds for one process from its start: a log whose
``Syncing`` lines show a manager step above their count (a relaunched process healed to its
peers' step) or going down is not used (``FragmentLog.unusable`` says why).
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from ftrun.check.evidence import Identity
from ftrun.check.identify import Identities
from ftrun.check.observe import WorkerObs
from ftrun.schedule import Schedule

MAX_LOG_BYTES = 256 << 20  # a group log read past this is not read further (bounded input)
_PREPARING = re.compile(r"Preparing fragment=(\d+) step=\d+")
_SYNCING = re.compile(r"Syncing fragment=(\d+) step=\d+ manager_step=(\d+)")


class FragmentLog(msgspec.Struct):
    """One replica group's fragments by cycle: ``sends[k]`` / ``syncs[k]`` = the k-th send's / sync's."""

    replica: int
    path: str
    sends: list[int] = msgspec.field(default_factory=list)
    syncs: list[int] = msgspec.field(default_factory=list)
    unusable: str | None = None


def read_fragment_log(path: Path, replica: int, limit: int = MAX_LOG_BYTES) -> FragmentLog | None:
    """The fragments ``path`` names (module docstring); None without any such line."""
    out = FragmentLog(replica, str(path))
    last = -1
    try:
        with path.open("rb") as f:
            data = f.read(limit)
    except OSError:
        return None
    for raw in data.splitlines():
        line = raw.decode("utf-8", "replace")
        if m := _PREPARING.search(line):
            out.sends.append(int(m[1]))
        elif m := _SYNCING.search(line):
            mstep = int(m[2])
            if out.unusable is None and (mstep < last or mstep > len(out.syncs)):
                out.unusable = (
                    f"{path}: the sync logged after {len(out.syncs)} sync(s) is at manager step {mstep} "
                    "(a relaunched or healed process): its fragments are not read by count"
                )
            last = mstep
            out.syncs.append(int(m[1]))
    if not out.sends and not out.syncs:
        return None
    return out


def apply(
    logs: dict[int, FragmentLog], wobs: list[WorkerObs], ids: Identities, schedule: Schedule
) -> tuple[list[str], list[str]]:
    """Give every observation of a replica with a usable log the fragment its log line names
    (``basis`` "log": identified). Returns (notes, problems): a log that cannot be used, and a
    log line that contradicts the trace's own identification of the fragment."""
    notes = [lg.unusable for lg in logs.values() if lg.unusable]
    problems: list[str] = []
    for wo in wobs:
        lg = logs.get(wo.worker.replica)
        if lg is None or lg.unusable:
            continue
        for o in wo.obs:
            if o.step is None:
                continue
            cycle = schedule.cycle_of(o.step)
            named = lg.sends if o.kind == "send" else lg.syncs
            if not 0 <= cycle < len(named):
                continue
            frag = named[cycle]
            had = ids.of(o)
            if had.checked and had.fragment != frag:
                problems.append(
                    f"replica {wo.worker.replica} rank {wo.worker.rank}: the {o.kind} at step {o.step} moved "
                    f"fragment {had.fragment} by its {had.evidence}, but torchft's log says fragment {frag}"
                )
                continue
            ids.by_obs[o] = Identity(frag, (frag,), "torchft log", basis="log")
    return notes, problems
