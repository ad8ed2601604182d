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
