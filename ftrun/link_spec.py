"""The emulated link (``Link``) and ``--link BANDWIDTH[,LATENCY]`` (e.g. ``1gbit,20ms``) read as one. Torch-free.

Bandwidth is in bits per second (``k``/``m``/``g``/``t`` with ``bit``, ``b``, ``bps`` or ``bit/s``,
any case); a capital ``B`` (``10GB``, ``MBps``) or ``byte`` is bytes, refused in one line that
names the bits to give, never read as bits."""

from __future__ import annotations

import functools
import math
import re

import msgspec

from ftrun import linkcost
from ftrun.errors import BadInput

_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
# Exponents are accepted (with either sign) so that ``as_flag()``'s ``%g`` output always parses back.
_NUM = r"\d+(?:\.\d+)?(?:e[+-]?\d+)?"
_RE = re.compile(
    rf"^\s*({_NUM})\s*([kmgt]?)(bit|b|bps|bit/s|B|Bps|B/s|byte|bytes)?\s*(?:,\s*({_NUM})\s*(ms|s|us)?\s*)?$", re.I
)


class Link(msgspec.Struct, frozen=True):
    """An emulated link, the one type from ``--link`` to the reports: per-replica bandwidth
    (bits/s) and one-way latency, its description, and its costs (``ftrun.linkcost``'s formulas).

    Parsed once from text (``parse_link``), then passed as itself: train, launch, the worker's
    spec, the manifest, compare and plan. In JSON (spec, manifest, reports) it is
    ``{bandwidth_bps, latency_s, emulated, describe}``; ``description`` is filled from the
    figures when not given, so a decoded record keeps the text it was written with."""

    bandwidth_bps: float
    latency_s: float = 0.0
    emulated: bool = True  # a link ftrun emulated (every recorded one is)
    description: str = msgspec.field(default="", name="describe")

    def __post_init__(self) -> None:
        if not self.description:  # (a frozen record: set once, here)
            msgspec.structs.force_setattr(self, "description", describe(self.bandwidth_bps, self.latency_s))

    def collective_s(self, kind: str, nbytes: int, replicas: int) -> float:
        """Seconds one collective takes on this link when idle (``ftrun.linkcost.collective_s``)."""
        return linkcost.collective_s(kind, nbytes, replicas, self.bandwidth_bps, self.latency_s)

    def enqueue(self, free_at: float, issued: float, kind: str, nbytes: int, replicas: int) -> tuple[float, float]:
        """One collective on a replica's shared uplink: (link free at, done at) (``ftrun.linkcost.enqueue``)."""
        return linkcost.enqueue(free_at, issued, kind, nbytes, replicas, self.bandwidth_bps, self.latency_s)

    def control_s(self, rpc: str) -> float:
        """Seconds one control RPC spends crossing this link (``ftrun.linkcost.control_s``)."""
        return linkcost.control_s(rpc, self.latency_s)

    def plain_sync_s(self, model_bytes: int, replicas: int) -> float:
        """Plain DiLoCo's link cost per sync (``ftrun.linkcost.plain_sync_s``)."""
        return linkcost.plain_sync_s(model_bytes, replicas, self.bandwidth_bps, self.latency_s)

    def as_flag(self) -> str:
        """The link as ``--link`` (and the config's ``link``) spell it; ``parse_link`` reads it back."""
        return f"{self.bandwidth_bps:g},{self.latency_s * 1e3:g}ms"


def describe(bandwidth_bps: float, latency_s: float) -> str:
    """``1 Gbit/s, 20 ms``: a link's figures as the views and reports name it."""
    for unit, scale in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bandwidth_bps >= scale:
            return f"{bandwidth_bps / scale:g} {unit}, {latency_s * 1e3:g} ms"
    return f"{bandwidth_bps:g} bit/s, {latency_s * 1e3:g} ms"


MIN_BPS, MAX_BPS = 1e3, 1e12  # an emulated link: 1 kbit/s .. 1 Tbit/s
MAX_LATENCY_S = 10.0  # one-way latency: 0 .. 10 s (a geostationary hop is ~0.25 s)


def parse_link(text: str, name: str = "--link") -> Link:
    """``text`` as a ``Link``; ``BadInput`` in one line naming ``name`` (``--link``, or ``FILE: link =``)."""
    got = _read(text or "")
    if isinstance(got, str):
        raise BadInput(f"{name} {text!r}: {got}")
    return got


@functools.lru_cache(maxsize=64)
def _read(text: str) -> Link | str:
    """The link ``text`` spells, or what is wrong with it. Memoised by text: the config's check,
    train and compare parse one ``--link`` once between them (a ``Link`` is frozen)."""
    m = _RE.match(text)
    if not m:
        return "expected BANDWIDTH[,LATENCY], e.g. 1gbit,20ms"
    if m[3] and (m[3][0] == "B" or m[3].lower().startswith("byte")):  # GB, MBps: bytes; b, bit, bps: bits
        scale = f"{m[2].lower()}bit" if m[2] else "bit"
        return (
            f"{m[3]!r} is bytes; give the bandwidth in bits, e.g. {m[1]}{scale} "
            f"({m[1]} {m[2].upper()}B/s is {float(m[1]) * 8:g}{scale})"
        )
    bw = float(m[1]) * _UNITS[m[2].lower()]
    if not (bw > 0 and math.isfinite(bw)):
        return "bandwidth must be a finite number > 0"
    if not MIN_BPS <= bw <= MAX_BPS:
        return f"bandwidth {bw:g} bit/s is outside 1kbit..1tbit (give a unit, e.g. 100mbit)"
    lat = float(m[4] or 0.0)
    unit = (m[5] or "ms").lower()
    lat_s = lat / 1e3 if unit == "ms" else lat / 1e6 if unit == "us" else lat
    if not 0 <= lat_s <= MAX_LATENCY_S:
        return f"latency {lat_s:g} s is outside 0..10s (one-way, e.g. 20ms)"
    return Link(bw, lat_s)


SYNC_SHARE = 0.25  # compare's default link: plain DiLoCo's sync costs this share of H steps of compute


def link_for(step_s: float, model_bytes: int, replicas: int, sync_every: int) -> Link:
    """The link on which plain DiLoCo's sync (quorum + full-model ring allreduce, ``ftrun.linkcost``)
    costs about ``SYNC_SHARE`` of ``sync_every`` steps of ``step_s`` compute: the slow-link regime.

    Latency: 10 ms, or less so that latency terms take at most a quarter of that budget.
    """
    budget = SYNC_SHARE * sync_every * step_s
    lat = min(0.01, budget / (8 * max(replicas, 2)))
    lat = float(f"{lat:.2g}")
    bw = float(f"{linkcost.bandwidth_for(budget, model_bytes, max(replicas, 2), lat):.2g}")
    return Link(bw, lat)
