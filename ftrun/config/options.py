"""The config tree's fields by key: where each lives, its type, its flags and help (from its
``Opt``, ``ftrun.config.parts``), the flat form, and ``Overrides``, what a command's flags give.
Torch-free; read by the CLI when it builds its options, so it stays cheap.
"""

from __future__ import annotations

import functools
import typing
from typing import Any

import msgspec

from ftrun.config.fields import ConfigValue
from ftrun.config.parts import Opt, RunConfig, _show
from ftrun.errors import BadInput

# Values by key as the user gave them (a ``--config`` TOML file's, a command's parsed flags, the
# API's dict), before ``build`` checks each against its field's type: the input boundary, where a
# value can be anything TOML or a caller holds (the message naming a wrong one is ``build``'s).
RawValues = dict[str, Any]


class Field(msgspec.Struct, frozen=True):
    """One config field: ``key`` (its name everywhere), ``part`` (None: a field of ``RunConfig``
    itself), ``kind`` (int, float, bool, str or list: a list of strings), its default and ``Opt``;
    ``panel``: its --help panel (its ``Opt.panel``, else its part's ``PANEL``)."""

    key: str
    part: str | None
    kind: Any  # int, float, bool, str or list
    default: Any
    opt: Opt
    panel: str = ""

    @property
    def flags(self) -> tuple[str, ...]:
        """The flag(s) that set it (empty: a ``--config`` key only)."""
        if not self.opt.commands:
            return ()
        return self.opt.flags or ("--" + self.key.replace("_", "-"),)


def _fields_of(cls: type, part: str | None) -> list[Field]:
    hints = cls.__annotations__  # objects, not strings (ftrun.config.parts): nothing to evaluate
    out = []
    for f in msgspec.structs.fields(cls):
        hint = hints[f.name]
        if not hasattr(hint, "__metadata__"):  # not Annotated[T, Opt(...)]: a part, its own fields follow
            continue
        base, opt = hint.__origin__, hint.__metadata__[0]
        kind = list if typing.get_origin(base) is list else base
        default = f.default_factory() if f.default is msgspec.NODEFAULT else f.default
        out.append(Field(f.name, part, kind, default, opt, opt.panel or vars(cls)["PANEL"]))  # each part's own
    return out


@functools.cache
def fields() -> dict[str, Field]:
    """Every field by key, in the tree's order (the top level first, then each part's)."""
    out = {f.key: f for f in _fields_of(RunConfig, None)}
    for f in msgspec.structs.fields(RunConfig):
        if f.default is msgspec.NODEFAULT and f.default_factory is not msgspec.NODEFAULT:
            for sub in _fields_of(f.default_factory, f.name):
                assert sub.key not in out, f"config key {sub.key} twice"
                out[sub.key] = sub
    return out


def flag(name: str) -> str:
    """The command-line flag that sets field ``name`` (for a file-only field: its key)."""
    f = fields().get(name)
    if f is not None and not f.flags:
        return f"config key {name}"
    return f.flags[0] if f is not None else "--" + name.replace("_", "-")


def get(cfg: RunConfig, key: str) -> Any:
    """Field ``key`` of ``cfg`` (a key from a TOML file, a sweep axis or a test)."""
    return cfg.get(key)


@functools.cache
def declared(decl: type) -> tuple[Field, ...]:
    """The options a command declares once, as the fields of ``decl`` (a msgspec Struct, one
    field per option, its name the key), in its order. A field ``Annotated[T, Opt(...)]`` is the
    command's own (its help, flags, metavar); a plain field is a config key and takes that
    field's flags, help and panel (``fields()``): one help text per flag, whichever command
    takes it (the schedule's flags: ``ScheduleConfig``'s). ``kind`` is the declared type (say
    ``int | None``), ``default`` the declared default (None: not given)."""
    hints = typing.get_type_hints(decl, include_extras=True)
    out = []
    for f in msgspec.structs.fields(decl):
        hint = hints[f.name]
        default = f.default_factory() if f.default is msgspec.NODEFAULT else f.default
        if hasattr(hint, "__metadata__"):
            opt = hint.__metadata__[0]
            out.append(Field(f.name, None, hint.__origin__, default, opt, opt.panel))
        else:
            shared = fields()[f.name]  # a key no config field has: a typo in the declaration
            out.append(Field(f.name, shared.part, hint, default, shared.opt, shared.panel))
    return tuple(out)


def declared_value(decl: type, given: RawValues) -> Any:
    """A command's parsed options (by key) as one ``decl`` (``declared``): a list not given is
    its default; a blank string is bad input (one line naming the flag)."""
    values = {}
    for f in declared(decl):
        v = given.get(f.key, f.default)
        for x in v if isinstance(v, (list, tuple)) else [v]:
            if isinstance(x, str) and not x.strip():
                raise BadInput(f"{f.flags[0]} {x!r}: must not be empty")
        values[f.key] = f.default if v is None and isinstance(f.default, list) else v
    return decl(**values)


def for_command(command: str) -> list[Field]:
    """The fields ``command`` (train, compare, sweep) takes as flags, in the tree's order."""
    return [f for f in fields().values() if command in f.opt.commands]


@functools.cache
def overrides_type() -> type:
    """``Overrides``: every field by key as ``Optional`` (None: not given, the preset or file decides)."""
    return msgspec.defstruct("Overrides", [(f.key, f.kind | None, None) for f in fields().values()], kw_only=True)


def overrides(given: RawValues) -> Any:
    """A command's parsed flags (by key) as ``Overrides``: lists as lists, on|off text as a bool,
    a blank string is bad input (one line naming the flag)."""
    out = {}
    for key, v in given.items():
        f = fields()[key]
        if v is None:
            continue
        for x in v if isinstance(v, (list, tuple)) else [v]:
            if isinstance(x, str) and not x.strip():
                raise BadInput(f"{flag(key)} {x!r}: must not be empty")
        if f.opt.on_off:
            v = on_off(key, v)
        out[key] = list(v) if isinstance(v, (list, tuple)) else v
    return overrides_type()(**out)


def given(opts: Any) -> dict[str, ConfigValue]:
    """The fields ``opts`` (an ``Overrides``, its values already of their fields' types) sets, by key."""
    values: dict[str, ConfigValue] = msgspec.structs.asdict(opts)
    return {k: v for k, v in values.items() if v is not None}


def on_off(name: str, text: str | None) -> bool | None:
    """A flag's ``on``/``off`` as a bool (None: not given); anything else is one line, exit 2."""
    if text is None:
        return None
    value = {"on": True, "off": False}.get(text.strip().lower())
    if value is None:
        raise BadInput(f"{flag(name)} {_show(text)}: use on or off")
    return value
