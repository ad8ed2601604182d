"""The recovery breakdown's record: one ``Recovery`` per fault that stopped a group, its phases
and the text that says where the time went (``ftrun.check.recovery`` builds it). Torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field

from ftrun.check.recovery_hold import hold_text
from ftrun.layout import CollectiveHold, DetectionBound, RecoveryRecord, SurvivorLosses

PHASES = ("detect", "relaunch", "join", "reconfigure", "heal", "catch_up")
ACCOUNT_ORDER = ("relaunch", "join", "reconfigure", "heal", "catch_up", "detect")  # who owns an overlapped second
TOLERANCE = 0.10  # the phases must cover the measured total to within this share
STOPS = ("kill", "sigterm", "hang")  # the fault actions that stop a group's processes (a recovery follows)


TraceSpans = dict[tuple[int, int], dict[str, list[tuple[float, float]]]]  # (replica, incarnation) -> label -> spans
GroupSpans = dict[int, dict[str, list[tuple[float, float]]]]  # surviving replica -> label -> spans (rank 0)


@dataclass
class Recovery:
    """The breakdown while it is measured (``ftrun.check.recovery_phases`` fills it phase by
    phase): unix-time spans, unrounded seconds, participants by replica id. Its written form is
    ``record()``, the ``layout.RecoveryRecord`` (spans after the fault, seconds to the millisecond).
    Two types, not one: ``covered``, ``plan --check``'s measured phases and the chaos summary's
    medians read the unrounded values, so a record rounded as it is built would change them."""

    fault: str  # "kill 1@25"
    replica: int
    t0: float  # unix time the fault fired
    total_s: float | None  # None: never back with a commit
    phases: dict[str, float | None]
    spans: dict[str, tuple[float, float] | None]
    reasons: dict[str, str]
    unaccounted_s: float | None
    heal_bytes: int | None = None
    heal_bytes_sent: int | None = None
    heal_rate_bps: float | None = None
    heal_source: int | None = None
    heal_link_hold_s: float | None = None
    detect_bound: str = ""
    detect_limits: DetectionBound | None = None  # the manifest's ``detection`` (what bounds it)
    reconfigure_participants: dict[int, float] = field(default_factory=dict)
    participant_sources: dict[int, str] = field(default_factory=dict)  # participant -> "trace" | "event log"
    heal_send_s: float | None = None  # the source's send_checkpoint (traced, else its lifecycle record)
    heal_send_source: str | None = None  # "trace" | "event log"
    sources: dict[str, str] = field(default_factory=dict)  # phase -> "trace" | "event log"
    relaunch_detail: dict[str, float] = field(default_factory=dict)
    survivors: SurvivorLosses | None = None  # None: no surviving group's log here
    collective_hold: CollectiveHold | None = None  # survivors held until torchft's timeout (recovery_hold)
    text: str = ""

    @property
    def largest_phase(self) -> str | None:
        done = {k: v for k, v in self.phases.items() if v is not None}
        return max(done, key=lambda k: done[k]) if done else None

    @property
    def covered(self) -> bool:
        """The phases account for the total within ``TOLERANCE``."""
        return (
            self.total_s is not None
            and self.unaccounted_s is not None
            and self.unaccounted_s <= TOLERANCE * self.total_s
        )

    def record(self) -> RecoveryRecord:
        """As summary.json and inspect-trace --json hold it (``layout.RecoveryRecord``): seconds
        rounded to the millisecond, ``spans`` in seconds after the fault."""

        def r3(x: float | None) -> float | None:
            return None if x is None else round(x, 3)

        return RecoveryRecord(
            fault=self.fault,
            replica=self.replica,
            fault_at=self.t0,
            phases={k: r3(v) for k, v in self.phases.items()},
            unaccounted_s=r3(self.unaccounted_s),
            total_s=r3(self.total_s),
            heal_bytes=self.heal_bytes,
            heal_source=self.heal_source,
            heal_bytes_sent=self.heal_bytes_sent,
            heal_rate_bps=None if self.heal_rate_bps is None else round(self.heal_rate_bps),
            heal_link_hold_s=r3(self.heal_link_hold_s),
            largest_phase=self.largest_phase,
            spans={
                k: None if v is None else (round(v[0] - self.t0, 3), round(v[1] - self.t0, 3))
                for k, v in self.spans.items()
            },
            sources=self.sources,
            relaunch_detail={k: round(v, 3) for k, v in self.relaunch_detail.items()},
            reasons=self.reasons,
            detect_bound=self.detect_bound,
            detect_limits=self.detect_limits,
            reconfigure_participants={str(k): round(v, 3) for k, v in sorted(self.reconfigure_participants.items())},
            participant_sources={str(k): v for k, v in sorted(self.participant_sources.items())},
            heal_send_s=r3(self.heal_send_s),
            heal_send_source=self.heal_send_source,
            survivors=self.survivors,
            collective_hold=self.collective_hold,
            text=self.text,
        )


def describe(x: Recovery) -> str:
    """One paragraph: the total, the largest phase, the phases that did not happen and why."""
    if x.total_s is None:
        head = f"{x.fault}: the group never committed again after the fault"
    else:
        big = x.largest_phase
        head = (
            f"{x.fault}: {x.total_s:.2f} s to the group's first commit; largest phase {big} ({x.phases[big]:.2f} s)"
            if big
            else f"{x.fault}: {x.total_s:.2f} s"
        )
        head += f"; unaccounted {x.unaccounted_s:.2f} s"
    parts = [head]
    if x.detect_bound:
        parts.append(f"detect: {x.detect_bound}")
    if x.collective_hold is not None:
        parts.append(f"held: {hold_text(x.collective_hold)}")
    if x.heal_bytes is not None:
        parts.append(
            f"heal: {x.heal_bytes:,} bytes from replica {x.heal_source}"
            + (f" (source staged {x.heal_bytes_sent:,})" if x.heal_bytes_sent is not None else "")
            + (f", link hold {x.heal_link_hold_s:.3f} s" if x.heal_link_hold_s else "")
        )
    parts += [f"{k}: {why}" for k, why in x.reasons.items()]
    return "; ".join(parts)
