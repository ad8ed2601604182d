"""Parse ``--link BANDWIDTH[,LATENCY]`` (e.g. ``1gbit,20ms``). Torch-free.

Bandwidth is in bits per second (``k``/``m``/``g``/``t`` with ``bit``, ``b``, ``bps`` or ``bit/s``,
any case); a capital ``B`` (``10GB``, ``MBps``) or ``byte`` is bytes, refused in one line that
names the bits to give, never read as bits."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ftrun import linkcost
from ftrun.errors import BadInput

_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
# Exponents are accepted (with either sign) so that ``as_flag()``'s ``%g`` output always parses back.
_NUM = r"\d+(?:\.\d+)?(?:e[+-]?\d+)?"
_RE = re.compile(
    rf"^\s*({_NUM})\s*([kmgt]?)(bit|b|bps|bit/s|B|Bps|B/s|byte|bytes)?\s*(?:,\s*({_NUM})\s*(ms|s|us)?\s*)?$", re.I
)


@dataclass(frozen=True)
class LinkSpec:
    """An emulated link: per-replica bandwidth and one-way latency; costs in ``ftrun.linkcost``."""

    bandwidth_bps: float
    latency_s: float = 0.0

    def collective_s(self, kind: str, nbytes: int, replicas: int) -> float:
        """Seconds one collective takes on this link when idle (``ftrun.linkcost.collective_s``)."""
        return linkcost.collective_s(kind, nbytes, replicas, self.bandwidth_bps, self.latency_s)

    def plain_sync_s(self, model_bytes: int, replicas: int) -> float:
        """Plain DiLoCo's link cost per sync (``ftrun.linkcost.plain_sync_s``)."""
        return linkcost.plain_sync_s(model_bytes, replicas, self.bandwidth_bps, self.latency_s)

    def describe(self) -> str:
        bw = self.bandwidth_bps
        for unit, scale in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
            if bw >= scale:
                return f"{bw / scale:g} {unit}, {self.latency_s * 1e3:g} ms"
        return f"{bw:g} bit/s, {self.latency_s * 1e3:g} ms"

    def as_flag(self) -> str:
        return f"{self.bandwidth_bps:g},{self.latency_s * 1e3:g}ms"


MIN_BPS, MAX_BPS = 1e3, 1e12  # an emulated link: 1 kbit/s .. 1 Tbit/s
MAX_LATENCY_S = 10.0  # one-way latency: 0 .. 10 s (a geostationary hop is ~0.25 s)


def parse_link(text: str, name: str = "--link") -> LinkSpec:
    """``name`` is how a message names the value (``--link``, or ``FILE: link =``)."""
    m = _RE.match(text or "")
    if not m:
        raise BadInput(f"{name} {text!r}: expected BANDWIDTH[,LATENCY], e.g. 1gbit,20ms")
    if m[3] and (m[3][0] == "B" or m[3].lower().startswith("byte")):  # GB, MBps: bytes; b, bit, bps: bits
        scale = f"{m[2].lower()}bit" if m[2] else "bit"
        raise BadInput(
            f"{name} {text!r}: {m[3]!r} is bytes; give the bandwidth in bits, e.g. {m[1]}{scale} "
            f"({m[1]} {m[2].upper()}B/s is {float(m[1]) * 8:g}{scale})"
        )
    bw = float(m[1]) * _UNITS[m[2].lower()]
    if not (bw > 0 and math.isfinite(bw)):
        raise BadInput(f"{name} {text!r}: bandwidth must be a finite number > 0")
    if not MIN_BPS <= bw <= MAX_BPS:
        raise BadInput(f"{name} {text!r}: bandwidth {bw:g} bit/s is outside 1kbit..1tbit (give a unit, e.g. 100mbit)")
    lat = float(m[4] or 0.0)
    unit = (m[5] or "ms").lower()
    lat_s = lat / 1e3 if unit == "ms" else lat / 1e6 if unit == "us" else lat
    if not 0 <= lat_s <= MAX_LATENCY_S:
        raise BadInput(f"{name} {text!r}: latency {lat_s:g} s is outside 0..10s (one-way, e.g. 20ms)")
    return LinkSpec(bw, lat_s)


SYNC_SHARE = 0.25  # compare's default link: plain DiLoCo's sync costs this share of H steps of compute


def link_for(step_s: float, model_bytes: int, replicas: int, sync_every: int) -> LinkSpec:
    """The link on which plain DiLoCo's sync (quorum + full-model ring allreduce, ``ftrun.linkcost``)
    costs about ``SYNC_SHARE`` of ``sync_every`` steps of ``step_s`` compute: the slow-link regime.

    Latency: 10 ms, or less so that latency terms take at most a quarter of that budget.
    """
    budget = SYNC_SHARE * sync_every * step_s
    lat = min(0.01, budget / (8 * max(replicas, 2)))
    lat = float(f"{lat:.2g}")
    bw = float(f"{linkcost.bandwidth_for(budget, model_bytes, max(replicas, 2), lat):.2g}")
    return LinkSpec(bw, lat)
