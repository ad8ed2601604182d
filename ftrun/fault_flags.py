"""The fault flags parsed: ``--kill``, ``--hang``, ``--fail-commit``, ``--corrupt-allreduce`` and
``ftrun launch``'s ``--kill``. Torch-free; parsed and validated before spawning (injected by
``ftrun.worker.fault_injection``; the faults a run's files show: ``ftrun.check.fired_faults``).

``--kill R@S``          SIGKILL every process of replica group R when it reaches step S.
``--kill R@S:sigterm``  SIGTERM the group's launcher instead (a polite stop; torchrun stops its ranks).
``--hang R@S:SECONDS``  replica group R stalls for SECONDS inside step S (exercises timeouts).
``--corrupt-allreduce R@S:KIND``  the torchft process group of replica group R (rank 0) computes
                        a wrong average for the fragment synced at step S (a sync step), as
                        ``CORRUPT_KINDS`` says; the numeric check (``ftrun.check.numerics``) must
                        catch it. Injected by ``ftrun.worker.fault_injection.Corruption``.
``--corrupt-sync R@S:KIND``  rank 0 of replica group R gets one stage of the outer step of the
                        round synced at step S wrong, as ``SYNC_KINDS`` says; the numeric check
                        of the outer step (``ftrun.check.numerics_outer``) must name it.
``--fail-commit R@S``   rank 0 of replica group R votes false in ``should_commit`` at the first
                        sync at or after step S, so the group's commit fails there (torchft's own
                        ``Manager.report_error``: the same path a real error in the step takes) —
                        a failed commit on every torchft, with no upstream bug needed.

The worker fires each fault once per run (a marker file in ``<run>/faults/`` records it, so
a restarted group does not fire it again).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from ftrun.errors import BadInput

_KILL_RE = re.compile(r"^(\d+)@(\d+)(?::(sigkill|sigterm|kill|term))?$", re.I)
_HANG_RE = re.compile(r"^(\d+)@(\d+):(\d+(?:\.\d+)?)s?$", re.I)
_CORRUPT_RE = re.compile(r"^(\d+)@(\d+):([a-z-]+)$", re.I)

# --corrupt-allreduce kinds: what replica R's process group does wrong in the round synced at S.
CORRUPT_KINDS = {
    "wrong-count": "the SUM divided by participants + 1 (averaging over the world with one group missing)",
    "drop": "its own contribution missing from the SUM (zeroed after it was handed to the collective)",
    "stale": "the collective returns the previous round's SUM of the same fragment",
    "late": "the averaged result multiplied by 1.1 after torchft's divide callback ran, before the outer step",
    "noise": "a relative 1e-3 perturbation of one element (the largest) of the SUM",
}

# --corrupt-sync kinds: which stage of the outer step replica R's rank 0 gets wrong at sync S
SYNC_KINDS = {
    "sign": "its pseudo-gradient negated before the collective (local - original)",
    "stale": "save_parameters skipped after the outer step: the next round starts from the old originals",
    "lr": "the outer step taken with 2x the optimizer's lr",
    "alpha": "the merge ignoring fragment_update_alpha (needs --fragment-update-alpha > 0)",
}

_FAIL_COMMIT_RE = re.compile(r"^(\d+)@(\d+)$")
FLAGS = {
    "kill": "--kill",
    "sigterm": "--kill",
    "hang": "--hang",
    "fail-commit": "--fail-commit",
    "corrupt": "--corrupt-allreduce",
    "corrupt-sync": "--corrupt-sync",
}


def fault_key(action: str, replica: int, step: int) -> str:
    """A fault's name: its marker file ``faults/<key>.json`` (``ftrun.layout``) and its identity in a run."""
    return f"{action}-r{replica}-s{step}"


