"""How ``ftrun plan --check`` judges a prediction against a measurement: the relative error, the
tolerance (with a floor for exposed times) and the verdict. Pure."""

from __future__ import annotations

EXPOSED_FLOOR_MS = 5.0  # an exposed-time error this small always passes --check


def error_of(pred: float | None, meas: float | None) -> float | None:
    """Relative error (pred - meas) / meas; None when either is missing or meas is 0."""
    if pred is None or meas is None or meas == 0:
        return None
    return (pred - meas) / meas


def within(key: str, pred: float | None, meas: float | None, tolerance: float) -> bool | None:
    """Exposed times pass within ``tolerance`` or ``EXPOSED_FLOOR_MS``; rates within ``tolerance``."""
    if pred is None or meas is None:
        return None
    if key.startswith("exposed") and abs(pred - meas) <= EXPOSED_FLOOR_MS:
        return True
    return meas != 0 and abs(pred - meas) <= tolerance * abs(meas)


def verdict(failed: list[str], compared: int) -> str:
    """fail: something outside tolerance; not checked: nothing was compared; else pass."""
    return "fail" if failed else "not checked" if not compared else "pass"
