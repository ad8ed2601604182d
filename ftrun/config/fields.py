"""What every part of the run's configuration (``ftrun.config.parts``) shares: a field's
command-line face (``Opt``), how a rule names the field it blames (``At``), the commands and
--help panels fields fall in, and the bounds on values. Torch-free."""

# No ``from __future__ import annotations``: the fields' ``Opt``s are objects at class creation
# (``ftrun.config.options`` reads them), as in ``ftrun.config.parts``.

import re
from collections.abc import Callable

import msgspec

from ftrun.errors import BadInput
from ftrun.model_desc import BUILTIN_MODELS

# a config value by key (``RunConfig.resolved``; a sweep's axis value, or None: not set)
ConfigValue = bool | int | float | str | list[str] | None

MODELS = BUILTIN_MODELS
# the last three: torchft-nightly (ftrun.torchft_compat)
BACKENDS = ("auto", "gloo", "nccl", "baby-nccl", "baby-gloo", "gloo-native", "nccl2", "torchcomms")
# torch's own reconfigurable groups, met on one bootstrap store every replica group reaches
# (``ftrun.launch.native_store``; across hosts: ``--native-store``)
NATIVE_STORE_BACKENDS = ("gloo-native", "nccl2")

# Upper bounds on durations: beyond them torchft's timedelta / time.sleep overflow inside every
# worker, tens of seconds after start; refused here instead.
MAX_WAIT_S = 7 * 86400.0  # --quorum-timeout, --stall-timeout, timeout_s
MAX_STEP_SLEEP_MS = 3600e3  # --step-sleep-ms
MAX_HEARTBEAT_MS = 3600_000  # heartbeat_timeout_ms
MAX_SPARES = 64  # --spares
MAX_REPLICAS = 10_000  # --replicas, --nproc-per-replica; also the replica groups a plan walks (ftrun.plan.bounds)

_PROFILE_RE = re.compile(r"^(\d+):(\d+)$")
_RUN_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

TRAIN, COMPARE, SWEEP = "train", "compare", "sweep"
_ALL = (TRAIN, COMPARE, SWEEP)

# The --help panels the fields fall in, in the order --help shows them: a field's is its part's
# ``PANEL`` unless its ``Opt.panel`` says otherwise (the CLI and docs/cli.md group flags by it).
RUN, SCHEDULE, MODEL_DATA, OPTIMIZER, LINK = "Run", "Schedule", "Model and data", "Optimizer", "Link and compute"
GROUPS, HOSTS, FAULTS, TIMEOUTS = "Replica groups", "Several hosts", "Faults", "Timeouts"
PROFILING, OUTPUT = "Profiling and checks", "Output"
PANELS = (RUN, SCHEDULE, MODEL_DATA, OPTIMIZER, LINK, GROUPS, HOSTS, FAULTS, TIMEOUTS, PROFILING, OUTPUT)


class Opt(msgspec.Struct, frozen=True):
    """A field's command-line face. ``flags``: its flag(s), default ``--key-with-dashes`` (a bool:
    ``--key/--no-key``); ``commands``: which of train, compare, sweep take it as a flag (none: a
    ``--config`` key only); ``on_off``: given as the text on|off; ``panel``: its --help panel
    (empty: its part's ``PANEL``). ``help``: one line."""

    help: str = ""
    flags: tuple[str, ...] = ()
    commands: tuple[str, ...] = _ALL
    metavar: str | None = None
    on_off: bool = False
    panel: str = ""


def _show(value: object) -> str:
    from ftrun.console import show_value  # rich: only when a message is made

    return show_value(value)


class At(msgspec.Struct, frozen=True):
    """How a check names field ``name``: ``where(name)`` (its flag, or ``FILE: key =``);
    ``origin(name)``: "flag", "file", "preset NAME" or "default"; ``known``: whether origins are
    known (False: a ``RunConfig`` made in code, every value counts as given)."""

    where: Callable[[str], str]
    origin: Callable[[str], str]
    known: bool = True

    def bad(self, name: str, value: object, rule: str) -> BadInput:
        return BadInput(f"{self.where(name)} {_show(value)}: {rule}")


def _at_least_one(at: At, part: object, *names: str) -> None:
    for name in names:
        if getattr(part, name) < 1:
            raise at.bad(name, getattr(part, name), "must be at least 1")
