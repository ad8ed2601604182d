"""What every ``ftrun`` command shares (``ftrun.cli`` declares the commands): how its body runs
(``guarded``: bad input, a failed run, a signal or a full disk as one line and an exit code), how
a blank string is refused, its --help (options in panels, help and examples from one text), and
its options generated from one declaration each (``ConfigOptions``: the config's fields for train,
compare and sweep; a declaration Struct for plan, inspect-trace and launch). Never imports torch.
"""

from __future__ import annotations

import errno
import functools
import inspect
import signal
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import typer
import typer.core

from ftrun.errors import BadInput, RunFailed, raise_on_signal

if TYPE_CHECKING:  # typer's own (vendored) click, whose classes its commands are built on
    from typer._click import Context, HelpFormatter


def _fail(message: str, code: int) -> None:
    from ftrun.console import console, line

    console(stderr=True, soft_wrap=True).print(line(("error:", "bold red"), " ", message))
    raise typer.Exit(code)


def refuse_empty(values: dict, positional: dict[str, str] | None = None) -> None:
    """A string option or argument given as '' (or blanks) is bad input, never "the default".
    ``values``: the command's parameters by name; ``positional``: how to name the arguments."""
    for name, v in values.items():
        for x in v if isinstance(v, (list, tuple)) else [v]:
            if isinstance(x, str) and not x.strip():
                shown = (positional or {}).get(name) or "--" + name.replace("_", "-")
                raise BadInput(f"{shown} {x!r}: must not be empty")


