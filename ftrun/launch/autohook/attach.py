"""The launch hook inside a rank, once the script imported torchft (``boot`` calls ``patch``).

It wraps torchft's classes, not the script: every object the script builds is its own, and the
hook only adds what ``ftrun train``'s worker adds to its objects (``ftrun.worker.main``).

* ``Manager.__init__``: the process group the script passes is wrapped in ``SketchPG`` (the
  contribution and SUM of every round), through a ``_ProbeRef`` (the probe is configured only
  once the DiLoCo is known).
* ``DiLoCo.__init__``: the Manager, outer optimizers, ``fragment_sync_delay``, quantize and
  bucketize read back from the object (``torchft_compat.diloco_parts``); the probe attached as
  the worker attaches it (``attach_sums``, ``attach``: the outer optimizers' pre-hook gives the
  average), the event log's ``StepRecorder`` over it (``events/replica{r}_rank{g}.jsonl``).
* ``DiLoCo.__enter__`` (where DiLoCo registers its optimizer hooks): a pre-hook and a post-hook
  on the inner optimizer, registered after DiLoCo's, so the post-hook runs after its send/sync.
  Each inner step is one ``EventRecord``: ``step`` = the inner steps since the DiLoCo was entered
  (1-based: ``ProfilerStep#k`` of a script that steps its profiler at the loop top); ``loss``
  None (ftrun does not see the script's loss). A relaunched incarnation (``restart`` > 0: its
  log already holds records) numbers its own steps from 1, so they are not the run's: ``step``
  None, as the worker's records before it rejoins. No heal fingerprints (the script's heal is
  not observed).
* ``LocalSGD.__init__``: noted in the status (averaging without an outer optimizer: not sketched).
* ``torchft.local_sgd``'s logger raised to INFO (only that logger): its ``Preparing/Syncing
  fragment=N`` lines reach the group log (``ftrun.check.fragment_log``), through the script's own
  logging when it has a handler, else one on stderr.

One ``RankHook`` per process, for the first Manager and the first DiLoCo over it. A hook that
fails is written to the rank's status (``ftrun.launch.autohook.status``) and stops; the script
runs on.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from ftrun import layout
from ftrun.launch.autohook.status import HookStatus, status_file
from ftrun.launch.autohook.where import rank_of
from ftrun.torchft_compat import LOCAL_SGD_LOGGER, diloco_parts, participants, quorum_id, with_manager_pg

_HOOK: RankHook | None = None
_MARK = "_ftrun_launch_hook"  # set on a class whose methods are wrapped (patched once)


class _ProbeRef:
    """Stands for the rank's ``NumericsProbe`` in ``SketchPG``: the probe is replaced by the one
    configured from the DiLoCo (``RankHook.diloco_built``)."""

    def __init__(self, probe: Any) -> None:
        self.probe = probe

    def __getattr__(self, name: str) -> Any:
        return getattr(self.probe, name)


class RankHook:
    """The hook of one rank (module docstring)."""

    def __init__(self, run_dir: Path, replica: int, rank: int) -> None:
        self.run_dir, self.replica, self.rank = run_dir, replica, rank
        self.status = HookStatus(replica, rank)
        self.ref: _ProbeRef | None = None
        self.manager: Any = None
        self.diloco: Any = None
        self.recorder: Any = None
        self.restart = 0
        self.step = 0
        self.manager_step = 0
        self.t_last: float | None = None
        self.handles: list[Any] = []

    def save(self) -> None:
        path = status_file(self.run_dir, self.replica, self.rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{layout.TMP_PREFIX}{path.name}.{os.getpid()}")
        tmp.write_bytes(layout.to_json(self.status).encode())
        os.replace(tmp, path)

    def fail(self, what: str, e: BaseException) -> None:
        """Stop hooking (the script runs on): the status says why, once on stderr too."""
        for h in self.handles:
            h.remove()
        self.handles, self.recorder = [], None
        if self.status.error is None:
            self.status.error = f"{what}: {type(e).__name__}: {e}"
            sys.stderr.write(f"ftrun launch: numerics hook stopped ({self.status.error})\n")
            try:
                self.save()
            except OSError:
                pass

    # --- Manager ---------------------------------------------------------------------------

    def wrap_pg(self, pg: Any) -> Any:
        """The first Manager's process group, in ``SketchPG``; any later one as it is."""
        if self.ref is not None or pg is None or self.status.error:
            return pg
        from ftrun.worker.fault_injection import Corruption
        from ftrun.worker.sketch import NumericsProbe, SketchPG

        self.ref = _ProbeRef(NumericsProbe(Corruption([], self.replica, self.rank, self.run_dir), 0, False, False))
        return SketchPG(pg, self.ref)  # type: ignore[arg-type]

    def manager_built(self, manager: Any) -> None:
        if self.manager is None and self.ref is not None:
            self.manager = manager
            self.status.manager = True
            self.save()

    # --- DiLoCo ----------------------------------------------------------------------------

    def diloco_built(self, diloco: Any) -> None:
        """Attach the probe and the event log to the first DiLoCo over the hooked Manager."""
        if self.diloco is not None or self.ref is None or self.status.error:
            return
        parts = diloco_parts(diloco)
        if parts.manager is not self.manager:
            return
        from ftrun.event_log import read_event_log
        from ftrun.worker.fault_injection import Corruption
        from ftrun.worker.recorder import StepRecorder
        from ftrun.worker.sketch import NumericsProbe

        probe = NumericsProbe(
            Corruption([], self.replica, self.rank, self.run_dir),
            parts.fragment_sync_delay,
            parts.quantize,
            parts.bucketize,
        )
        if probe.path == "quantized":
            from ftrun.worker.sketch_quantized import install

            install(probe)
        probe.attach_sums(diloco)  # innermost, as the worker does: inside the event log's timings
        probe.attach(diloco, parts.manager, parts.outer, None)
        self.ref.probe = probe
        path = layout.event_log(self.run_dir, self.replica, self.rank)
        earlier = read_event_log(path)  # a relaunched incarnation appends to its predecessors' log
        self.restart = max((r.restart for r in earlier), default=-1) + 1
        self.recorder = StepRecorder(path)
        self.recorder.attach_manager(parts.manager)
        self.recorder.attach(diloco)
        self.diloco = diloco
        self.status.diloco = True
        self.save()

    def entered(self, diloco: Any) -> None:
        """The inner optimizer's hooks, after DiLoCo's own (registered by its ``__enter__``)."""
        if diloco is not self.diloco or self.handles or self.recorder is None:
            return
        inner = diloco_parts(diloco).inner
        self.handles = [inner.register_step_pre_hook(self._before), inner.register_step_post_hook(self._after)]

    def exited(self, diloco: Any) -> None:
        if diloco is self.diloco:
            for h in self.handles:
                h.remove()
            self.handles = []

    def _before(self, *_: Any) -> None:
        try:
            self.step += 1
            if self.ref is not None:
                self.ref.probe.step = self.step  # names the rounds' sync step
            self.manager_step = self.manager.current_step()
            if self.t_last is None:
                self.t_last = time.perf_counter()
        except Exception as e:
            self.fail("before an inner step", e)

    def _after(self, *_: Any) -> None:
        if self.recorder is None:
            return
        try:
            now = time.perf_counter()
            m = self.manager
            rounds, _ = self.ref.probe.take() if self.ref is not None else ([], None)
            self.recorder.end_step(
                step=self.step if self.restart == 0 else None,
                manager_step=self.manager_step,
                manager_step_after=m.current_step(),
                participants=participants(m),
                quorum_id=quorum_id(m),
                loss=None,
                step_time_s=now - (self.t_last or now),
                restart=self.restart,
                news=layout.StepNews(numerics=rounds),
            )
            self.t_last = now
        except Exception as e:
            self.fail("after an inner step", e)

    def local_sgd_built(self) -> None:
        if not self.status.local_sgd:
            self.status.local_sgd = True
            self.save()