@dataclass(frozen=True)
class Fault:
    replica: int
    step: int
    action: str  # "kill" | "sigterm" | "hang" | "fail-commit" | "corrupt" | "corrupt-sync"
    seconds: float = 0.0
    kind: str = ""  # corrupt: one of CORRUPT_KINDS; corrupt-sync: one of SYNC_KINDS

    @property
    def key(self) -> str:
        return fault_key(self.action, self.replica, self.step)

    def describe(self) -> str:
        if self.action == "corrupt":
            return (
                f"corrupt-allreduce {self.kind} in replica group {self.replica}'s process group "
                f"at sync step {self.step}"
            )
        if self.action == "corrupt-sync":
            return f"corrupt-sync {self.kind} in replica group {self.replica}'s outer step at sync step {self.step}"
        if self.action == "fail-commit":
            return f"failed commit of replica group {self.replica} at its first sync from step {self.step}"
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


def parse_corrupt(text: str) -> Fault:
    m = _CORRUPT_RE.match(text.strip()) if isinstance(text, str) else None
    if not m or m[3].lower() not in CORRUPT_KINDS:
        raise BadInput(
            f"--corrupt-allreduce {text!r}: expected REPLICA@SYNC_STEP:KIND with KIND one of "
            f"{', '.join(CORRUPT_KINDS)}, e.g. 1@40:drop"
        )
    return Fault(int(m[1]), int(m[2]), "corrupt", kind=m[3].lower())


def parse_corrupt_sync(text: str) -> Fault:
    m = _CORRUPT_RE.match(text.strip()) if isinstance(text, str) else None
    if not m or m[3].lower() not in SYNC_KINDS:
        raise BadInput(
            f"--corrupt-sync {text!r}: expected REPLICA@SYNC_STEP:KIND with KIND one of "
            f"{', '.join(SYNC_KINDS)}, e.g. 1@40:sign"
        )
    return Fault(int(m[1]), int(m[2]), "corrupt-sync", kind=m[3].lower())


def parse_fail_commit(text: str) -> Fault:
    m = _FAIL_COMMIT_RE.match(text.strip()) if isinstance(text, str) else None
    if not m:
        raise BadInput(f"--fail-commit {text!r}: expected REPLICA@STEP, e.g. 1@8")
    return Fault(int(m[1]), int(m[2]), "fail-commit")


def parse_faults(
    kills: list[str],
    hangs: list[str],
    replicas: int,
    steps: int,
    fail_commits: Sequence[str] = (),
    sync_window: int = 1,
    corrupts: Sequence[str] = (),
    sync_every: int = 0,
    corrupt_syncs: Sequence[str] = (),
    alpha: float = 0.0,
) -> list[Fault]:
    """Parse and check against the run: the replica must exist and the step lie in 1..steps;
    a ``--fail-commit`` needs a sync at or after its step (syncs every ``sync_window`` = H/F steps);
    a ``--corrupt-allreduce`` step must be a sync step (a multiple of ``sync_window``), and
    ``stale`` needs a previous round of the same fragment (step > ``sync_every``). A
    ``--corrupt-sync`` step must be a sync step too; its ``stale`` shows in the fragment's next
    round (step + ``sync_every`` <= steps); ``alpha`` needs a merge (``alpha`` > 0)."""
    faults = (
        [parse_kill(k) for k in kills]
        + [parse_hang(h) for h in hangs]
        + [parse_fail_commit(c) for c in fail_commits]
        + [parse_corrupt(c) for c in corrupts]
        + [parse_corrupt_sync(c) for c in corrupt_syncs]
    )
    for f, text in zip(faults, [*kills, *hangs, *fail_commits, *corrupts, *corrupt_syncs], strict=True):
        flag = FLAGS[f.action]
        _check_sync_fault(f, text, steps, sync_every, alpha)
        if f.action in ("corrupt", "corrupt-sync") and sync_window > 1 and f.step % sync_window:
            raise BadInput(
                f"{flag} {text}: step {f.step} is not a sync step (a fragment syncs every H/F = {sync_window} steps: "
                f"{sync_window}, {2 * sync_window}, ...)"
            )
        if f.action == "corrupt" and f.kind == "stale" and f.step <= sync_every:
            raise BadInput(
                f"{flag} {text}: stale needs a previous round of the same fragment (a sync step > H = {sync_every})"
            )
        if f.replica >= replicas:
            raise BadInput(
                f"{flag} {text}: replica group {f.replica} does not exist "
                f"(--replicas {replicas}: groups 0..{replicas - 1})"
            )
        if not 1 <= f.step <= steps:
            raise BadInput(f"{flag} {text}: step {f.step} is outside 1..--steps ({steps})")
        if f.action == "hang" and f.seconds <= 0:
            raise BadInput(f"{flag} {text}: SECONDS must be > 0")
        last_sync = steps // sync_window * sync_window
        if f.action == "fail-commit" and f.step > last_sync:
            raise BadInput(
                f"{flag} {text}: no sync at or after step {f.step} (one every H/F = {sync_window} steps; "
                f"the last of --steps {steps} is at step {last_sync})"
            )
    keys = [f.key for f in faults]
    if len(set(keys)) != len(keys):
        raise BadInput("--kill/--hang/--fail-commit/--corrupt-allreduce/--corrupt-sync: the same fault is given twice")
    return faults


