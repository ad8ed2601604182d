"""Observe what torchft's DiLoCo actually did at each step, and write the per-rank event log.

We wrap each ``_StreamingDiLoCoFragment``'s ``prepare_sync`` (the send) and ``perform_sync``
(the sync; returns the commit result) on the instance, so the record is what torchft ran —
not what the schedule predicted. After a committed sync we hash the fragment's new global
parameters (``original_parameters``, identical on every replica whatever alpha is).

Timings for the whole run (traces cover only the profiled window): ``send_s`` = prepare_sync
duration (with the numeric check's sketch of the contribution, which the worker hooks inside
it); ``exposed_s`` = from the start of the sync (this wrapper is the outermost: the numeric
check's wait for the same collectives, ``ftrun::sketch::wait``, and its sketch of their SUMs run
inside it, before torchft's ``perform_sync``) to the end of torchft's ``wait()``: every moment the
training thread waits for the fragment's allreduces, the interval ``ftrun.check.comm`` reads from
the traces as ``exposed``; ``sync_s`` = the whole sync.
Control plane (``attach_manager``): ``quorum_s`` = the step's ``manager.start_quorum`` (with
``use_async_quorum=False`` the training thread waits for the quorum there), ``commit_s`` =
``manager.should_commit``. ``exposed_s`` is the data plane's exposed time, ``quorum_s +
commit_s`` the control plane's.

Cost: one ``os.write`` of the encoded line per step, on an ``O_APPEND`` descriptor (the launcher's
progress display, watchdog and fault accounting read these files live, so lines are not held
back). Not a line-buffered text file: timed right after a training step, as the rank runs it, its
encode-to-str and write cost 0.065-0.067 ms a step here, the bytes written as they are 0.056-0.058 ms
(the same bytes; paired medians of 80).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import torch
from msgspec import UNSET, UnsetType

from ftrun.layout import EventRecord, StepNews, commit_error_text
from ftrun.small_files import last_byte
from ftrun.torchft_compat import diloco_fragments, manager_error


def fingerprint(tensors: dict[str, torch.Tensor]) -> str:
    """32 hex digits: SHA-256 (its first 16 bytes) of the names and bytes of ``tensors``. SHA-256,
    not BLAKE2b: with the CPU's SHA instructions (OpenSSL uses them) it hashes ~2x faster here
    (0.34 vs 0.62 ms for a default-model fragment, once per committed sync); the bytes are hashed
    in place, not copied."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        h.update(name.encode())
        h.update(tensors[name].detach().cpu().contiguous().numpy().data.cast("B"))
    return h.hexdigest()[:32]


_NO_NEWS = StepNews()
T = TypeVar("T")


def _given(value: T | None) -> T | UnsetType:
    """An ``EventRecord`` field's value, or absent (``UNSET``) where there is none: never null."""
    return UNSET if value is None else value


def _rounded(seconds: float | None) -> float | UnsetType:
    """A timing to the microsecond, or absent where the step did not measure it."""
    return UNSET if seconds is None else round(seconds, 6)


