"""What each process of a launched replica group runs at interpreter start. Torch-free; stdlib only
until torchft is imported.

``ftrun launch`` writes ``RUN_DIR/hook/sitecustomize.py`` (``write_hook_dir``: ``SHIM``, which
calls ``boot``) and puts that directory first on every group's ``PYTHONPATH`` (``pythonpath``:
the caller's entries kept after it). Python imports ``sitecustomize`` at start-up, so every
interpreter of the group runs ``boot``: torchrun's agent, each rank, whatever they start.

``boot`` first installs ``TorchftFinder`` on ``sys.meta_path`` when the process is a launched rank
(``where.rank_of``: ``FTRUN_RUN_DIR``, ``REPLICA_GROUP_ID`` and torchrun's ``RANK`` set): when the script
imports ``torchft.manager`` or ``torchft.local_sgd``, the module runs as usual and then
``ftrun.launch.autohook.attach`` patches its classes (imported only then: a process that never
imports torchft never imports torch through the hook). Then it runs the ``sitecustomize`` the
shim shadows (``chain``: the next one on ``sys.path``), so a site's own customisation still runs.
Nothing here raises into the interpreter's start-up: a failure is one line on stderr and the
script runs unhooked.
"""

from __future__ import annotations

import faulthandler
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from ftrun.launch.autohook.where import rank_of

HOOK_DIR = "hook"  # in the run dir: holds only sitecustomize.py (it is an import path entry)
SHIM = '''"""Written by ftrun launch: the numerics hook for torchft (ftrun.launch.autohook.boot)."""
try:
    from ftrun.launch.autohook.boot import boot
except Exception as e:  # ftrun not importable by this interpreter: the script runs unhooked
    import sys

    sys.stderr.write(f"ftrun launch: numerics hook not installed ({e!r})\\n")
else:
    boot(__file__)
'''
TARGETS = ("torchft.manager", "torchft.local_sgd")  # the modules whose classes the hook wraps


def write_hook_dir(run_dir: Path) -> Path:
    """``RUN_DIR/hook/`` with the shim as its ``sitecustomize.py``; the directory."""
    d = run_dir / HOOK_DIR
    d.mkdir(parents=True, exist_ok=True)
    (d / "sitecustomize.py").write_text(SHIM)
    return d


def pythonpath(hook_dir: Path, existing: str | None) -> str:
    """``PYTHONPATH`` with ``hook_dir`` first and the ``existing`` entries after it, in order."""
    rest = [p for p in (existing or "").split(os.pathsep) if p and Path(p) != hook_dir]
    return os.pathsep.join([str(hook_dir), *rest])


def next_sitecustomize(here: str, path: Sequence[str]) -> importlib.machinery.ModuleSpec | None:
    """The ``sitecustomize`` Python would have imported without the shim in ``here``: the first on
    ``path`` (``sys.path``) outside ``here``."""
    home = os.path.realpath(here)
    rest = [p for p in path if os.path.realpath(p or os.getcwd()) != home]
    return importlib.machinery.PathFinder.find_spec("sitecustomize", rest)


def chain(here: str, path: Sequence[str]) -> ModuleType | None:
    """Run the shadowed ``sitecustomize`` (``next_sitecustomize``), as its own module; None: none."""
    spec = next_sitecustomize(here, path)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _PatchingLoader(importlib.abc.Loader):
    """The real loader, then ``after(module)`` once the module has run."""

    def __init__(self, loader: importlib.abc.Loader, after: Callable[[ModuleType], None]) -> None:
        self._loader, self._after = loader, after

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        try:
            self._after(module)
        except Exception as e:  # the hook never breaks the script's import
            sys.stderr.write(f"ftrun launch: numerics hook failed on {module.__name__} ({e!r})\n")


class TorchftFinder(importlib.abc.MetaPathFinder):
    """For each module of ``patches`` (name -> patch), the spec the other finders give, its
    loader wrapped to call the patch after the module ran."""

    def __init__(self, patches: Mapping[str, Callable[[ModuleType], None]]) -> None:
        self.patches = dict(patches)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        after = self.patches.get(fullname)
        if after is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader, after)
                return spec
        return None


def install(patches: Mapping[str, Callable[[ModuleType], None]]) -> TorchftFinder:
    """``TorchftFinder`` first on ``sys.meta_path`` (once per process); a module of ``patches``
    already imported is patched now."""
    for finder in sys.meta_path:
        if isinstance(finder, TorchftFinder):
            return finder
    finder = TorchftFinder(patches)
    sys.meta_path.insert(0, finder)
    for name, after in patches.items():
        if name in sys.modules:
            after(sys.modules[name])
    return finder


def _patch(name: str) -> Callable[[ModuleType], None]:
    def after(module: ModuleType) -> None:
        from ftrun.launch.autohook import attach  # (imports torch: only once torchft is imported)

        attach.patch(name, module)

    return after


def boot(shim_file: str) -> None:
    """The shim's entry (module docstring): install the import hook in a launched rank, then chain."""
    here = os.path.dirname(os.path.abspath(shim_file))
    try:
        if rank_of(os.environ) is not None:
            install({name: _patch(name) for name in TARGETS})
            if not faulthandler.is_enabled():
                # A rank that dies of a fatal signal (a C++ abort in torch or torchft, a segfault) then
                # leaves every thread's Python stack in its group's log, which says where it died.
                faulthandler.enable()
    except Exception as e:
        sys.stderr.write(f"ftrun launch: numerics hook not installed ({e!r})\n")
    chain(here, sys.path)
