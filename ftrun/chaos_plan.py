"""Chaos runs' fault schedule: ``--chaos KIND:MTBF[,...]`` parsed, and the seeded draw of faults
with exponential inter-arrival times. Pure and torch-free (``ftrun.launch.chaos`` fires them).

``KIND:MTBF`` (MTBF in seconds, ``60``, ``60s`` or ``2m``): faults of KIND arrive as a Poisson
process with mean time between them MTBF, over the whole run (not per group). Kinds:

* ``kill``: SIGKILL every process of the target group (``--kill``'s action);
* ``sigterm``: SIGTERM its launcher (``--kill R@S:sigterm``'s action);
* ``hang[:SECONDS]``: the group stalls SECONDS (default ``DEFAULT_HANG_S``) inside a step
  (``--hang``'s action), e.g. ``hang:120:5``.

Several kinds superpose: the run's faults arrive at the summed rate, each of KIND with
probability rate(KIND) / total rate, on a target group drawn uniformly. One ``random.Random(seed)``
draws, per fault in order: the gap, the kind, the target — so a seed gives the same sequence of
(offset, kind, target) every time (``draw``). Whether and when a drawn fault may fire is
``blocked``'s rule: the target must be up (not recovering from an earlier fault) and at least
``min_alive`` other groups up, so never every group at once.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Iterator
from pathlib import Path

import msgspec

from ftrun.errors import BadInput

KINDS = ("kill", "sigterm", "hang")
DEFAULT_HANG_S = 5.0
_SPEC_RE = re.compile(r"^(kill|sigterm|hang):(\d+(?:\.\d+)?)(s|m)?(?::(\d+(?:\.\d+)?)s?)?$", re.I)


class ChaosKind(msgspec.Struct, frozen=True):
    """One ``KIND:MTBF[:SECONDS]``: ``mtbf_s`` mean seconds between faults of ``action`` over the
    run; ``seconds``: a hang's length (0 for kill and sigterm)."""

    action: str
    mtbf_s: float
    seconds: float = 0.0


class ChaosFault(msgspec.Struct, frozen=True):
    """The ``index``-th drawn fault: due ``at_s`` seconds after the chaos clock started (every
    group training), ``action`` on replica group ``replica`` (a hang: ``seconds`` long)."""

    index: int
    at_s: float
    action: str
    replica: int
    seconds: float = 0.0

    def describe(self) -> str:
        what = f"hang {self.seconds:g}s" if self.action == "hang" else self.action
        return f"chaos #{self.index}: {what} replica group {self.replica} (due at {self.at_s:.1f} s)"


def parse_kind(text: str, flag: str = "--chaos") -> ChaosKind:
    """One ``KIND:MTBF[:SECONDS]``; ``BadInput`` (one line naming ``flag``) when malformed."""
    m = _SPEC_RE.match(text.strip())
    if not m:
        raise BadInput(
            f"{flag} {text!r}: expected KIND:MTBF with KIND one of {', '.join(KINDS)} and MTBF in "
            "seconds (60, 60s or 2m), a hang optionally :SECONDS, e.g. kill:60,hang:120:5"
        )
    action, mtbf = m[1].lower(), float(m[2]) * (60.0 if (m[3] or "").lower() == "m" else 1.0)
    if mtbf <= 0:
        raise BadInput(f"{flag} {text!r}: MTBF must be > 0 seconds")
    if m[4] is not None and action != "hang":
        raise BadInput(f"{flag} {text!r}: only a hang takes :SECONDS")
    seconds = (float(m[4]) if m[4] is not None else DEFAULT_HANG_S) if action == "hang" else 0.0
    if action == "hang" and seconds <= 0:
        raise BadInput(f"{flag} {text!r}: a hang's SECONDS must be > 0")
    return ChaosKind(action, mtbf, seconds)


def parse_kinds(texts: list[str], flag: str = "--chaos") -> list[ChaosKind]:
    """Every ``--chaos`` value (each may hold several, comma-separated); a kind given twice is bad input."""
    kinds = [parse_kind(x, flag) for t in texts for x in t.split(",") if x.strip()]
    actions = [k.action for k in kinds]
    for a in set(actions):
        if actions.count(a) > 1:
            raise BadInput(f"{flag}: kind {a} is given twice (give each kind one MTBF)")
    return kinds


def combined_mtbf_s(kinds: list[ChaosKind]) -> float:
    """Mean seconds between two faults of any kind: 1 / the summed rates."""
    return 1.0 / sum(1.0 / k.mtbf_s for k in kinds)


def draw(kinds: list[ChaosKind], replicas: int, seed: int) -> Iterator[ChaosFault]:
    """The run's faults in order, without end (module docstring): the same ``seed`` draws the same faults."""
    if not kinds or replicas < 1:
        return
    rng = random.Random(seed)
    rates = [1.0 / k.mtbf_s for k in kinds]
    total = sum(rates)
    at, index = 0.0, 0
    while True:
        at += rng.expovariate(total)
        kind = rng.choices(kinds, weights=rates)[0]
        replica = rng.randrange(replicas)
        yield ChaosFault(index, at, kind.action, replica, kind.seconds)
        index += 1


def blocked(target: int, up: set[int], min_alive: int) -> str | None:
    """Why the fault on ``target`` may not fire now (None: it may): ``up`` are the groups
    training now (started, not recovering from a fault). Firing must leave ``min_alive`` up."""
    if target not in up:
        return f"replica group {target} is not up (starting or recovering)"
    if len(up) - 1 < min_alive:
        return f"{len(up)} group(s) up: a fault would leave fewer than --chaos-min-alive {min_alive}"
    return None


# --- the supervisor's request to a group, and the marker of a fired chaos fault ---

CHAOS_DIR = "chaos"  # <run>/chaos/replica{R}.json: the fault the supervisor asks group R to fire
REQUEST_LIMIT = 4096  # bytes: a request is one small JSON object


class ChaosRequest(msgspec.Struct, frozen=True):
    """``<run>/chaos/replica{R}.json``: fire chaos fault ``index`` (``action``, a hang ``seconds``
    long) at the start of the next step (``ftrun.worker.fault_injection``)."""

    index: int
    action: str
    seconds: float = 0.0


def request_path(run_dir: Path, replica: int) -> Path:
    return run_dir / CHAOS_DIR / f"replica{replica}.json"


def marker_key(index: int, action: str, replica: int, step: int) -> str:
    """A fired chaos fault's marker name (``faults/<key>.json``): unique per fault, as one group
    may be hit twice at one step number."""
    return f"chaos{index:05d}-{action}-r{replica}-s{step}"


def marker_prefix(index: int) -> str:
    return f"chaos{index:05d}-"


def read_request(run_dir: Path, replica: int) -> tuple[ChaosRequest, float] | None:
    """The pending request of group ``replica`` and its file's mtime (None: none, or one being
    replaced). Bounded read; an unreadable request counts as none (the supervisor rewrites it)."""
    path = request_path(run_dir, replica)
    try:
        with path.open("rb") as f:
            mtime = os.fstat(f.fileno()).st_mtime
            data = f.read(REQUEST_LIMIT + 1)
    except OSError:
        return None
    if len(data) > REQUEST_LIMIT:
        return None
    try:
        return msgspec.json.decode(data, type=ChaosRequest), mtime
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
