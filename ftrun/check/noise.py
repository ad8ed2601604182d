"""A figure with its measured spread, and how it is said: noise is said, never shown as a fact.

Every difference or ratio a view prints (a cost against a base, a slowdown, a goodput, one run's
throughput against another's) is a ``Measured``: its value and the spread the measurements give
it. ``says`` prints it only when it lies beyond its spread from the figure that means "no
difference" (0 for a difference, 1 for a ratio); within it, "no difference measured". A cost
measured below zero beyond its spread is said as "none" (what was measured was faster), never as a
negative cost; a share that cannot exceed 1 (a goodput, a hidden share) is never printed above it.

The spread of a mean over n per-step samples is ``2 x`` its standard error (sample standard
deviation / sqrt(n)): about a 95% interval for steps that vary independently. Differences combine
their spreads in quadrature; a ratio of means, their relative spreads. Within one run this is the
per-step spread; it says nothing of how much a second run on the same machine would differ (that
needs ``--repeat``: ``repeats_needed``). Torch-free.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

import msgspec

NO_DIFFERENCE = "no difference measured"
Z = 2.0  # spreads are Z standard errors wide
MAX_REPEATS = 20  # beyond this, --repeat is no practical way to tell


class Measured(msgspec.Struct, frozen=True):
    """A measured figure and its spread, in the same unit (None: no spread was measurable, e.g.
    a single sample). ``value`` lies within ``spread`` of the truth, as far as the samples tell."""

    value: float
    spread: float | None = None

    def beyond(self, null: float = 0.0) -> bool:
        """The value differs from ``null`` by more than its spread (False when the spread is not
        measured: an unmeasured spread tells nothing apart)."""
        return self.spread is not None and abs(self.value - null) > self.spread

    def minus(self, other: Measured) -> Measured:
        """The difference, its spread the two spreads in quadrature (None if either is)."""
        return Measured(self.value - other.value, _quad(self.spread, other.spread))

    def plus(self, other: Measured) -> Measured:
        """The sum, its spread the two spreads in quadrature (None if either is)."""
        return Measured(self.value + other.value, _quad(self.spread, other.spread))

    def scaled(self, k: float) -> Measured:
        return Measured(self.value * k, None if self.spread is None else self.spread * abs(k))


def _quad(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else math.hypot(a, b)


def quadrature(spreads: Sequence[float | None]) -> float | None:
    """Independent spreads combined (None if any is not measured)."""
    return None if any(x is None for x in spreads) else math.hypot(*(x for x in spreads if x is not None))


def mean_of(xs: Sequence[float]) -> Measured | None:
    """The mean of per-step samples and its spread (None spread below two samples); None for none."""
    if not xs:
        return None
    m = statistics.fmean(xs)
    return Measured(m, Z * statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else None)


def mean_difference(xs: Sequence[float], ys: Sequence[float]) -> Measured | None:
    """mean(xs) - mean(ys) and its spread; None when either is empty."""
    a, b = mean_of(xs), mean_of(ys)
    return a.minus(b) if a is not None and b is not None else None


def ratio(a: Measured, b: Measured) -> Measured | None:
    """a / b, its spread from the two relative spreads in quadrature; None when b is 0."""
    if not b.value:
        return None
    r = a.value / b.value
    if a.spread is None or b.spread is None or not a.value:
        return Measured(r, None)
    return Measured(r, abs(r) * math.hypot(a.spread / a.value, b.spread / b.value))


def ratio_spread(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """The spread of mean(xs) / mean(ys) (what a median ratio of the same samples is given too:
    the medians' own spread is about as wide). None when either side has fewer than two samples."""
    a, b = mean_of(xs), mean_of(ys)
    got = ratio(a, b) if a is not None and b is not None else None
    return got.spread if got is not None else None


def says(
    m: Measured | None,
    fmt: Callable[[float], str],
    *,
    null: float = 0.0,
    cost: bool = False,
    at_most: float | None = None,
) -> str:
    """How ``m`` is printed: ``fmt(value)`` when it lies beyond its spread from ``null``;
    ``NO_DIFFERENCE`` within it, or when its spread is not measured and ``cost`` is set (a cost
    is claimed only on evidence). ``cost``: a value below ``null`` beyond its spread is said as
    ``none (fmt(-value) less)`` for a difference, ``none (fmt(value))`` for a ratio — never a
    negative cost or a slowdown below 1x.
    ``at_most``: the largest value the figure can take (a share: 1); above it, ``NO_DIFFERENCE``
    ("-" for None)."""
    if m is None:
        return "-"
    if at_most is not None and m.value > at_most:
        return NO_DIFFERENCE
    if m.spread is None:
        return NO_DIFFERENCE if cost and m.value != null else fmt(m.value)
    if not m.beyond(null):
        return NO_DIFFERENCE if m.value != null or m.spread else fmt(m.value)
    if cost and m.value < null:  # measured, but not a cost: say what it was
        return f"none ({fmt(-m.value)} less)" if null == 0 else f"none ({fmt(m.value)})"
    return fmt(m.value)


def repeats_needed(difference: float, spread: float) -> int | None:
    """How many runs per side ``--repeat`` needs to tell ``difference`` from a run-to-run
    ``spread`` (both per step, one unit). Rule: the mean of N runs varies by spread / sqrt(N)
    per side, so the two sides' difference by spread x sqrt(2 / N); it is told apart when
    ``difference`` is at least ``Z`` times that: N = ceil(2 x (Z x spread / difference)^2), at
    least 3 (a min-to-max range needs three to mean anything). None: more than ``MAX_REPEATS``
    (or no difference at all)."""
    if difference == 0:
        return None
    n = max(3, math.ceil(2 * (Z * spread / abs(difference)) ** 2))
    return n if n <= MAX_REPEATS else None


REPEAT_RULE = "N = ceil(8 (s/d)^2), at least 3: d the step-time difference, s the run-to-run spread"
