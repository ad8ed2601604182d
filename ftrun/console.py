"""The one home of ftrun's rich Console: every command prints through ``console()``.

Contract: text is printed literally. Paths, run names, log lines and messages may contain
``[brackets]`` or ``:colon_words:``; they are never read as rich markup, emoji codes or
highlighted. Terminal control characters in them (ESC sequences, U+202E, ...) are shown
escaped (``escape_controls``), never sent raw: text from ``print`` elsewhere goes through it too.
Colour is added only on purpose, with ``styled``/``line`` (``rich.text.Text``), never by markup
in strings. Torch-free, and cheap to import.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Union

from rich.console import Console
from rich.segment import Segment
from rich.text import Text

Part = Union[str, Text, "tuple[str, str]"]


def escape_controls(text: str, keep: str = "") -> str:
    """``text`` with every character ``str.isprintable`` refuses (C0/C1 controls such as ESC,
    BEL, CR; bidirectional overrides such as U+202E; other format characters) written as its
    Python escape (``\\x1b``, ``\\u202e``), except those in ``keep``. The one rule for what may
    reach a terminal from a path, a log line or anything else a user or a program wrote."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep else repr(c)[1:-1] for c in text)


def count(n: int, noun: str, plural: str = "") -> str:
    """``1 file``, ``2 files``: ``n`` and ``noun``, plural (``plural``, else ``noun + "s"``) unless n is 1."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def show_value(value: object) -> str:
    """A value for a one-line message: a string holding anything ``escape_controls`` would
    escape is quoted as Python would (``'a\\x1bb'``), so the oddity is visible; else ``str``."""
    return repr(value) if isinstance(value, str) and not value.isprintable() else str(value)


class _Console(Console):
    """Every plain string it renders (``print`` arguments, table cells) goes through
    ``escape_controls`` before layout; line breaks and tabs stay layout. And whatever else
    reaches the output (a ``Text`` appended to by hand): its segments' text too, after layout,
    so that nothing raw gets through whatever built it."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(escape_controls(text, keep="\n\t"), **kwargs)

    def render(self, renderable: Any, options: Any = None) -> Iterable[Segment]:
        for seg in super().render(renderable, options):
            if seg.control or seg.text.isprintable():  # rich's own cursor moves stay controls
                yield seg
            else:
                yield Segment(escape_controls(seg.text, keep="\n\t"), seg.style, seg.control)

    def on_broken_pipe(self) -> None:
        """The reader went away: print nothing more and let the command end with its own code
        (rich's default exits 1, turning a PASS into the FAIL code; ``ftrun.stdio``)."""
        self.quiet = True


def console(stderr: bool = False, **kwargs: Any) -> Console:
    """A Console that prints strings as they are (no markup, no emoji codes, no highlighting)
    and never passes a terminal control character through (``escape_controls``)."""
    return _Console(stderr=stderr, markup=False, emoji=False, highlight=False, **kwargs)


def fits(con: Console, renderable: Any) -> bool:
    """Whether ``renderable`` (a table of ``no_wrap`` cells) fits ``con``'s width unshrunk: the
    test a view makes before choosing its wide layout over a stacked one (never cut a number)."""
    from rich.measure import Measurement

    unbounded = con.options.update_width(100_000)  # its natural width, not one clamped to the console's
    return Measurement.get(con, unbounded, renderable).maximum <= con.width


def styled(text: str, style: str) -> Text:
    """``text`` literally (controls escaped), in ``style`` (e.g. "bold red")."""
    return Text(escape_controls(text, keep="\n\t"), style=style)


def line(*parts: Part) -> Text:
    """One line from literal strings, ``Text``s and ``(text, style)`` pairs (controls escaped)."""

    def clean(p: Part) -> Part:
        if isinstance(p, str):
            return escape_controls(p, keep="\t")
        if isinstance(p, tuple):
            return (escape_controls(p[0], keep="\t"), p[1])
        return p

    return Text.assemble(*(clean(p) for p in parts))


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
