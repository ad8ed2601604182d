"""Fault specs for ``--kill`` and ``--hang``. Torch-free; parsed and validated before spawning.

``--kill R@S``          SIGKILL every process of replica group R when it reaches step S.
``--kill R@S:sigterm``  SIGTERM the group's launcher instead (a polite stop; torchrun stops its ranks).
``--hang R@S:SECONDS``  replica group R stalls for SECONDS inside step S (exercises timeouts).

The worker fires each fault once per run (a marker file in ``<run>/faults/`` records it, so
a restarted group does not fire it again).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from ftrun import layout
from ftrun.errors import BadInput

_KILL_RE = re.compile(r"^(\d+)@(\d+)(?::(sigkill|sigterm|kill|term))?$", re.I)
_HANG_RE = re.compile(r"^(\d+)@(\d+):(\d+(?:\.\d+)?)s?$", re.I)


@dataclass(frozen=True)
class Fault:
    replica: int
    step: int
    action: str  # "kill" | "sigterm" | "hang"
    seconds: float = 0.0

    @property
    def key(self) -> str:
        return layout.fault_key(self.action, self.replica, self.step)

    def describe(self) -> str:
        what = {"kill": "SIGKILL", "sigterm": "SIGTERM", "hang": f"hang {self.seconds:g}s"}[self.action]
        return f"{what} replica group {self.replica} at step {self.step}"

    def to_json(self) -> dict:
        return asdict(self)


def parse_kill(text: str) -> Fault:
    m = _KILL_RE.match(text.strip()) if isinstance(text, str) else None
    if not m:
        raise BadInput(f"--kill {text!r}: expected REPLICA@STEP or REPLICA@STEP:sigterm, e.g. 1@25")
    action = "sigterm" if (m[3] or "").lower() in ("sigterm", "term") else "kill"
    return Fault(int(m[1]), int(m[2]), action)


def parse_hang(text: str) -> Fault:
    m = _HANG_RE.match(text.strip()) if isinstance(text, str) else None
    if not m:
        raise BadInput(f"--hang {text!r}: expected REPLICA@STEP:SECONDS, e.g. 0@12:30")
    return Fault(int(m[1]), int(m[2]), "hang", float(m[3]))


def parse_faults(kills: list[str], hangs: list[str], replicas: int, steps: int) -> list[Fault]:
    """Parse and check against the run: the replica must exist and the step lie in 1..steps."""
    faults = [parse_kill(k) for k in kills] + [parse_hang(h) for h in hangs]
    for f, text in zip(faults, [*kills, *hangs]):
        flag = "--hang" if f.action == "hang" else "--kill"
        if f.replica >= replicas:
            raise BadInput(f"{flag} {text}: replica group {f.replica} does not exist (--replicas {replicas}: groups 0..{replicas - 1})")
        if not 1 <= f.step <= steps:
            raise BadInput(f"{flag} {text}: step {f.step} is outside 1..--steps ({steps})")
        if f.action == "hang" and f.seconds <= 0:
            raise BadInput(f"{flag} {text}: SECONDS must be > 0")
    keys = [f.key for f in faults]
    if len(set(keys)) != len(keys):
        raise BadInput("--kill/--hang: the same fault is given twice")
    return faults
