"""A rank's lifecycle log: start, manager up, every process-group configure and checkpoint
transfer, timed where torchft runs them (``events/lifecycle/replica{r}_rank{g}.jsonl``, one
``layout.LifecycleEvent`` per line). The recovery breakdown (``ftrun.check.recovery``) reads it.

Nothing of torchft is re-implemented: the process group the Manager configures is ours
(``ftrun.worker.setup.make_process_group``), so its ``configure`` is wrapped on the instance;
the checkpoint transport is torchft's own ``HTTPTransport`` (the one the Manager would build),
handed to the Manager inside ``TimedTransport``, which times and sizes each send/recv and
delegates everything else. Configure and transfers run on torchft's quorum thread, hence the lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchft.checkpointing import CheckpointTransport

from ftrun.layout import LifecycleEvent, to_json
from ftrun.small_files import last_byte
from ftrun.torchft_compat import configure_method, configure_quorum_id


def state_bytes(obj: Any) -> int:
    """Tensor bytes in a (nested) state dict: what a checkpoint transfer carries, framing excluded."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(state_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(state_bytes(v) for v in obj)
    return 0


class Lifecycle:
    """Appends ``LifecycleEvent`` lines for one incarnation of one rank (thread-safe)."""

    def __init__(self, path: Path, incarnation: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        torn = last_byte(path) not in (b"", b"\n")  # (one byte read, not the whole log)
        self._file = path.open("a", buffering=1)  # line-buffered: a SIGKILL loses at most one line
        if torn:
            self._file.write("\n")
        self._lock = threading.Lock()
        self.incarnation = incarnation

    def mark(self, event: str, t_start: float, t: float | None = None, **fields: Any) -> None:
        rec = LifecycleEvent(
            event=event, incarnation=self.incarnation, t_start=t_start, t=t_start if t is None else t, **fields
        )
        with self._lock:
            self._file.write(to_json(rec) + "\n")

    def time_configure(self, pg: Any) -> None:
        """Wrap the call torchft makes on ``pg`` at every quorum change (``configure`` on 0.2.x,
        ``reconfigure`` on the nightly: ``torchft_compat.configure_method``) to log its duration.
        The nightly's call carries no quorum id (its options hold the peers' handles)."""
        name = configure_method(pg)
        inner = getattr(pg, name)

        def configure(*args: Any, **kwargs: Any) -> Any:
            t0 = time.time()
            try:
                return inner(*args, **kwargs)
            finally:
                self.mark(
                    "configure",
                    t0,
                    time.time(),
                    quorum_id=configure_quorum_id(args, kwargs) if name == "configure" else None,
                )

        setattr(pg, name, configure)

    def close(self) -> None:
        with self._lock:
            self._file.close()


class TimedTransport(CheckpointTransport):
    """torchft's checkpoint transport with each send/recv logged (bytes, times, peers).

    ``cost``: ``cost(nbytes) -> seconds`` a transfer of that size takes on the emulated link
    (``--link``; ``ftrun.linkcost``): the received checkpoint is held until that long after the
    fetch began, so a heal crosses the link like every collective; None = no link."""

    def __init__(self, inner: CheckpointTransport, life: Lifecycle, cost: Callable[[int], float] | None = None) -> None:
        self._inner = inner
        self._life = life
        self._cost = cost

    def metadata(self) -> str:
        return self._inner.metadata()

    def send_checkpoint(self, dst_ranks: list[int], step: int, state_dict: Any, timeout: Any) -> None:
        t0 = time.time()
        try:
            return self._inner.send_checkpoint(dst_ranks, step, state_dict, timeout)
        finally:
            self._life.mark(
                "send_checkpoint", t0, time.time(), bytes=state_bytes(state_dict), step=step, peers=list(dst_ranks)
            )

    def recv_checkpoint(self, src_rank: int, metadata: str, step: int, timeout: Any) -> Any:
        t0 = time.time()
        sd = self._inner.recv_checkpoint(src_rank, metadata, step, timeout)
        nbytes = state_bytes(sd)
        hold_s = None
        if self._cost is not None:
            hold_s = max(0.0, t0 + self._cost(nbytes) - time.time())
            _held(hold_s)
        self._life.mark("recv_checkpoint", t0, time.time(), bytes=nbytes, step=step, peers=[src_rank], hold_s=hold_s)
        return sd

    def disallow_checkpoint(self) -> None:
        self._inner.disallow_checkpoint()

    def shutdown(self, wait: bool = True) -> None:
        self._inner.shutdown(wait)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _held(seconds: float) -> None:
    """The emulated link's hold of a heal transfer, labelled like the link's other spans."""
    from torch.profiler import record_function

    from ftrun.torchft_compat import LINK_HEAL

    with record_function(LINK_HEAL):
        time.sleep(seconds)
