"""What the launch hook found in each rank (``events/hook/replica{r}_rank{g}.json``), and what the
numeric check makes of it. Torch-free.

A rank writes its ``HookStatus`` whenever the hook sees something new: torchft's Manager built
(its process group wrapped), a DiLoCo attached (its rounds go to the rank's event log, as
``ftrun train``'s worker writes them), a LocalSGD (averaging ftrun does not sketch), a failure.
``launch_numerics`` turns the run's statuses into the check's ``sketches_on`` and, where no rank
attached, the one reason numerics were not checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgspec

from ftrun import layout
from ftrun.errors import BadInput
from ftrun.small_files import Missing, read_json

STATUS_DIR = "hook"  # under the run dir's events/
STATUS_LIMIT = 64 << 10  # bytes of one status read at most


class HookStatus(msgspec.Struct, omit_defaults=True):
    """One rank's hook: ``manager``: a torchft Manager was built (its process group sketched);
    ``diloco``: a DiLoCo was attached (its rounds sketched into the event log); ``local_sgd``: a
    LocalSGD was built (not sketched); ``error``: why the hook gave up (the script ran on)."""

    replica: int
    rank: int
    manager: bool = False
    diloco: bool = False
    local_sgd: bool = False
    error: str | None = None


def status_file(run_dir: Path, replica: int, rank: int) -> Path:
    return run_dir / layout.EVENT_LOGS / STATUS_DIR / f"{layout.worker_name(replica, rank)}.json"


def read_statuses(run_dir: Path) -> list[HookStatus]:
    """Every rank's status in ``run_dir`` (a file that cannot be read is left out: a rank killed
    while writing leaves none, which says no more than a rank that found nothing)."""
    out = []
    for p in sorted((run_dir / layout.EVENT_LOGS / STATUS_DIR).glob("replica*_rank*.json")):
        try:
            out.append(read_json(p, STATUS_LIMIT, "hook status", HookStatus))
        except (BadInput, Missing):
            continue
    return out


def launch_numerics(run_dirs: Sequence[Path], script: str) -> tuple[bool | None, str | None]:
    """(``sketches_on`` for ``ftrun.check.numerics.check_numerics``, why numerics were not checked)
    of a launch: on when some rank attached a DiLoCo (the event logs speak, no reason); else the
    reason, once, from what the hook saw; (None, None) for a run dir without the hook."""
    found = [s for rd in run_dirs for s in read_statuses(rd)]
    if not found:
        return None, None
    if any(s.diloco for s in found):
        return True, None
    if failed := next((s for s in found if s.error), None):
        return False, f"the launch hook failed in replica {failed.replica} rank {failed.rank}: {failed.error}"
    if any(s.local_sgd for s in found):
        return False, (
            f"{script} averages with torchft's LocalSGD (parameters, no outer optimizer): "
            "ftrun's sketches cover DiLoCo only"
        )
    return False, f"{script} built a torchft Manager but no DiLoCo or LocalSGD: no round to sketch"
