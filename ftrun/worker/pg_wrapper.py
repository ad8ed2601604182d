"""``KeptWrapper``: torchft's ``ProcessGroupWrapper`` extension point, keeping the wrapped group.

torchft's ``ProcessGroupWrapper`` drops the group it wraps on abort/shutdown. ftrun's wrappers
(``ftrun.worker.link.LinkEmulator``, ``ftrun.worker.sketch.SketchPG``) stack on each other, so
each keeps its inner group and passes abort, shutdown, errors, the backend name and ``parent``
through to it.
"""

from __future__ import annotations

from torchft.process_group import ProcessGroup, ProcessGroupWrapper


class KeptWrapper(ProcessGroupWrapper):
    def __init__(self, pg: ProcessGroup) -> None:
        super().__init__(pg=pg)
        self._inner = pg

    def abort(self, errored: bool = True) -> None:
        self._inner.abort(errored=errored) if isinstance(self._inner, ProcessGroupWrapper) else self._inner.abort()

    def shutdown(self) -> None:
        self._inner.shutdown()

    def errored(self) -> Exception | None:
        return self._inner.errored()

    def getBackendName(self) -> str:
        return self._inner.getBackendName()

    @property
    def parent(self) -> ProcessGroup:
        return self._inner