def _check_sync_fault(f: Fault, text: str, steps: int, sync_every: int, alpha: float) -> None:
    """A ``--corrupt-sync`` the run can show: ``stale`` needs the fragment's next round, ``alpha`` a merge."""
    if f.action != "corrupt-sync":
        return
    if f.kind == "stale" and sync_every and f.step + sync_every > steps:
        raise BadInput(
            f"--corrupt-sync {text}: stale shows in the fragment's next round, at step {f.step + sync_every} "
            f"(> --steps {steps})"
        )
    if f.kind == "alpha" and alpha <= 0:
        raise BadInput(f"--corrupt-sync {text}: alpha needs a merge to ignore (--fragment-update-alpha > 0)")


# --- `ftrun launch`: faults for scripts ftrun does not control (by wall clock or log line) ---

_LAUNCH_KILL_RE = re.compile(r"^(\d+)@(?:(\d+(?:\.\d+)?)s|line:(.+?))(?::(sigkill|sigterm|kill|term))?$", re.I | re.S)


@dataclass(frozen=True)
class LaunchKill:
    """``--kill R@SECONDSs[:sigterm]`` (wall clock since the launch started) or
    ``--kill R@line:REGEX[:sigterm]`` (when the group's log first matches REGEX). Fires once."""

    replica: int
    signal: str  # "SIGKILL" | "SIGTERM"
    seconds: float | None = None
    pattern: str | None = None

    def describe(self) -> str:
        when = f"after {self.seconds:g} s" if self.seconds is not None else f"when its log matches {self.pattern!r}"
        return f"{self.signal} replica group {self.replica} {when}"

    def to_json(self) -> dict:
        return asdict(self)


def parse_launch_kill(text: str, replicas: int) -> LaunchKill:
    """One ``--kill`` of ``ftrun launch``; ``BadInput`` (one line) when malformed, the replica
    does not exist or the REGEX does not compile."""
    m = _LAUNCH_KILL_RE.match(text.strip()) if isinstance(text, str) else None
    if not m:
        raise BadInput(
            f"--kill {text!r}: expected REPLICA@SECONDSs or REPLICA@line:REGEX, optionally :sigterm, e.g. 1@30s"
        )
    replica = int(m[1])
    if replica >= replicas:
        raise BadInput(
            f"--kill {text}: replica group {replica} does not exist (--replicas {replicas}: groups 0..{replicas - 1})"
        )
    sig = "SIGTERM" if (m[4] or "").lower() in ("sigterm", "term") else "SIGKILL"
    if m[2] is not None:
        return LaunchKill(replica, sig, seconds=float(m[2]))
    try:
        re.compile(m[3])
    except re.error as e:
        raise BadInput(f"--kill {text}: REGEX {m[3]!r} does not compile ({e})") from None
    return LaunchKill(replica, sig, pattern=m[3])
