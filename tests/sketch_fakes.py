"""Stand-ins shared by the sketch tests (no process): what torchft's own ``Manager.allreduce``,
called unbound on a ``FakeManager``, and ``ftrun.worker.sketch``'s probe read of a Manager."""

from __future__ import annotations

import logging

import torchft.manager as tm


class FakeManager:
    """A Manager of ``participants`` replicas over ``pg`` (this one participating or not);
    ``quantize``: its allreduce takes torchft's quantized path."""

    def __init__(self, pg, participants: int, participating: bool = True, quantize: bool = False) -> None:
        self._pg, self._participants, self._participating = pg, participants, participating
        self._quorum_id, self._logger = 7, logging.getLogger("fake-manager")
        self.quantize = quantize
        self.errors: list = []

    def errored(self):
        return None

    def wait_quorum(self) -> None:
        pass

    def num_participants(self) -> int:
        return self._participants

    def is_participating(self) -> bool:
        return self._participating

    def current_step(self) -> int:
        return 3

    def report_error(self, e) -> None:
        self.errors.append(e)

    def wrap_future(self, fut, default, timeout=None):
        return fut

    def allreduce(self, tensor):
        """torchft's own code: the SUM on the group, the divide chained at the wait."""
        if self.quantize:
            return tm.Manager.allreduce(self, tensor, should_quantize=True)
        return tm.Manager.allreduce(self, tensor)


def round_records(sent, synced, participants: int) -> list:
    """The event records of one round at step 10 (manager step 3): its send's and its sync's
    (committed), each carrying the probe's numerics."""
    from ftrun import layout

    base = dict(
        manager_step=3, participants=participants, quorum_id=7, loss=0.0, step_time_s=0.0, restart=0, fingerprint=None
    )
    return [
        layout.EventRecord(
            step=10, manager_step_after=3, sent=0, synced=None, commit=None, t=1.0, numerics=sent, **base
        ),
        layout.EventRecord(
            step=10, manager_step_after=4, sent=None, synced=0, commit=True, t=2.0, numerics=synced, **base
        ),
    ]
