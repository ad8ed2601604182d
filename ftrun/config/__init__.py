"""Run configuration: one typed tree (``parts``), its fields by key with their flags and help
(``options``), and how presets, a ``--config`` TOML file and flags build it (``build``). Torch-free.

``FIELD_NAMES``: every key (TOML key = flag without dashes = sweep axis = manifest ``config`` key);
``FILE_ONLY``: the keys no command takes as a flag.
"""

from __future__ import annotations

from ftrun.config.build import PRESETS, FileValues, build, load_toml, validate_config
from ftrun.config.options import (
    Field,
    declared,
    declared_value,
    fields,
    flag,
    for_command,
    get,
    given,
    on_off,
    overrides,
    overrides_type,
)
from ftrun.config.parts import (
    BACKENDS,
    MAX_HEARTBEAT_MS,
    MAX_STEP_SLEEP_MS,
    MAX_WAIT_S,
    MODELS,
    NATIVE_STORE_BACKENDS,
    DataConfig,
    EmulationConfig,
    FaultsConfig,
    HostsConfig,
    ModelConfig,
    OptimizerConfig,
    ProfilingConfig,
    RunConfig,
    ScheduleConfig,
    TimeoutsConfig,
)


def __getattr__(name: str) -> frozenset[str]:
    """``FIELD_NAMES``, ``FILE_ONLY``: computed when first read (reading the fields' ``Opt``s costs
    a few ms; importing the config, as ``ftrun.layout`` does, should not)."""
    if name == "FIELD_NAMES":
        return frozenset(fields())
    if name == "FILE_ONLY":
        return frozenset(k for k, f in fields().items() if not f.flags)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BACKENDS",
    "FIELD_NAMES",
    "FILE_ONLY",
    "MAX_HEARTBEAT_MS",
    "MAX_STEP_SLEEP_MS",
    "MAX_WAIT_S",
    "MODELS",
    "NATIVE_STORE_BACKENDS",
    "PRESETS",
    "DataConfig",
    "EmulationConfig",
    "FaultsConfig",
    "Field",
    "FileValues",
    "HostsConfig",
    "ModelConfig",
    "OptimizerConfig",
    "ProfilingConfig",
    "RunConfig",
    "ScheduleConfig",
    "TimeoutsConfig",
    "build",
    "declared",
    "declared_value",
    "fields",
    "flag",
    "for_command",
    "get",
    "given",
    "load_toml",
    "on_off",
    "overrides",
    "overrides_type",
    "validate_config",
]
