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


class LiveTable:
    """A live-updating region on a terminal (rich ``Live``, transient); a no-op when disabled
    (``--json``, quiet) or when stdout is not a terminal. Subclasses call ``show(renderable)``."""

    def __init__(self, enabled: bool = True) -> None:
        from rich.live import Live

        self.console = console()
        self.enabled = enabled and self.console.is_terminal
        self._live = Live(console=self.console, refresh_per_second=4, transient=True) if self.enabled else None

    def __enter__(self):
        if self._live is not None:
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)

    def show(self, renderable: Any) -> None:
        if self._live is not None:
            self._live.update(renderable)
