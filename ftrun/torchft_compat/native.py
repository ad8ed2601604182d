"""torchft's native side, and the host name it advertises: its Rust extension (the lighthouse,
the Manager's server and clients: ``torchft._torchft``, loaded alone by ``native_module``) and the
``socket`` module torchft's modules call ``socket.gethostname()`` on (``advertise_as``).
"""

from __future__ import annotations

import sys
import types
from typing import Any

from ftrun.torchft_compat.sources import torchft_dirs


class _AdvertisingSocket(types.ModuleType):
    """The ``socket`` module, except that ``gethostname()`` returns the host given."""

    def __init__(self, host: str) -> None:
        super().__init__("socket")
        self._host = host

    def gethostname(self) -> str:
        return self._host

    def __getattr__(self, name: str) -> Any:
        import socket

        return getattr(socket, name)


def advertise_as(host: str) -> list[str]:
    """Make torchft hand ``host`` to the other replica groups wherever it would hand them
    ``socket.gethostname()``: 0.2.0 and nightly's checkpoint server (``HTTPTransport.address``,
    the healing source), nightly's process-group rendezvous store (``get_reconfigure_handle``),
    its parameter server. A host name is often unknown to the other hosts or resolves to loopback
    (a stock ``/etc/hosts``). Only torchft's own modules see the change, not this process's
    ``socket``. The Manager's advertised name is its ``hostname`` argument (passed explicitly).
    Returns the modules changed."""
    import socket

    import torchft  # noqa: F401  (loads its modules)
    import torchft.checkpointing.http_transport  # noqa: F401
    import torchft.process_group  # noqa: F401

    proxy = _AdvertisingSocket(host)
    changed = []
    for name, mod in list(sys.modules.items()):
        if (name == "torchft" or name.startswith("torchft.")) and getattr(mod, "socket", None) is socket:
            setattr(mod, "socket", proxy)  # noqa: B010 (a module's attribute mypy cannot know)
            changed.append(name)
    return changed


def lighthouse_main() -> int:
    """torchft's lighthouse entry point (the ``torchft_lighthouse`` binary); parses ``sys.argv``."""
    return native_module().lighthouse_main()


NATIVE = "torchft._torchft"  # torchft's Rust extension: the lighthouse, the Manager's server and clients
_native: list[types.ModuleType] = []


def native_module() -> types.ModuleType:
    """torchft's native extension, loaded from its file without running ``torchft/__init__.py``:
    that imports torch and the Manager (measured: ~4 s of CPU on this project's 2-core machines,
    per lighthouse start), and the extension links no part of torch (``ldd``: libc, libgcc, libm).
    The same module either way; where its file is not found (another layout), the plain import."""
    import importlib
    import importlib.machinery
    import importlib.util
    from pathlib import Path

    if NATIVE in sys.modules:  # torchft imported already: its own
        return sys.modules[NATIVE]
    if _native:  # (a pyo3 extension is initialised once per process)
        return _native[0]
    for loc in torchft_dirs():
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = Path(loc) / f"_torchft{suffix}"
            if path.is_file():
                loader = importlib.machinery.ExtensionFileLoader(NATIVE, str(path))
                mod = importlib.util.module_from_spec(importlib.machinery.ModuleSpec(NATIVE, loader, origin=str(path)))
                loader.exec_module(mod)
                _native.append(mod)  # not in sys.modules: a later ``import torchft`` loads its package as usual
                return mod
    return importlib.import_module(NATIVE)
