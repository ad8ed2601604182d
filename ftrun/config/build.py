"""Building a ``RunConfig``: presets, the TOML file, the flags, and the checks before anything spawns.

Precedence: preset (``mode``) < ``--config`` TOML < command-line flags. Every key of the TOML
file is a field's key (``ftrun.config.options``; dashes or underscores). The checks are the
parts' own (``RunConfig.check``: torchft's ``DiLoCo`` rules via ``ftrun.schedule.validate``, plus
ftrun's), each one line naming the flag, the value and the rule. Torch-free.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from ftrun.config.options import RawValues, fields, flag, given as given_of
from ftrun.config.parts import At, RunConfig, _show
from ftrun.errors import BadInput
from ftrun.small_files import Missing, read_file

PRESETS: dict[str, dict[str, int]] = {  # preset -> its schedule's fields by key
    # Streaming DiLoCo: 2 fragments, each sent tau=5 steps before it is needed.
    "streaming": {"fragments": 2, "sync_every": 20, "fragment_sync_delay": 5},
    # Plain DiLoCo: the whole model sent and waited for in the same step.
    "baseline": {"fragments": 1, "sync_every": 20, "fragment_sync_delay": 0},
}


class FileValues(RawValues):
    """``load_toml``'s result: key -> value, plus where each came from (``path``; ``spelling``:
    each key as the file spells it, dashes or underscores). Raw: ``build`` checks the types."""

    def __init__(self, values: RawValues, path: str, spelling: dict[str, str]) -> None:
        super().__init__(values)
        self.path, self.spelling = path, spelling

    def where(self, name: str) -> str:
        """``FILE: key =``, the key as the file spells it."""
        return f"{self.path}: {self.spelling.get(name, name)} ="


def toml_parser() -> ModuleType:
    """The TOML parser ``--config`` files are read with: the stdlib's ``tomllib`` (3.11+), else
    ``tomli`` (the same parser, before it joined the stdlib). Imported on call: only a command
    that reads a file pays for it."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    parser: ModuleType = tomllib  # (tomli ships no types)
    return parser


CONFIG_LIMIT = 16 << 20  # bytes of a --config file read at most (one is a few dozen lines)


def load_toml(path: str | Path) -> FileValues:
    """Read a config file; errors name the file and, for syntax errors, the line."""
    tomllib = toml_parser()
    p = Path(path)
    try:
        text = read_file(p, CONFIG_LIMIT, "config file").decode()
    except Missing:
        raise BadInput(f"--config {p}: not found") from None
    except UnicodeDecodeError as e:
        raise BadInput(f"--config {p}: not a UTF-8 text file ({e.reason} at byte {e.start})") from None
    except BadInput as e:  # (not a regular file, over the limit, the OS's reason)
        raise BadInput(f"--config {e}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"--config {p}: invalid TOML: {e}") from None
    known = fields()
    out: RawValues = {}
    keys: dict[str, str] = {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name not in known:
            raise BadInput(f"--config {p}: unknown key {key!r} (known: {', '.join(sorted(known))})")
        if name in out:
            raise BadInput(f"--config {p}: {keys[name]!r} and {key!r} are the same key")
        out[name] = value
        keys[name] = key
    return FileValues(out, str(p), keys)


def build(
    preset: str = "streaming", file_values: RawValues | None = None, overrides: Any = None, **flags: Any
) -> RunConfig:
    """Preset < file < ``overrides`` (an ``Overrides``: a command's flags; ``flags``: the same by
    key, for code and tests; ``None`` = unset). Checks before returning; an error names a flag as
    ``--flag VALUE``, a file's value as ``FILE: key = VALUE``, and a value that came from the
    preset or the default with its origin."""
    file_values = file_values if file_values is not None else {}
    given = given_of(overrides) if overrides is not None else {}
    given.update((k, v) for k, v in flags.items() if v is not None)
    origin = {k: "flag" for k in given}
    for k in file_values:
        origin.setdefault(k, "file")
    where = _namer(origin, file_values)
    for name, value in {**file_values, **given}.items():
        if isinstance(value, str) and not value.strip():
            raise BadInput(f"{where(name)} {value!r}: must not be empty")
    mode = given["mode"] if "mode" in given else file_values.get("mode", preset)
    if not isinstance(mode, str) or mode not in PRESETS:
        raise BadInput(f"{where('mode')} {_show(mode)}: unknown preset (choose from {', '.join(PRESETS)})")
    values: RawValues = dict(PRESETS[mode])
    for k in PRESETS[mode]:
        origin.setdefault(k, f"preset {mode}")
    values.update(file_values)
    values.update(given)
    values["mode"] = mode
    known = fields()
    typed: dict[str, object] = {}  # each checked against its field's type (RunConfig.from_keys)
    for name, value in values.items():
        if name not in known:
            raise BadInput(f"{where(name)}: unknown option")
        expected = known[name].kind
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise BadInput(f"{where(name)} {value!r}: must be {expected.__name__}")
        if expected is float and not math.isfinite(value):
            raise BadInput(f"{where(name)} {value}: must be a finite number")
        typed[name] = value
    cfg = RunConfig.from_keys(**typed)
    validate_config(cfg, where, lambda name: origin.get(name, "default"))
    return cfg


def _namer(origin: dict[str, str], file_values: RawValues) -> Callable[[str], str]:
    """How a message names field ``name``: its flag, or ``FILE: key =`` when the file gave it."""
    file_where = getattr(file_values, "where", lambda name: f"config file: {name} =")

    def where(name: str) -> str:
        return file_where(name) if origin.get(name) == "file" else flag(name)

    return where


def validate_config(
    cfg: RunConfig, where: Callable[[str], str] = flag, origin: Callable[[str], str] | None = None
) -> None:
    """All checks that need no torch (``RunConfig.check``). ``where(name)`` names a field in
    messages; ``origin(name)`` is "flag", "file", "preset NAME" or "default" (None: not known, a
    ``RunConfig`` made in code: every value counts as given, except a default that is a
    sentinel, ``restarts = -1``)."""
    cfg.check(At(where, origin or (lambda name: "flag"), known=origin is not None))
