"""``FaultsConfig``: the injected faults, chaos runs, relaunches and warm spares: a part of
``ftrun.config.parts.RunConfig``. Torch-free."""

# No ``from __future__ import annotations``: the fields' ``Opt``s are objects at class creation
# (``ftrun.config.options`` reads them), as in ``ftrun.config.parts``.

from typing import Annotated, ClassVar, Protocol

import msgspec

from ftrun.config.fields import FAULTS, MAX_SPARES, TRAIN, At, Opt
from ftrun.config.hosts import HostsConfig


class _Sketches(Protocol):
    @property
    def sketches(self) -> bool: ...


class _StallTimeout(Protocol):
    @property
    def stall_timeout_s(self) -> float: ...


class RunView(Protocol):
    """What the faults' rules read of the whole ``RunConfig`` (declared here, not imported: the
    tree's module imports this one)."""

    @property
    def hosts(self) -> HostsConfig: ...
    @property
    def profiling(self) -> _Sketches: ...
    @property
    def timeouts(self) -> _StallTimeout: ...
    def planned_faults(self) -> object: ...


_FAULT_LISTS = ("kill", "hang", "fail_commit", "corrupt_allreduce", "corrupt_sync")


class FaultsConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """Injected faults (``ftrun.fault_flags``) and how often a dead group is relaunched."""

    PANEL: ClassVar[str] = FAULTS

    kill: Annotated[list[str], Opt("SIGKILL replica group R at step S: R@S, or R@S:sigterm. Repeatable.")] = []
    hang: Annotated[list[str], Opt("Replica group R stalls SECONDS inside step S: R@S:SECONDS. Repeatable.")] = []
    corrupt_allreduce: Annotated[
        list[str],
        Opt(
            "R@S:KIND: group R averages the sync at step S wrongly (wrong-count, drop, stale, late, noise).",
            commands=(TRAIN,),
        ),
    ] = []  # KINDs: ftrun.fault_flags
    corrupt_sync: Annotated[
        list[str],
        Opt(
            "R@S:KIND: group R gets the outer step of the sync at step S wrong (sign, stale, lr, alpha).",
            commands=(TRAIN,),
        ),
    ] = []  # KINDs: ftrun.fault_flags.SYNC_KINDS
    fail_commit: Annotated[
        list[str],
        Opt("R@S: replica group R votes false in should_commit at its first sync from step S. Repeatable."),
    ] = []
    chaos: Annotated[
        list[str],
        Opt(
            "Chaos run: faults KIND:MTBF (kill, sigterm, hang[:SECONDS]; MTBF in seconds) at random, e.g. kill:60.",
            commands=(TRAIN,),
        ),
    ] = []  # ftrun.chaos_plan
    chaos_seed: Annotated[int, Opt("Seed of the --chaos fault draw (same seed: same faults).", commands=(TRAIN,))] = 0
    chaos_min_alive: Annotated[
        int, Opt("--chaos never leaves fewer than N groups up (default 1: never all at once).", commands=(TRAIN,))
    ] = 1
    chaos_max_faults: Annotated[
        int, Opt("--chaos injects at most N faults (default 0: no cap).", commands=(TRAIN,))
    ] = 0
    # -1: 1 with a fault, else 0 (``max_restarts``)
    restarts: Annotated[int, Opt("Relaunch a dead group up to N times (default 1 with faults, else 0).")] = -1
    spares: Annotated[
        int,
        Opt(
            "N warm spare groups, built and waiting outside the quorum; one takes over a dead group's restart.",
            commands=(TRAIN,),
        ),
    ] = 0

    @property
    def max_restarts(self) -> int:
        if self.restarts >= 0:
            return self.restarts
        return 1 if (self.kill or self.hang) else 0

    def check(self, cfg: RunView, at: At) -> None:
        if self.restarts < 0 and (self.restarts != -1 or at.known and at.origin("restarts") in ("flag", "file")):
            raise at.bad("restarts", self.restarts, "must be >= 0")  # -1 is only the default's "1 with a fault, else 0"
        for name in _FAULT_LISTS:
            if not all(isinstance(x, str) for x in getattr(self, name)):
                raise at.bad(name, getattr(self, name), "must be a list of strings like '1@25'")
        cfg.planned_faults()
        if not 0 <= self.spares <= MAX_SPARES:
            raise at.bad("spares", self.spares, f"must be between 0 and {MAX_SPARES}")
        if self.spares and cfg.hosts.replica_group_id >= 0:
            raise at.bad("spares", self.spares, "needs every replica group on this host (no --replica-group-id)")
        if (
            self.chaos
            or at.known
            and any(at.origin(k) in ("flag", "file") for k in ("chaos_seed", "chaos_min_alive", "chaos_max_faults"))
        ):
            self._check_chaos(cfg, at)
        for name in ("corrupt_allreduce", "corrupt_sync"):
            if getattr(self, name) and not cfg.profiling.sketches:
                raise at.bad(name, getattr(self, name)[0], "needs the sketches it is checked by (drop --no-sketches)")

    def _check_chaos(self, cfg: RunView, at: At) -> None:
        """The ``--chaos*`` rules (``ftrun.chaos_plan``): parsable kinds, two groups or more on this
        host, ``--chaos-min-alive`` between ``--min-replicas`` (the survivors must still make a
        quorum) and ``--replicas`` - 1, a hang shorter than ``--stall-timeout``."""
        from ftrun.chaos_plan import parse_kinds

        if not all(isinstance(x, str) for x in self.chaos):
            raise at.bad("chaos", self.chaos, "must be a list of strings like 'kill:60'")
        hosts, given = cfg.hosts, ",".join(self.chaos)
        kinds = parse_kinds(self.chaos, at.where("chaos"))
        if not kinds:
            raise at.bad("chaos_seed", self.chaos_seed, "needs --chaos KIND:MTBF")
        if hosts.replica_group_id >= 0:
            raise at.bad("chaos", given, "needs every replica group on this host (no --replica-group-id)")
        if hosts.replicas < 2:
            raise at.bad("chaos", given, "needs at least 2 replica groups (--replicas)")
        low, high = max(1, hosts.min_replicas), hosts.replicas - 1
        if not low <= self.chaos_min_alive <= high:
            raise at.bad(
                "chaos_min_alive",
                self.chaos_min_alive,
                f"must be between {low} (--min-replicas: the survivors' quorum) and --replicas - 1 ({high})",
            )
        if self.chaos_max_faults < 0:
            raise at.bad("chaos_max_faults", self.chaos_max_faults, "must be >= 0 (0: no cap)")
        stall = cfg.timeouts.stall_timeout_s
        if any(k.action == "hang" and k.seconds >= stall for k in kinds):
            raise at.bad("chaos", given, f"a hang as long as --stall-timeout {stall:g} s would stop the run")