class StepRecorder:
    """Collects sends/syncs during a step; ``end_step`` writes one JSON line."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # append: a restarted group continues the log of its previous incarnation, whose last
        # line may have been cut by SIGKILL
        torn = last_byte(path) not in (b"", b"\n")  # (one byte read, not the whole log)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._encoder = msgspec.json.Encoder()  # layout.to_json's JSON, as bytes
        self._line = bytearray()  # each record encoded into it, then written
        if torn:
            os.write(self._fd, b"\n")
        self.sent: int | None = None
        self.synced: int | None = None
        self.commit: bool | None = None
        self.commit_error: str | None = None
        self.fingerprint: str | None = None
        self.timings: dict[str, float] = {}
        self._wait_end: float | None = None
        self.commits = 0
        self.failed_commits = 0
        self._link: Any = None
        self._manager: Any = None

    def attach_link(self, link: Any) -> None:
        """Time each send's real collectives on ``link`` (a ``LinkEmulator``; None: no link)."""
        self._link = link

    def attach(self, diloco: Any) -> None:
        for frag_id, frag in enumerate(diloco_fragments(diloco)):
            frag.prepare_sync = self._wrap_send(frag_id, frag.prepare_sync)
            frag.perform_sync = self._wrap_sync(frag_id, frag, frag.perform_sync)
            frag.wait = self._wrap_wait(frag.wait)

    def attach_manager(self, manager: Any) -> None:
        """Time the control plane: ``start_quorum`` (``quorum_s``) and ``should_commit`` (``commit_s``);
        a failed commit's record carries ``manager``'s error (``commit_error``)."""
        self._manager = manager
        manager.start_quorum = self._timed("quorum_s", manager.start_quorum)
        manager.should_commit = self._timed("commit_s", manager.should_commit)

    def _timed(self, key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.timings[key] = self.timings.get(key, 0.0) + time.perf_counter() - t0

        return timed

    def _wrap_wait(self, fn: Callable[[], None]) -> Callable[[], None]:
        def wait() -> None:
            fn()
            self._wait_end = time.perf_counter()

        return wait

    def _wrap_send(self, frag_id: int, fn: Callable[[], None]) -> Callable[[], None]:
        def prepare_sync() -> None:
            self.sent = frag_id
            if self._link is not None:
                self._link.begin_send()
            t0 = time.perf_counter()
            fn()
            self.timings["send_s"] = time.perf_counter() - t0

        return prepare_sync

    def _wrap_sync(self, frag_id: int, frag: Any, fn: Callable[[], bool]) -> Callable[[], bool]:
        def perform_sync() -> bool:
            self.synced = frag_id
            self._wait_end = None
            t0 = time.perf_counter()
            ok = bool(fn())
            t1 = time.perf_counter()
            self.timings["sync_s"] = t1 - t0
            self.timings["exposed_s"] = (self._wait_end or t1) - t0
            if self._link is not None and (real := self._link.send_real_s()) is not None:
                self.timings["real_s"] = real
            self.commit = ok
            if ok:
                self.commits += 1
                self.fingerprint = fingerprint(frag.original_parameters)
            else:
                self.failed_commits += 1
                self.commit_error = self._error()
            return ok

        return perform_sync

    def _error(self) -> str | None:
        """The Manager's error behind the failed commit, one bounded line (None: none, or no Manager)."""
        err = manager_error(self._manager) if self._manager is not None else None
        return None if err is None else commit_error_text(err)

    def end_step(
        self,
        *,
        step: int | None,
        manager_step: int,
        manager_step_after: int,
        participants: int | None,
        quorum_id: int | None,
        loss: float | None,
        step_time_s: float,
        restart: int,
        news: StepNews | None = None,
    ) -> EventRecord:
        """Write the step's ``layout.EventRecord``: what the loop knows (the step, its loss, the
        Manager's numbers, ``news``) with what this recorder saw (sends, syncs, timings)."""
        n = news or _NO_NEWS
        seconds = self.timings
        rec = EventRecord(
            step=step,
            manager_step=manager_step,
            manager_step_after=manager_step_after,
            participants=participants,
            quorum_id=quorum_id,
            loss=loss,
            step_time_s=step_time_s,
            restart=restart,
            sent=self.sent,
            synced=self.synced,
            commit=self.commit,
            fingerprint=self.fingerprint,
            t=time.time(),
            quorums=n.quorums or UNSET,  # absent, not empty or null
            healed=_given(n.healed),
            rejoined=_given(n.rejoined),
            send_s=_rounded(seconds.get("send_s")),
            sync_s=_rounded(seconds.get("sync_s")),
            exposed_s=_rounded(seconds.get("exposed_s")),
            quorum_s=_rounded(seconds.get("quorum_s")),
            commit_s=_rounded(seconds.get("commit_s")),
            real_s=_rounded(seconds.get("real_s")),
            numerics=n.numerics or UNSET,
            heal_numerics=_given(n.heal_numerics),
            commit_error=_given(self.commit_error),
        )
        self.timings = {}
        self.write(rec)
        self.sent = self.synced = self.commit = self.fingerprint = self.commit_error = None
        return rec

    def write(self, rec: EventRecord) -> None:
        """Append ``rec`` as one line (a regular file: one ``os.write``, unless it writes less)."""
        self._encoder.encode_into(rec, self._line)
        self._line += b"\n"
        line = memoryview(self._line)
        while line:
            line = line[os.write(self._fd, line) :]

    def close(self) -> None:
        os.close(self._fd)