def current() -> RankHook | None:
    """This process's hook (made on first use); None outside a launched rank."""
    global _HOOK
    if _HOOK is None and (where := rank_of(os.environ)) is not None:
        _HOOK = RankHook(*where)
    return _HOOK


def _guarded(what: str, fn: Any) -> Any:
    """``fn(hook, ...)`` never raises into the script: a failure stops the hook (``RankHook.fail``)."""

    def call(*args: Any) -> None:
        hook = current()
        if hook is None:
            return
        try:
            fn(hook, *args)
        except Exception as e:
            hook.fail(what, e)

    return call


def patch(name: str, module: ModuleType) -> None:
    """Patch torchft module ``name`` (``boot.TARGETS``) once it has run (module docstring)."""
    if name == "torchft.manager":
        _patch_manager(module.Manager)
    elif name == "torchft.local_sgd":
        _patch_diloco(module.DiLoCo)
        if (local_sgd := getattr(module, "LocalSGD", None)) is not None:
            _patch_local_sgd(local_sgd)
        raise_fragment_log()


def _patch_manager(cls: type) -> None:
    if getattr(cls, _MARK, False):
        return
    init = cls.__init__  # type: ignore[misc]
    built = _guarded("Manager", RankHook.manager_built)

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        hook = current()
        if hook is not None:
            try:
                args, kwargs = with_manager_pg(args, kwargs, hook.wrap_pg)
            except Exception as e:
                hook.fail("Manager's process group", e)
        init(self, *args, **kwargs)
        built(self)

    cls.__init__ = __init__  # type: ignore[misc]
    setattr(cls, _MARK, True)


