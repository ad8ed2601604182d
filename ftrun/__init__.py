"""ftrun: a training harness with profiling for torchft (streaming) DiLoCo.

Pipeline: config -> launch -> worker -> trace -> check -> report. Importing this package
never imports torch; only ``ftrun.worker`` does, inside the training processes.

The Python API (``ftrun.api``) is re-exported here and imported on first use, so ``import
ftrun`` stays cheap (the pytest plugin loads it into every pytest session): ``check_traces``,
``Schedule``, ``Report``, ``train``, ``Run``, ``compare``, ``BadInput``, ...

Importing it changes no signal disposition: the console script (``ftrun.__main__.main``)
installs the start-up handlers, the commands install what they need.
"""

from ftrun.version import __version__ as __version__  # (a leaf: the layers read it there)

# The API's names, one list: ``ftrun.api.__all__`` is this (kept here, not imported from there, so
# that ``import ftrun`` does not import the API).
_API = (
    "BadInput",
    "Comparison",
    "Event",
    "EventResult",
    "Report",
    "Run",
    "RunFailed",
    "Schedule",
    "ScheduleError",
    "TrainFailed",
    "check_traces",
    "compare",
    "train",
)
__all__ = list(_API)


def __getattr__(name: str):
    if name in _API:
        import importlib

        return getattr(importlib.import_module("ftrun.api"), name)  # sys.modules' own, never a stale attribute
    raise AttributeError(f"module 'ftrun' has no attribute {name!r}")
