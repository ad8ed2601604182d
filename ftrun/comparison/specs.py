"""What ``ftrun compare`` is given: two presets or config TOML files (train mode) or two run
dirs, each possibly a job's group dirs ``A-group0,A-group1`` (read mode); the settings both
trained runs share, and the run dirs each configuration's repeats leave."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec

from ftrun import layout
from ftrun.config import PRESETS, RunConfig, build, for_command, load_toml
from ftrun.errors import BadInput


def _is_run_dir(p: Path) -> bool:
    return (p / layout.MANIFEST).is_file()


def split_spec(spec: str) -> list[Path]:
    """The run dirs of one read-mode spec: ``DIR`` or ``DIR,DIR,...`` (groups of one job)."""
    return [Path(x) for x in spec.split(",") if x.strip()]


def run_name_of(dirs: list[Path]) -> str:
    """A run's display name: the dir name, or the job's name for several group dirs (``job-group0`` -> ``job``)."""
    if len(dirs) == 1:
        return dirs[0].name
    names = {re.sub(r"-group\d+$", "", d.name) for d in dirs}
    return names.pop() if len(names) == 1 else "+".join(d.name for d in dirs)


def _spec_kind(s: str) -> str:
    p = Path(s)
    if s in PRESETS or (p.suffix == ".toml" and p.is_file()):
        return "train"
    if "," in s:
        dirs = split_spec(s)
        if not dirs:
            raise BadInput(f"compare: {s!r} names no run dir")
        for d in dirs:
            if not d.exists():
                raise BadInput(f"compare: {d} (in {s}) is not an existing run dir")
            if not (d.is_dir() and _is_run_dir(d)):
                raise BadInput(f"compare: {d} (in {s}) is not an ftrun run dir (no {layout.MANIFEST})")
        return "read"
    if p.is_dir() and _is_run_dir(p):
        return "read"
    if p.suffix == ".toml":
        raise BadInput(f"compare: config file {s} not found")
    if p.exists():
        raise BadInput(f"compare: {s} is not an ftrun run dir (no {layout.MANIFEST})")
    raise BadInput(f"compare: {s} is neither a preset ({', '.join(PRESETS)}), a config .toml, nor an existing run dir")


def resolve_specs(specs: list[str]) -> str:
    """'train' when every spec is a preset or TOML file, 'read' when every spec is a run dir
    (or a comma-separated list of the run dirs of one job's replica groups)."""
    if len(specs) != 2:
        raise BadInput(f"compare: expected two runs (presets, config files or run dirs), got {len(specs)}")
    kinds = [_spec_kind(s) for s in specs]
    if kinds[0] != kinds[1]:
        raise BadInput("compare: give two presets/config files (to train) or two run dirs (to read), not a mix")
    return kinds[0]


def config_for(spec: str, opts: Any) -> RunConfig:
    """Run ``spec`` (a preset or a TOML file) with the shared settings ``opts`` (``Overrides``)."""
    if spec in PRESETS:
        return build(preset=spec, overrides=msgspec.structs.replace(opts, mode=spec))
    return build(file_values=load_toml(spec), overrides=opts)


# The training settings both runs of a trained compare share: ``ftrun compare``'s config flags
# (``ftrun.config``, the fields that take ``compare``) but the link and the output root.
SHARED_SETTINGS = tuple(f.key for f in for_command("compare") if f.key not in ("link", "out"))

# per configuration, its repeats: each a run dir (train) or a job's group dirs (read)
RunDirs = list[list[Path | list[Path]]]
