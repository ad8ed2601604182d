"""The one home of ftrun's rich Console: every command prints through ``console()``.

Contract: text is printed literally. Paths, run names, log lines and messages may contain
``[brackets]`` or ``:colon_words:``; they are never read as rich markup, emoji codes or
highlighted. Colour is added only on purpose, with ``styled``/``line`` (``rich.text.Text``),
never by markup in strings. Torch-free, and cheap to import.
"""

from __future__ import annotations

from typing import Any, Union

from rich.console import Console
from rich.text import Text

Part = Union[str, Text, "tuple[str, str]"]


def console(stderr: bool = False, **kwargs: Any) -> Console:
    """A Console that prints strings as they are (no markup, no emoji codes, no highlighting)."""
    return Console(stderr=stderr, markup=False, emoji=False, highlight=False, **kwargs)


def styled(text: str, style: str) -> Text:
    """``text`` literally, in ``style`` (e.g. "bold red")."""
    return Text(text, style=style)


def line(*parts: Part) -> Text:
    """One line from literal strings, ``Text``s and ``(text, style)`` pairs."""
    return Text.assemble(*parts)
