"""``ftrun compare``'s default link: calibrated where it runs (one training step measured with
the run's layout), chosen so that plain DiLoCo's sync is ``SYNC_SHARE`` of H such steps, and what
it costs (report.json's ``link``: ``ftrun.layout.CompareLink``). ``ftrun sweep --preset tau``
takes the same default. Torch-free (the pilot step runs in child processes)."""

from __future__ import annotations

import msgspec

from ftrun import layout
from ftrun.config import RunConfig
from ftrun.launch.calibrate import calibrate
from ftrun.link_spec import SYNC_SHARE, Link, link_for


class LinkCost(msgspec.Struct, frozen=True):
    """What a link chosen for a compute step costs: the step, plain DiLoCo's sync and its share of
    H such steps (report.json's ``link``: ``link_step_s``, ``plain_sync_s``, ``plain_sync_share_of_h``)."""

    step_s: float
    plain_sync_s: float
    share_of_h: float


class Calibration(msgspec.Struct, frozen=True):
    """The pilot step ``default_link`` measured (report.json's ``link``: ``calibrated_step_s``,
    ``calibration``, ``model_bytes``) and what the link chosen from it costs."""

    step_s: float
    how: str
    model_bytes: int
    cost: LinkCost

    def link_info(self) -> layout.CompareLink:
        """report.json's ``link`` of a calibrated compare, before its runs (figures: ``with_cost``)."""
        info = layout.CompareLink(
            chosen=f"default: plain DiLoCo's sync ~ {SYNC_SHARE:g} of H steps of compute",
            calibrated_step_s=self.step_s,
            calibration=self.how,
            model_bytes=self.model_bytes,
        )
        return with_cost(info, self.cost)


def with_cost(info: layout.CompareLink, cost: LinkCost) -> layout.CompareLink:
    """``info`` with what the link costs (``LinkCost``)."""
    return msgspec.structs.replace(
        info, link_step_s=cost.step_s, plain_sync_s=cost.plain_sync_s, plain_sync_share_of_h=cost.share_of_h
    )


def link_from_step(cfg: RunConfig, step_s: float, model_bytes: int) -> tuple[Link, LinkCost]:
    """``link_for`` a compute step of ``step_s``, and what it costs: plain DiLoCo's sync and its
    share of H such steps (the share asked for is ``SYNC_SHARE``)."""
    spec = link_for(step_s, model_bytes, cfg.hosts.replicas, cfg.schedule.sync_every)
    sync_s = spec.plain_sync_s(model_bytes, max(cfg.hosts.replicas, 2))
    return spec, LinkCost(round(step_s, 5), round(sync_s, 4), round(sync_s / (cfg.schedule.sync_every * step_s), 3))


def default_link(cfg: RunConfig, threads: int) -> tuple[Link, Calibration]:
    """Calibrate where it runs: the step measured with the run's layout, then ``link_for``."""
    ranks = cfg.hosts.replicas * cfg.hosts.nproc_per_replica
    m = calibrate(cfg, threads, ranks)
    spec, cost = link_from_step(cfg, m.step_s, m.model_bytes)
    how = f"{ranks} concurrent process(es) x {threads} thread(s), as the run's ranks"
    return spec, Calibration(round(m.step_s, 5), how, m.model_bytes, cost)


def recalibrated(
    cfg: RunConfig, calib: Calibration, run: str, measured_s: float, first: Link, info: layout.CompareLink
) -> tuple[Link, layout.CompareLink, str]:
    """The link chosen again from ``run``'s own measured step (the pilot step ``calib`` was not the
    step it took: load, the profiler), report.json's ``link`` with it (``recalibrated_from``
    naming the ``first`` link), and the line that says so."""
    spec, cost = link_from_step(cfg, measured_s, calib.model_bytes)
    said = (
        f"{run}'s measured step {measured_s * 1e3:.1f} ms is {abs(measured_s / calib.step_s - 1):.0%} "
        f"off the calibrated {calib.step_s * 1e3:.1f} ms: link recalibrated to {spec.description} "
        f"(plain DiLoCo's sync {cost.plain_sync_s * 1e3:.0f} ms = "
        f"{cost.share_of_h:.2f} of H measured steps); training {run} again on it"
    )
    again = layout.Recalibration(run, round(measured_s, 5), first.description)
    return spec, msgspec.structs.replace(with_cost(info, cost), recalibrated_from=again), said