def _patch_diloco(cls: type) -> None:
    if getattr(cls, _MARK, False):
        return
    init, enter, exit_ = cls.__init__, cls.__enter__, cls.__exit__  # type: ignore[misc, attr-defined]
    built, entered, exited = (
        _guarded("DiLoCo", RankHook.diloco_built),
        _guarded("DiLoCo.__enter__", RankHook.entered),
        _guarded("DiLoCo.__exit__", RankHook.exited),
    )

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        built(self)

    @functools.wraps(enter)
    def __enter__(self: Any) -> Any:
        out = enter(self)
        entered(self)
        return out

    @functools.wraps(exit_)
    def __exit__(self: Any, *exc: Any) -> Any:
        exited(self)
        return exit_(self, *exc)

    cls.__init__, cls.__enter__, cls.__exit__ = __init__, __enter__, __exit__  # type: ignore[misc, attr-defined]
    setattr(cls, _MARK, True)


def _patch_local_sgd(cls: type) -> None:
    if getattr(cls, _MARK, False):
        return
    init = cls.__init__  # type: ignore[misc]
    built = _guarded("LocalSGD", lambda hook, _self: hook.local_sgd_built())

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        built(self)

    cls.__init__ = __init__  # type: ignore[misc]
    setattr(cls, _MARK, True)


class _UnlessHandled(logging.StreamHandler):
    """stderr, for a record no other handler on its way to the root takes (the script's own
    logging, when it has any, writes torchft's lines once, as it formats them)."""

    def emit(self, record: logging.LogRecord) -> None:
        logger: logging.Logger | None = logging.getLogger(record.name)
        while logger is not None:
            if any(h is not self for h in logger.handlers):
                return
            logger = logger.parent if logger.propagate else None
        super().emit(record)


def raise_fragment_log() -> None:
    """torchft's ``local_sgd`` logger at INFO at least (only that logger), with a stderr handler
    that writes only what nothing else would (``_UnlessHandled``)."""
    logger = logging.getLogger(LOCAL_SGD_LOGGER)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    if not any(isinstance(h, _UnlessHandled) for h in logger.handlers):
        h = _UnlessHandled(sys.stderr)
        h.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logger.addHandler(h)
