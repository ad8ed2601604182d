"""One training rank, started by torch's elastic launcher: ``-m ftrun.worker.main SPEC.json``.

Per rank: a torchft ``Manager`` (``use_async_quorum=False``) over a reconfigurable process
group, ``torchft.local_sgd.DiLoCo`` over the model's fragments, AdamW inside, Nesterov SGD
outside (``ftrun.worker.setup``). Ranks of one group share the model through DDP; rank g of
every group forms the cross-group torchft process group.

Each training step S (1-based) is: ``prof.step()`` (so ``ProfilerStep#S`` holds step S, as in
torchft's example), the fault hook, then the step body inside ``ftrun::step#S manager_step=M``;
DiLoCo's optimizer post-hook sends/syncs inside ``inner.step()``. After the step, one event-log
line (``ftrun.worker.recorder``) and TensorBoard scalars (handed to the writer in batches).
"""

from __future__ import annotations

import faulthandler
import logging
import os
import sys
import time

log = logging.getLogger("ftrun.worker")


def main(spec_path: str) -> int:
    """The rank, composed (``ftrun.worker.rank``): boot, start, build, train, finish; a failure
    in training is written to the meta file (with the torchft wait it left) and raised."""
    t_entry = time.time()  # the lifecycle's "start": this rank's Python reached ftrun
    from ftrun.worker import rank as parts

    r = parts.build(parts.start(parts.boot(spec_path), t_entry))
    try:
        parts.train(r)
    except Exception as e:
        r.meta.failed(e, r.where.failed_in)
        log.exception("rank failed (in %s)", r.where.failed_in or "step")
        raise
    parts.finish(r)
    return 0


if __name__ == "__main__":
    faulthandler.enable()  # a fatal signal (a C++ abort in torch or torchft) leaves the Python stacks in the log
    code = main(sys.argv[1])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # torchft's background threads must not keep the rank alive
