"""An emulated slow link: a thin wrapper around the real torchft process group, and its control plane.

Where it sits: ``Manager(pg=LinkEmulator(ProcessGroupGloo(...)))``. The Manager only sees the
wrapper (torchft's own ``ProcessGroupWrapper`` extension point), so quorum reconfiguration,
``configure``/``abort``/``errored`` all reach the real group unchanged.

Data plane: every collective torchft issues (allreduce, allreduce_coalesced, alltoall_base,
allgather, allgather_into_tensor_coalesced, reduce_scatter, broadcast, send/recv, barrier —
quantized allreduce uses alltoall + allgather) runs for real, immediately; only its
*completion* is held back, by the cost in ``ftrun.linkcost`` (ring across the R replica groups
of the current quorum, R = the group's size when the collective is issued). The link is one
shared pipe per rank, as a WAN uplink is: the wire time of collectives issued together queues,
so collective k completes at ``(link free at, or its issue time if later) + wire_k + latency
steps_k``, and F fragments of 1/F the size cost the same wire time as one whole model. The
returned Work's ``wait()`` first waits for the real collective (so its errors surface exactly
as before), then sleeps out the rest of the hold; its future completes at the same moment, with
the real result or the real exception. The hold after the real collective shows in traces as
an ``ftrun::link::hold`` span on a helper thread, so inspect-trace counts it as communication.
The real completions of each send's collectives are timed (``begin_send`` / ``send_real_s``, the
event log's ``real_s``): what the backend itself took, on every send, for ``ftrun plan``.

Control plane (``hold_control``): torchft's quorum RPC is held by its round trips on the link
(``ftrun.linkcost.CONTROL_ROUND_TRIPS``), after the real reply, in an
``ftrun::link::control::quorum`` span on the quorum thread; the training thread waits for it
in ``torchft::manager::wait_quorum``, which is where inspect-trace measures it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.profiler import record_function
from torchft.process_group import ProcessGroup

from ftrun.link_spec import Link
from ftrun.torchft_compat import LINK_CONTROL_QUORUM, LINK_HOLD, after_each_quorum
from ftrun.worker.pg_wrapper import KeptWrapper


class HeldWork(dist._Work):
    """Completes no earlier than ``deadline`` (time.monotonic) and no earlier than ``work``;
    ``on_real_done(t)`` is told when the real collective completed (time.monotonic)."""

    def __init__(self, work: dist._Work, deadline: float, on_real_done: Callable[[float], None] | None = None) -> None:
        super().__init__()
        self._work = work
        self._deadline = deadline
        self._on_real = on_real_done
        self._future: torch.futures.Future[Any] = torch.futures.Future()
        work.get_future().add_done_callback(self._on_real_done)

    def _on_real_done(self, fut: torch.futures.Future[Any]) -> None:
        if self._on_real is not None:
            self._on_real(time.monotonic())

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

    def wait(self, timeout: timedelta | None = None) -> bool:
        self._work.wait()  # raises the real collective's error, if any
        self._future.wait()
        return True

    def block_current_stream(self, timeout: timedelta | None = None) -> None:
        self._future.wait()
        self._work.block_current_stream()

    def get_future(self) -> torch.futures.Future[Any]:
        return self._future


def _nbytes(tensors: Any) -> int:
    """Bytes of a tensor, or of a (nested) list of tensors."""
    if isinstance(tensors, torch.Tensor):
        return tensors.numel() * tensors.element_size()
    return sum(_nbytes(t) for t in tensors or [])


class LinkEmulator(KeptWrapper):
    """Wrap ``pg`` so that each collective takes at least its cost on ``link`` (``Link.enqueue``:
    ``ftrun.linkcost``'s rule).

    ``replicas``: R for the cost; None (the default) = the group's size at each collective.
    """

    def __init__(self, pg: ProcessGroup, link: Link, replicas: int | None = None) -> None:
        super().__init__(pg)
        self.link = link
        self.replicas = replicas
        self._free_at = 0.0  # monotonic time at which the emulated link has sent everything queued
        self._lock = threading.Lock()
        # the current send's real collectives (``begin_send`` / ``send_real_s``): its start, the
        # latest real completion of a collective issued since, and which send a collective is of
        self._send_t0: float | None = None
        self._send_real_end: float | None = None
        self._send_no = 0

    def begin_send(self) -> None:
        """A send starts (torchft's ``prepare_sync``): time its collectives' real completions from now."""
        with self._lock:
            self._send_t0, self._send_real_end = time.monotonic(), None
            self._send_no += 1

    def send_real_s(self) -> float | None:
        """Seconds from the last ``begin_send`` to the real completion (before any hold) of the
        last collective issued since: what the backend itself took (None: none completed yet)."""
        with self._lock:
            if self._send_t0 is None or self._send_real_end is None:
                return None
            return self._send_real_end - self._send_t0

    def _real_done(self, send_no: int, t: float) -> None:
        with self._lock:
            if send_no == self._send_no:
                self._send_real_end = t if self._send_real_end is None else max(self._send_real_end, t)

    def _replicas(self) -> int:
        if self.replicas is not None:
            return self.replicas
        try:
            return int(self._inner.size())
        except Exception:  # not configured yet: nothing to cross
            return 1

    def deadline(self, kind: str, nbytes: int, issued: float) -> float:
        """Completion time of a collective issued at ``issued`` on the shared link."""
        with self._lock:
            self._free_at, done = self.link.enqueue(self._free_at, issued, kind, nbytes, self._replicas())
            return done

    def _held(self, kind: str, work: dist._Work, nbytes: int, issued: float) -> dist._Work:
        no = self._send_no
        return HeldWork(work, self.deadline(kind, nbytes, issued), lambda t: self._real_done(no, t))

    def allreduce(self, tensors: list[torch.Tensor], opts: object) -> dist._Work:
        issued = time.monotonic()
        return self._held("allreduce", super().allreduce(tensors, opts), _nbytes(tensors), issued)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any) -> dist._Work:
        issued = time.monotonic()
        return self._held("allreduce", super().allreduce_coalesced(tensors, opts), _nbytes(tensors), issued)

    def alltoall_base(self, output_buffer, input_buffer, output_split_sizes, input_split_sizes, opts) -> dist._Work:  # noqa: ANN001
        issued = time.monotonic()
        work = super().alltoall_base(output_buffer, input_buffer, output_split_sizes, input_split_sizes, opts)
        return self._held("alltoall", work, _nbytes(input_buffer), issued)

    def allgather(self, output_tensors, input_tensor, opts) -> dist._Work:  # noqa: ANN001
        issued = time.monotonic()
        return self._held(
            "allgather", super().allgather(output_tensors, input_tensor, opts), _nbytes(output_tensors), issued
        )

    def allgather_into_tensor_coalesced(self, output_tensors, input_tensors, opts) -> dist._Work:  # noqa: ANN001
        issued = time.monotonic()
        work = super().allgather_into_tensor_coalesced(output_tensors, input_tensors, opts)
        return self._held("allgather", work, _nbytes(output_tensors), issued)

    def reduce_scatter(self, output_tensors, input_tensors, opts) -> dist._Work:  # noqa: ANN001
        issued = time.monotonic()
        return self._held(
            "reduce_scatter",
            super().reduce_scatter(output_tensors, input_tensors, opts),
            _nbytes(input_tensors),
            issued,
        )

    def reduce_scatter_tensor_coalesced(self, output_tensors, input_tensors, opts) -> dist._Work:  # noqa: ANN001
        issued = time.monotonic()
        work = super().reduce_scatter_tensor_coalesced(output_tensors, input_tensors, opts)
        return self._held("reduce_scatter", work, _nbytes(input_tensors), issued)

    def broadcast(self, tensor_list, opts) -> dist._Work:  # noqa: ANN001
        issued = time.monotonic()
        return self._held("broadcast", super().broadcast(tensor_list, opts), _nbytes(tensor_list), issued)

    def send(self, tensors, dst_rank, tag) -> dist._Work:  # noqa: ANN001
        issued = time.monotonic()
        return self._held("send", super().send(tensors, dst_rank, tag), _nbytes(tensors), issued)

    def recv(self, tensors, src_rank, tag) -> dist._Work:  # noqa: ANN001
        issued = time.monotonic()
        return self._held("recv", super().recv(tensors, src_rank, tag), _nbytes(tensors), issued)

    def barrier(self, opts=None) -> dist._Work:  # noqa: ANN001
        issued = time.monotonic()
        return self._held("barrier", super().barrier(opts), 0, issued)

    def getBackendName(self) -> str:
        return f"{self._inner.getBackendName()}+link"


def emulator_of(pg: Any) -> LinkEmulator | None:
    """The ``LinkEmulator`` in a stack of ftrun's process-group wrappers (None: no emulated link)."""
    while pg is not None and not isinstance(pg, LinkEmulator):
        pg = getattr(pg, "_inner", None)
    return pg


def hold_control(manager: Any, link: Link) -> None:
    """Hold ``manager``'s cross-group control RPCs by their round trips on ``link`` (``ftrun.linkcost``).

    Only the quorum crosses the inter-group link (``should_commit`` is a vote inside one
    replica group: 0 round trips), so only the quorum reply is held.
    """
    hold_s = link.control_s("quorum")

    def hold(result: Any) -> None:
        if hold_s > 0:
            with record_function(LINK_CONTROL_QUORUM):
                time.sleep(hold_s)

    after_each_quorum(manager, hold)
