"""What ``ftrun plan`` answers: one typed record (``PlanResult``, nested Structs), the object its
``--json`` prints (``msgspec.to_builtins``; a field left ``UNSET`` is absent, a float that is not
finite is ``null``: ``ftrun.json_out.strict_json``). Built by ``ftrun.plan.request``, rendered by
``ftrun.report.plan_view``. Torch-free."""

from __future__ import annotations

import msgspec
from msgspec import UNSET, UnsetType

from ftrun.plan.model import Prediction


class LinkOut(msgspec.Struct, frozen=True):
    """A link as plan shows it: bandwidth, latency, its description."""

    bandwidth_bps: float
    latency_s: float
    describe: str


class Figures(msgspec.Struct, kw_only=True, frozen=True):
    """One schedule's predicted figures on one link (``Prediction``); with ``--train-tokens``,
    the whole training's hours, bytes sent and bits exchanged per replica (else absent)."""

    steps: int
    syncs: int
    exposed_ms_per_sync: float
    exposed_data_ms_per_sync: float
    exposed_control_ms_per_sync: float
    exposed_ms_per_step: float
    compute_utilisation: float
    steps_per_s: float
    peak_bandwidth_bps: float
    mean_bandwidth_bps: float
    wall_s: float
    train_hours: float | UnsetType = UNSET
    sent_bytes_per_replica: float | UnsetType = UNSET
    exchanged_bits_per_replica: float | UnsetType = UNSET

    @classmethod
    def of(cls, p: Prediction) -> Figures:
        return cls(
            steps=p.steps,
            syncs=p.syncs,
            exposed_ms_per_sync=p.per_sync_ms(p.exposed_s),
            exposed_data_ms_per_sync=p.per_sync_ms(p.exposed_data_s),
            exposed_control_ms_per_sync=p.per_sync_ms(p.exposed_control_s),
            exposed_ms_per_step=p.exposed_s / p.steps * 1e3 if p.steps else 0.0,
            compute_utilisation=p.utilisation,
            steps_per_s=p.steps_per_s,
            peak_bandwidth_bps=p.peak_bandwidth_bps,
            mean_bandwidth_bps=p.mean_bandwidth_bps,
            wall_s=p.wall_s,
        )


class SmallestFragments(msgspec.Struct, frozen=True):
    """The smallest F (a divisor of H) for which some tau reaches the target, with that tau."""

    fragments: int
    fragment_sync_delay: int


class LinkPlan(msgspec.Struct, kw_only=True, frozen=True):
    """One link: streaming, plain DiLoCo (and data-parallel), and the smallest tau / F that reach the target."""

    link: LinkOut
    streaming: Figures
    plain: Figures
    data_parallel: Figures | UnsetType = UNSET
    smallest_fragment_sync_delay: int | None
    smallest_fragments: SmallestFragments | None

    def figures(self) -> dict[str, Figures]:
        """The schedules planned here, by name (streaming, plain, data_parallel)."""
        out = {"streaming": self.streaming, "plain": self.plain}
        if not isinstance(self.data_parallel, UnsetType):
            out["data_parallel"] = self.data_parallel
        return out


class Bandwidths(msgspec.Struct, kw_only=True, frozen=True):
    """A bandwidth per schedule (None: on no link up to 1 Tbit/s; data-parallel: only with --data-parallel)."""

    streaming: float | None
    plain: float | None
    data_parallel: float | None | UnsetType = UNSET


class HidesFrom(Bandwidths, kw_only=True, frozen=True):
    """From which bandwidth up each schedule reaches the target utilisation, at ``latency_s``."""

    latency_s: float


class RealCollectives(msgspec.Struct, frozen=True):
    """What a plan takes for the backend's own collectives: their pace per round (None: not
    modelled), on how many threads, and how it was measured."""

    ms_per_round: float | None
    threads: int | None
    how: str


class Inputs(msgspec.Struct, kw_only=True, frozen=True):
    """The workload and schedule planned (from flags or a run)."""

    step_ms: float
    fragment_bytes: list[int]
    model_bytes: int
    replicas: int
    fragments: int
    sync_every: int
    fragment_sync_delay: int
    target_util: float
    step_jitter_ms: float
    sync_spread_ms: float
    overlap_slowdown: float
    lighthouse_rpc_ms: float
    replica_bias_ms: list[float]
    stalls: int
    real_collectives: RealCollectives
    data_parallel_bytes: int | None
    train_steps: float | None


class RecoveryOnLink(msgspec.Struct, kw_only=True, frozen=True):
    """One killed group's predicted recovery on one link (``ftrun.plan.recovery``): seconds per
    phase (None: not predicted), how each was predicted, the heal's bytes, the total."""

    link: str
    phases: dict[str, float | None]
    how: dict[str, str]
    heal_bytes: int
    total_s: float | None


class RecoveryPlan(msgspec.Struct, kw_only=True, frozen=True):
    """The predicted recovery of one killed group, per link."""

    heartbeat_timeout_s: float
    state_bytes: int
    measured_from: str | None
    links: list[RecoveryOnLink]


class PlanResult(msgspec.Struct, kw_only=True, frozen=True):
    """``ftrun plan``'s answer (module docstring). ``png``: the plot written (with ``--png``)."""

    source: str
    inputs: Inputs
    configs: list[LinkPlan]
    hides_from_bps: HidesFrom  # utilisation >= target from here up
    data_hidden_from_bps: Bandwidths  # no sync waits for its data from here up
    recovery: RecoveryPlan
    png: str | UnsetType = UNSET
