"""Sketch torchft's quantized allreduce (``--quantize``) at its boundary, as ``SketchPG`` does the plain one.

With ``should_quantize`` and triton, torchft's ``Manager.allreduce`` never calls the process
group's ``allreduce``: it calls ``allreduce_quantized([tensor], SUM, pg, stream)`` (fp8 per-row
quantization, alltoall, fp32 sum, re-quantization, allgather; ``ftrun.torchft_compat`` says
where the name lives in each release). ``install()`` wraps that function, never re-implementing
it: when the group it is called with is a ``SketchPG``, the tensor handed to it is the round's
**contribution** (zeros when not participating: the Manager zeroed it before the call) and the
tensor after the returned Work's future completed — torchft's own done-callback has dequantized
the reduced result into it by then, on ``stream``; the Manager's divide by the participants is
chained after ours — is the **SUM**. That order is the one torchft's own divide relies on: callbacks
on the one future of the Work (NCCL's, already complete at launch) run in the order they were
added, and ``SketchPG.sketched`` sketches on ``stream`` (the Manager passes its current stream, which
the dequantize and the divide use too). The average hook of ``ftrun.worker.sketch``
completes the round; ``ftrun.check.numerics`` applies the fp8 e4m3 budget to it (``path``
"quantized").

When the wrapper cannot be installed (a torchft without the function or signature expected)
the rounds stay unsketched, with the reason in each round's ``unsketched`` (the check states it
once) and in the rank's log once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from ftrun.torchft_compat import QuantizedWrap, wrap_quantized_allreduce
from ftrun.worker.sketch import NumericsProbe, SketchPG

log = logging.getLogger(__name__)

QuantizedAllreduce = Callable[[list[torch.Tensor], Any, Any, Any], dist._Work]


def sketching(original: QuantizedAllreduce) -> QuantizedAllreduce:
    """``original`` (torchft's ``allreduce_quantized``), sketched when called with a ``SketchPG``."""

    def allreduce_quantized(
        tensors: list[torch.Tensor], opts: Any, process_group: Any, sync_stream: Any = None
    ) -> dist._Work:
        def issue() -> dist._Work:
            return original(tensors, opts, process_group, sync_stream)

        if not isinstance(process_group, SketchPG) or _reduce_op(opts) != dist.ReduceOp.SUM:
            return issue()  # the Manager passes SUM (it divides itself); anything else: not a round
        return process_group.sketched(tensors, issue, "quantized", sync_stream)

    allreduce_quantized.__wrapped__ = original  # type: ignore[attr-defined]
    return allreduce_quantized


def _reduce_op(opts: Any) -> Any:
    """torchft accepts a ReduceOp or AllreduceOptions (``collectives.allreduce_quantized``)."""
    return opts if isinstance(opts, dist.ReduceOp) else getattr(opts, "reduceOp", None)


def install(probe: NumericsProbe) -> str | None:
    """Wrap torchft's quantized allreduce in this process. Returns why its rounds cannot be sketched
    (also kept on ``probe`` for them and logged once), None when wrapped or when torchft does not take
    its quantized path here (its rounds then run the plain allreduce: ``SketchPG`` sketches them)."""
    try:
        done = wrap_quantized_allreduce(sketching)
    except Exception as e:  # never break training over a hook: the rounds say why
        done = QuantizedWrap(True, False, f"quantized allreduce not sketched: {type(e).__name__}: {e}")
    why = done.why if done.taken and not done.wrapped else None
    probe.quantized_unsketched = why
    if why:
        log.warning("%s; quantized rounds are not checked", why)
    elif not done.taken:
        log.warning("%s: its rounds are sketched and checked as plain ones", done.why)
    return why