def refuses_blank(
    positional: dict[str, str] | None = None, skip: tuple[str, ...] = ()
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A command decorator: before the command runs, a string parameter given blank is one line,
    exit 2 (``refuse_empty``; ``skip``: parameters passed through verbatim, e.g. a script's args).
    Typer reads the command's own signature through ``functools.wraps``."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def command(**values: Any) -> Any:
            guarded(lambda: refuse_empty({k: v for k, v in values.items() if k not in skip}, positional))
            return fn(**values)

        return command

    return wrap


_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def guarded(fn):
    """Run a command body: BadInput -> exit 2, RunFailed -> exit 1 (Interrupted: 130), one line.
    SIGINT/SIGTERM -> exit 130. A disk that fills up, wherever ftrun was writing: one line, exit 1."""
    old = raise_on_signal()
    try:
        return fn()
    except BadInput as e:
        _fail(str(e), e.exit_code)
    except RunFailed as e:
        _fail(str(e), e.exit_code)
    except KeyboardInterrupt as e:
        _fail(f"interrupted{' by ' + str(e) if str(e) else ''}", 130)
    except OSError as e:
        if e.errno not in _NO_SPACE:
            raise  # any other OSError is a bug to see, with its traceback
        _fail(f"cannot write {e.filename or 'an output'}: {e.strerror or e} (free some space and run again)", 1)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


# --help panels of options that are not config fields (a config field's: ``Field.panel``); the
# names match ``ftrun.config.parts.PANELS`` where they mean the same (tests/unit/test_cli_reference.py)
RUN, OUTPUT = "Run", "Output"
COMPARISON, GRID = "Comparison", "Grid"
_FIRST_PANELS = ("Arguments", COMPARISON, GRID)  # then the config's PANELS, any other, then "Options"


def panel_order(panels: list[str]) -> list[str]:
    """``panels`` in the order --help shows them: the command's own first, then the config tree's
    (``ftrun.config.parts.PANELS``), any other as it first appears, "Options" (--help) last."""
    from ftrun.config.parts import PANELS

    known = [*_FIRST_PANELS, *PANELS]
    rank = {name: i for i, name in enumerate(known)}
    return sorted(dict.fromkeys(panels), key=lambda n: (n == "Options", rank.get(n, len(known))))


class PanelCommand(typer.core.TyperCommand):
    """click's plain help (the app's ``rich_markup_mode=None``: text printed literally, wrapped to
    the terminal) with the options in one section per typer ``rich_help_panel``."""

    def format_options(self, ctx: Context, formatter: HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                default = "Arguments" if param.param_type_name == "argument" else "Options"
                sections.setdefault(getattr(param, "rich_help_panel", None) or default, []).append(record)
        for name in panel_order(list(sections)):
            with formatter.section(name):
                formatter.write_dl(sections[name])


def _paragraphs(text: str) -> list[str]:
    return [" ".join(p.split()) for p in text.strip().split("\n\n")]


def help_of(text: str) -> str:
    """A command's help from its text: the paragraphs before the first "Example", each one line
    (click wraps it to the terminal)."""
    return "\n\n".join(p for p in _paragraphs(text) if not p.startswith("Example"))


def examples_of(text: str) -> str:
    """A command's epilog from its text: its "Example" paragraphs."""
    return "\n\n".join(p for p in _paragraphs(text) if p.startswith("Example"))


class ConfigOptions:
    """A command taking options declared once: ``fn``'s parameter ``opts`` stands for them, typer
    sees each in its place, ``fn`` gets them as one typed value. ``source``: a command name
    (train, compare, sweep: the config fields it takes, as one ``Overrides``; ``ftrun.config``:
    each field's flags and help declared on the field) or ``"module:Struct"`` (a declaration,
    ``ftrun.config.declared``: an instance of it). Built when typer first reads the signature, so
    importing the CLI imports no config. ``panels``: show each option in its --help panel."""

    def __init__(self, fn: Callable[..., Any], source: str, panels: bool = True) -> None:
        self.fn, self.source, self.panels, self.__name__, self.__doc__ = fn, source, panels, fn.__name__, fn.__doc__

    def _decl(self) -> type | None:
        if ":" not in self.source:
            return None
        import importlib

        module, name = self.source.split(":")
        return getattr(importlib.import_module(module), name)

    def _options(self) -> list[inspect.Parameter]:
        """A typer option per field (a list or an unset config field: default None)."""
        from ftrun import config

        decl = self._decl()
        out = []
        for f in config.declared(decl) if decl is not None else config.for_command(self.source):
            kind, default = f.kind, f.default
            if decl is None:  # a config field: None = not given (the preset or file decides)
                kind, default = (list[str] if f.kind is list else str if f.opt.on_off else f.kind) | None, None
            elif typing.get_origin(kind) is list:  # repeatable: typer's None, the declaration's []
                kind, default = kind | None, None
            name = f.key.replace("_", "-")
            decls = f.flags if f.kind is not bool or f.opt.on_off or f.opt.flags else (f"--{name}/--no-{name}",)
            option = typer.Option(
                default,
                *decls,
                help=f.opt.help,
                metavar=f.opt.metavar,
                rich_help_panel=f.panel if self.panels else None,
            )
            out.append(inspect.Parameter(f.key, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind))
        return out

    @functools.cached_property
    def _params(self) -> tuple[inspect.Signature, dict[str, object], frozenset[str]]:
        own = inspect.signature(self.fn, eval_str=True)
        params: list[inspect.Parameter] = []
        keys: set[str] = set()
        for p in own.parameters.values():
            generated = self._options() if p.name == "opts" else [p]
            keys |= {g.name for g in generated} if p.name == "opts" else set()
            params += [g.replace(kind=inspect.Parameter.KEYWORD_ONLY) for g in generated]
        return inspect.Signature(params), {p.name: p.annotation for p in params}, frozenset(keys)

    @property
    def __signature__(self) -> inspect.Signature:
        return self._params[0]

    @property
    def __annotations__(self) -> dict[str, object]:  # type: ignore[override]
        return self._params[1]

    def __call__(self, **values: Any) -> Any:
        from ftrun.config import declared_value, overrides

        keys, decl = self._params[2], self._decl()
        given = {k: values.pop(k) for k in list(values) if k in keys}
        # a blank string or a bad on|off: one line, exit 2
        value = (lambda: overrides(given)) if decl is None else (lambda: declared_value(decl, given))
        return self.fn(opts=guarded(value), **values)


def config_options(source: str, panels: bool = True) -> Callable[[Callable[..., Any]], ConfigOptions]:
    """``@config_options("train")``: the command takes the config fields ``train`` takes, as
    ``opts``; ``@config_options("module:Struct")``: the options that Struct declares."""
    return lambda fn: ConfigOptions(fn, source, panels)
