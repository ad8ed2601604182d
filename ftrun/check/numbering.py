"""Which training step a ``ProfilerStep#k`` holds, proven from the trace, never fitted. Torch-free.

torch's profiler opens ``ProfilerStep#0`` at ``prof.start()`` and the next one at every
``prof.step()``. A loop that calls ``prof.step()`` at its top (torchft's example) leaves
``ProfilerStep#0`` without an optimizer step and puts training step k in ``ProfilerStep#k``:
numbering ``top``. One that calls it at the loop's end puts step 1 in ``ProfilerStep#0``:
numbering ``end`` (k + 1). The two read a whole schedule shifted by one step as the other one's
clean schedule, so the numbering is taken only from evidence:

* ``ftrun::step#S`` spans (ftrun's worker) carry the absolute step: no numbering is needed;
* a captured ``ProfilerStep#0``: an inner ``Optimizer.step#...`` span inside it proves ``end``,
  none proves ``top`` — the latter only where the trace shows inner optimizer steps in its
  other step spans (a trace without optimizer spans proves nothing).

Anything else (every window starts after step 0) proves neither: ``prove`` says so, and the
check refuses to pass a fit (``ftrun.check.analyze``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

import msgspec

from ftrun.trace.spans import Span, TraceSpans

TOP, END = "top", "end"


class NumberingProof(msgspec.Struct, frozen=True):
    """What the traces prove: ``numbering`` ``top``/``end`` (None: not proven), ``absolute``
    (every trace numbers its steps itself), and the evidence in words (the report's note)."""

    numbering: str | None
    evidence: str
    absolute: bool = False
    conflict: bool = False  # two traces prove different numberings


def _inner_steps(t: TraceSpans) -> list[Span]:
    """The trace's optimizer steps outside every ``perform_sync`` (the outer optimizer's)."""
    outer = [s.span for s in t.syncs]
    return [o for o in t.optimizer_steps if not any(p.ts <= o.ts <= p.end for p in outer)]


def _holds(step: Span, starts: list[float]) -> bool:
    i = bisect_left(starts, step.ts)
    return i < len(starts) and starts[i] <= step.end


def of_trace(t: TraceSpans) -> str | None:
    """``top`` / ``end`` as one trace proves it (module docstring), else None."""
    if t.step_source != "profiler":
        return None
    zero = next((s for s in t.steps if s.number == 0), None)
    if zero is None:
        return None
    starts = sorted(o.ts for o in _inner_steps(t))
    if _holds(zero.span, starts):
        return END
    others = [s for s in t.steps if s.number != 0]
    if any(_holds(s.span, starts) for s in others):
        return TOP
    return None


def prove(traces: Sequence[TraceSpans]) -> NumberingProof:
    """The numbering every trace that proves one agrees on (module docstring)."""
    profiled = [t for t in traces if t.step_source == "profiler"]
    if not profiled:
        return NumberingProof(None, "ftrun::step spans number every step", absolute=True)
    found = {t.path.name: n for t in profiled if (n := of_trace(t)) is not None}
    kinds = set(found.values())
    if len(kinds) > 1:
        listed = ", ".join(f"{name}: {n}" for name, n in sorted(found.items()))
        return NumberingProof(None, f"the traces prove different numberings ({listed})", conflict=True)
    if not kinds:
        return NumberingProof(
            None,
            "no trace captured ProfilerStep#0 with its content, so nothing shows whether prof.step() "
            "runs at the loop's top or its end",
        )
    numbering = kinds.pop()
    name = sorted(found)[0]
    what = "holds an optimizer step" if numbering == END else "holds no optimizer step"
    return NumberingProof(
        numbering, f"ProfilerStep#0 {what} in {name}" + (f" and {len(found) - 1} more" if len(found) > 1 else "")
    )
