"""Reading the installed torchft's and torch's files without importing them (importing torchft
imports torch): where their package files are, and a module's source text, bounded."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SOURCE_LIMIT = 4 << 20  # bytes of one source file read (torchft/process_group.py: 80 kB today)


def package_dirs(name: str) -> list[str]:
    """Where the installed package ``name``'s files are, found without importing it ([] when absent)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    return list(spec.submodule_search_locations or []) if spec else []


def torchft_dirs() -> list[str]:
    """Where the installed ``torchft`` package's files are, found without importing it."""
    return package_dirs("torchft")


def package_source(module: str) -> str | None:
    """The first ``SOURCE_LIMIT`` bytes of ``module``'s file (``torchft.manager``,
    ``torch.distributed.distributed_c10d``) as text, None when not found."""
    top, *rest = module.split(".")
    rel = Path(*rest).with_suffix(".py")
    for loc in package_dirs(top):
        try:
            with open(Path(loc) / rel, encoding="utf-8", errors="replace") as f:
                return f.read(SOURCE_LIMIT)
        except OSError:
            continue
    return None


def torchft_source(module: str) -> str | None:
    """``package_source`` of a torchft module (``torchft.manager``)."""
    return package_source(module)
