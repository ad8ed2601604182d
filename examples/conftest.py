"""ftrun's own suite: the examples train real runs, so here they are e2e tests (``-m "not e2e"``,
the unit set, leaves them out). Not part of the drop-in example."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items) -> None:
    for item in items:  # this hook sees the whole session's items: only ours
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.e2e)
