"""An emulated slow link: a thin wrapper around the real torchft process group.

Where it sits: ``Manager(pg=LinkEmulator(ProcessGroupGloo(...)))``. The Manager only sees the
wrapper (torchft's own ``ProcessGroupWrapper`` extension point), so quorum reconfiguration,
``configure``/``abort``/``errored`` all reach the real group unchanged.

What it does: every ``allreduce`` runs for real, immediately; only its *completion* is held
back. The link is one shared pipe per rank, as a WAN uplink is: collectives issued together
queue on it, so collective k completes at ``latency + (link free at, or its issue time if
later) + bytes_k * 8 / bandwidth`` — never earlier than ``issue + latency + bytes/bandwidth``,
and F fragments of 1/F the size cost the same wire time as one whole model. The
returned Work's ``wait()`` first waits for the real collective (so its errors surface exactly
as before), then sleeps out the rest of the hold; its future completes at the same moment, with
the real result or the real exception. The hold after the real collective shows in traces as
an ``ftrun::link::hold`` span on a helper thread, so inspect-trace counts it as communication.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any, List, Optional

import torch
import torch.distributed as dist
from torch.profiler import record_function
from torchft.process_group import ProcessGroup, ProcessGroupWrapper

from ftrun.labels import LINK_HOLD


class HeldWork(dist._Work):
    """Completes no earlier than ``deadline`` (time.monotonic) and no earlier than ``work``."""

    def __init__(self, work: dist._Work, deadline: float) -> None:
        super().__init__()
        self._work = work
        self._deadline = deadline
        self._future: torch.futures.Future[Any] = torch.futures.Future()
        work.get_future().add_done_callback(self._on_real_done)

    def _on_real_done(self, fut: torch.futures.Future[Any]) -> None:
        def finish() -> None:
            remaining = self._deadline - time.monotonic()
            if remaining > 0:
                with record_function(LINK_HOLD):
                    time.sleep(remaining)
            try:
                value = fut.value()
            except Exception as e:  # the real collective failed: pass its error on
                self._future.set_exception(e)
            else:
                self._future.set_result(value)

        if self._deadline - time.monotonic() > 0:
            threading.Thread(target=finish, name="ftrun-link-hold", daemon=True).start()
        else:
            finish()

    def wait(self, timeout: Optional[timedelta] = None) -> bool:
        self._work.wait()  # raises the real collective's error, if any
        self._future.wait()
        return True

    def block_current_stream(self, timeout: Optional[timedelta] = None) -> None:
        self._future.wait()
        self._work.block_current_stream()

    def get_future(self) -> torch.futures.Future[Any]:
        return self._future


def _nbytes(tensors: List[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class LinkEmulator(ProcessGroupWrapper):
    """Wrap ``pg`` so that each allreduce takes at least ``latency_s + bytes*8/bandwidth_bps``."""

    def __init__(self, pg: ProcessGroup, bandwidth_bps: float, latency_s: float = 0.0) -> None:
        super().__init__(pg=pg)
        self._inner = pg
        self.bandwidth_bps = float(bandwidth_bps)
        self.latency_s = float(latency_s)
        self._free_at = 0.0  # monotonic time at which the emulated link has sent everything queued
        self._lock = threading.Lock()

    def deadline(self, nbytes: int, issued: float) -> float:
        """Completion time of a transfer of ``nbytes`` issued at ``issued`` on the shared link."""
        with self._lock:
            self._free_at = max(self._free_at, issued) + nbytes * 8.0 / self.bandwidth_bps
            return self._free_at + self.latency_s

    def _held(self, work: dist._Work, tensors: List[torch.Tensor], issued: float) -> dist._Work:
        return HeldWork(work, self.deadline(_nbytes(tensors), issued))

    def allreduce(self, tensors: List[torch.Tensor], opts: object) -> dist._Work:
        issued = time.monotonic()
        return self._held(super().allreduce(tensors, opts), tensors, issued)

    def allreduce_coalesced(self, tensors: List[torch.Tensor], opts: Any) -> dist._Work:
        issued = time.monotonic()
        return self._held(super().allreduce_coalesced(tensors, opts), tensors, issued)

    # torchft's ProcessGroupWrapper drops a wrapped group on abort/shutdown; keep ours.
    def abort(self, errored: bool = True) -> None:
        self._inner.abort(errored=errored) if isinstance(self._inner, ProcessGroupWrapper) else self._inner.abort()

    def shutdown(self) -> None:
        self._inner.shutdown()

    def errored(self) -> Optional[Exception]:
        return self._inner.errored()

    def getBackendName(self) -> str:
        return f"{self._inner.getBackendName()}+link"

    @property
    def parent(self) -> ProcessGroup:
        return self._inner
