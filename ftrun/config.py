"""Run configuration: presets, TOML file, flag overrides, and validation before anything spawns.

Precedence: preset (``mode``) < ``--config`` TOML < command-line flags. Every key of the TOML
file is a field of ``RunConfig`` (dashes or underscores). Validation applies torchft's
``DiLoCo`` rules (via ``ftrun.schedule.validate``) plus ftrun's own, and fails with one line
naming the flag, the value and the rule. Torch-free.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

from ftrun.console import show_value
from ftrun.errors import BadInput
from ftrun.schedule import Schedule, ScheduleError, validate

PRESETS: dict[str, dict[str, Any]] = {
    # Streaming DiLoCo: 2 fragments, each sent tau=5 steps before it is needed.
    "streaming": {"fragments": 2, "sync_every": 20, "fragment_sync_delay": 5},
    # Plain DiLoCo: the whole model sent and waited for in the same step.
    "baseline": {"fragments": 1, "sync_every": 20, "fragment_sync_delay": 0},
}

MODELS = ("mlp", "transformer")
BACKENDS = ("auto", "gloo", "nccl", "baby-nccl", "baby-gloo", "gloo-native", "torchcomms")  # the last two: torchft-nightly (ftrun.torchft_compat)


@dataclass
class RunConfig:
    """Everything a run needs; ``resolved()`` gives the manifest form."""

    mode: str = "streaming"
    replicas: int = 2
    nproc_per_replica: int = 1
    fragments: int = 2
    sync_every: int = 20
    fragment_sync_delay: int = 5
    fragment_update_alpha: float = 0.0
    outer_lr: float = 0.7
    outer_momentum: float = 0.9
    inner_lr: float = 1e-3
    quantize: bool = False
    bucketize: bool = False
    steps: int = 60
    model: str = "mlp"  # mlp, transformer, or MODULE:FACTORY / hf:NAME (ftrun.model_spec)
    model_args: list = field(default_factory=list)  # KEY=VALUE pairs for a user's factory
    fragment_fqns: str = ""  # user model: explicit fragments "a,b;c" (default: split its largest ModuleList)
    blocks: int = 4
    width: int = 128
    seq_len: int = 64
    batch_size: int = 16
    vocab: int = 256
    data: str = "synthetic"
    backend: str = "auto"
    min_replicas: int = 1
    seed: int = 0
    profile: str = "auto"
    out: str = "profiles"
    run_name: str = ""
    lighthouse: str = ""
    link: str = ""
    step_sleep_ms: float = 0.0
    timeout_s: float = 60.0
    # faults (ftrun.fault_flags) and recovery
    kill: list = field(default_factory=list)
    hang: list = field(default_factory=list)
    fail_commit: list = field(default_factory=list)  # R@S: group R's commit fails at its first sync from step S
    corrupt_allreduce: list = field(default_factory=list)  # R@S:KIND (ftrun.fault_flags.CORRUPT_KINDS)
    # numeric check of every sync (ftrun.worker.sketch, ftrun.check.numerics): sketches in the event logs
    sketches: bool = True
    restarts: int = -1  # -1: 1 when any fault is given, else 0
    stall_timeout_s: float = 120.0
    quorum_timeout_s: float = 60.0
    heartbeat_timeout_ms: int = 2000
    profile_recovery: bool = True  # profile a relaunched group from its start through its first commit
    # several hosts: run only this replica group against an external lighthouse
    replica_group_id: int = -1  # -1: every group, on this host
    job_id: str = ""
    master_addr: str = ""
    master_port: int = 0
    advertise_host: str = ""  # host name other groups reach this group's manager at
    interface: str = ""  # network interface other hosts reach this group through (ftrun.launch.network)

    @property
    def schedule(self) -> Schedule:
        return Schedule(self.fragments, self.sync_every, self.fragment_sync_delay)

    def profile_window(self) -> tuple[int, int] | None:
        """The profiled step window [A, B] (inclusive), or None for ``--profile none``."""
        if self.profile == "none":
            return None
        if self.profile == "auto":
            return self.schedule.auto_window(self.steps)
        a, b = (int(x) for x in self.profile.split(":"))
        return (a, b)

    @property
    def groups_here(self) -> list[int]:
        """The replica groups this host launches."""
        return list(range(self.replicas)) if self.replica_group_id < 0 else [self.replica_group_id]

    def faults(self) -> list:
        from ftrun.fault_flags import parse_faults

        return parse_faults(self.kill, self.hang, self.replicas, self.steps, self.fail_commit, self.schedule.window,
                            corrupts=self.corrupt_allreduce, sync_every=self.sync_every)

    @property
    def max_restarts(self) -> int:
        if self.restarts >= 0:
            return self.restarts
        return 1 if (self.kill or self.hang) else 0

    def resolved(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


FIELD_NAMES = {f.name for f in fields(RunConfig)}


# Flags whose name is not the field's name with dashes (the CLI declares these same strings).
FLAG_NAMES = {"stall_timeout_s": "--stall-timeout", "quorum_timeout_s": "--quorum-timeout", "model_args": "--model-arg"}
# Fields with no flag: set only in a --config file.
FILE_ONLY = frozenset({"vocab", "timeout_s", "heartbeat_timeout_ms"})


def flag(name: str) -> str:
    """The command-line flag that sets field ``name`` (for a file-only field: its key)."""
    if name in FILE_ONLY:
        return f"config key {name}"
    return FLAG_NAMES.get(name, "--" + name.replace("_", "-"))


class FileValues(dict):
    """``load_toml``'s result: field -> value, plus where each came from (``path``, ``keys``)."""

    def __init__(self, values: dict[str, Any], path: str, keys: dict[str, str]) -> None:
        super().__init__(values)
        self.path, self.keys = path, keys

    def where(self, name: str) -> str:
        """``FILE: key =``, the key as the file spells it."""
        return f"{self.path}: {self.keys.get(name, name)} ="


def load_toml(path: str | Path) -> FileValues:
    """Read a config file; errors name the file and, for syntax errors, the line."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise BadInput(f"--config {p}: not found")
    except UnicodeDecodeError as e:
        raise BadInput(f"--config {p}: not a UTF-8 text file ({e.reason} at byte {e.start})")
    except OSError as e:
        raise BadInput(f"--config {p}: cannot read ({e.strerror})")
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"--config {p}: invalid TOML: {e}")
    out: dict[str, Any] = {}
    keys: dict[str, str] = {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name not in FIELD_NAMES:
            raise BadInput(f"--config {p}: unknown key {key!r} (known: {', '.join(sorted(FIELD_NAMES))})")
        if name in out:
            raise BadInput(f"--config {p}: {keys[name]!r} and {key!r} are the same key")
        out[name] = value
        keys[name] = key
    return FileValues(out, str(p), keys)


def build(preset: str = "streaming", file_values: dict[str, Any] | None = None, **flags: Any) -> RunConfig:
    """Preset < file < flags (``None`` flags are unset). Validates before returning; an error
    names a flag as ``--flag VALUE``, a file's value as ``FILE: key = VALUE``, and a value that
    came from the preset or the default with its origin."""
    file_values = file_values if file_values is not None else {}
    given = {k: v for k, v in flags.items() if v is not None}
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
    values: dict[str, Any] = dict(PRESETS[mode])
    for k in PRESETS[mode]:
        origin.setdefault(k, f"preset {mode}")
    values.update(file_values)
    values.update(given)
    values["mode"] = mode
    cfg = RunConfig()
    for name, value in values.items():
        if name not in FIELD_NAMES:
            raise BadInput(f"{where(name)}: unknown option")
        expected = type(getattr(cfg, name))
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise BadInput(f"{where(name)} {value!r}: must be {expected.__name__}")
        if expected is float and not math.isfinite(value):
            raise BadInput(f"{where(name)} {value}: must be a finite number")
        setattr(cfg, name, value)
    validate_config(cfg, where, lambda name: origin.get(name, "default"))
    return cfg


def on_off(name: str, text: str | None) -> bool | None:
    """A flag's ``on``/``off`` as a bool (None: not given); anything else is one line, exit 2."""
    if text is None:
        return None
    value = {"on": True, "off": False}.get(text.strip().lower())
    if value is None:
        raise BadInput(f"{flag(name)} {_show(text)}: use on or off")
    return value


def _namer(origin: dict[str, str], file_values: dict[str, Any]) -> Callable[[str], str]:
    """How a message names field ``name``: its flag, or ``FILE: key =`` when the file gave it."""
    file_where = getattr(file_values, "where", lambda name: f"config file: {name} =")

    def where(name: str) -> str:
        return file_where(name) if origin.get(name) == "file" else flag(name)

    return where


# Upper bounds on durations: beyond them torchft's timedelta / time.sleep overflow inside every
# worker, tens of seconds after start; refused here instead.
MAX_WAIT_S = 7 * 86400.0  # --quorum-timeout, --stall-timeout, timeout_s
MAX_STEP_SLEEP_MS = 3600e3  # --step-sleep-ms
MAX_HEARTBEAT_MS = 3600_000  # heartbeat_timeout_ms

_PROFILE_RE = re.compile(r"^(\d+):(\d+)$")
_RUN_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


_show = show_value  # strings with newlines or control characters are quoted (ftrun.console)


def validate_config(
    cfg: RunConfig, where: Callable[[str], str] = flag, origin: Callable[[str], str] | None = None
) -> None:
    """All checks that need no torch, in the order a user reads the flags. ``where(name)`` names a
    field in messages; ``origin(name)`` is "flag", "file", "preset NAME" or "default" (None: not
    known, a ``RunConfig`` made in code: every value counts as given, except a default that is
    a sentinel, ``restarts = -1``)."""
    given = origin is not None
    origin = origin or (lambda name: "flag")

    def _bad(name: str, value: object, rule: str) -> BadInput:
        return BadInput(f"{where(name)} {_show(value)}: {rule}")

    try:
        validate(cfg.fragments, cfg.sync_every, cfg.fragment_sync_delay, cfg.fragment_update_alpha)
    except ScheduleError as e:
        raise BadInput(_schedule_message(cfg, e, where, origin)) from None
    for name in ("replicas", "nproc_per_replica", "steps", "blocks", "width", "seq_len", "batch_size"):
        if getattr(cfg, name) < 1:
            raise _bad(name, getattr(cfg, name), "must be at least 1")
    from ftrun.model_spec import is_user_model, parse_fragment_fqns, parse_model, parse_model_args

    if is_user_model(cfg.model):  # its blocks are checked when the model is built (ftrun.model_spec.check)
        parse_model(cfg.model)
        if not all(isinstance(x, str) for x in cfg.model_args):
            raise _bad("model_args", cfg.model_args, "must be a list of strings like 'n_layer=4'")
        parse_model_args(cfg.model_args)
        parse_fragment_fqns(cfg.fragment_fqns, cfg.fragments)
    else:
        if cfg.model_args or cfg.fragment_fqns:
            raise _bad("model_args" if cfg.model_args else "fragment_fqns", cfg.model_args or cfg.fragment_fqns,
                       f"only for --model MODULE:FACTORY, not the built-in {cfg.model}")
        if cfg.fragments > cfg.blocks:
            raise _bad("fragments", cfg.fragments, f"must be <= the model's blocks ({cfg.blocks}); each fragment is a group of whole blocks")
    if cfg.backend not in BACKENDS:
        raise _bad("backend", cfg.backend, f"choose from {', '.join(BACKENDS)}")
    if not 1 <= cfg.min_replicas <= cfg.replicas:
        raise _bad("min_replicas", cfg.min_replicas, f"must be between 1 and --replicas ({cfg.replicas})")
    if cfg.inner_lr <= 0 or cfg.outer_lr <= 0:
        raise _bad("inner_lr" if cfg.inner_lr <= 0 else "outer_lr", min(cfg.inner_lr, cfg.outer_lr), "must be > 0")
    if not 0.0 <= cfg.outer_momentum < 1.0:
        raise _bad("outer_momentum", cfg.outer_momentum, "must be in [0, 1)")
    if cfg.vocab < 2 or cfg.vocab > 256 and cfg.data != "synthetic":
        raise _bad("vocab", cfg.vocab, "must be 2..256 for byte-level text data")
    if cfg.data != "synthetic":
        p = Path(cfg.data)
        if not p.is_file():
            raise _bad("data", cfg.data, "not a file (use 'synthetic' or a path to a text file)")
        if p.stat().st_size < cfg.seq_len + 2:
            raise _bad("data", cfg.data, f"file too small for --seq-len {cfg.seq_len}")
    if cfg.profile not in ("auto", "none"):
        m = _PROFILE_RE.fullmatch(cfg.profile)
        if not m:
            raise _bad("profile", cfg.profile, "use auto, none or A:B (profile steps A..B)")
        a, b = int(m[1]), int(m[2])
        if not 1 <= a <= b <= cfg.steps:
            raise _bad("profile", cfg.profile, f"need 1 <= A <= B <= --steps ({cfg.steps})")
    elif cfg.profile == "auto" and cfg.steps < cfg.sync_every:
        raise _bad("steps", cfg.steps, f"profiling needs at least one full cycle of --sync-every {cfg.sync_every} steps (or --profile none)")
    if cfg.run_name and not _RUN_NAME_RE.fullmatch(cfg.run_name):
        raise _bad("run_name", cfg.run_name, "use letters, digits, '.', '_' or '-'")
    if cfg.lighthouse and not re.fullmatch(r"https?://[^/:\s]+(:\d+)?/?", cfg.lighthouse):
        raise _bad("lighthouse", cfg.lighthouse, "expected http://HOST:PORT")
    if cfg.link:
        from ftrun.link_spec import parse_link

        parse_link(cfg.link, name=where("link"))
    for name in ("timeout_s", "stall_timeout_s", "quorum_timeout_s"):
        if not 0 < getattr(cfg, name) <= MAX_WAIT_S:
            raise _bad(name, getattr(cfg, name), f"must be > 0 and at most {MAX_WAIT_S:g} s (7 days)")
    if not 0 <= cfg.step_sleep_ms <= MAX_STEP_SLEEP_MS:
        raise _bad("step_sleep_ms", cfg.step_sleep_ms, f"must be between 0 and {MAX_STEP_SLEEP_MS:g} ms (1 hour)")
    if not 100 <= cfg.heartbeat_timeout_ms <= MAX_HEARTBEAT_MS:
        raise _bad("heartbeat_timeout_ms", cfg.heartbeat_timeout_ms, f"must be between 100 and {MAX_HEARTBEAT_MS} ms")
    if cfg.restarts < 0 and (cfg.restarts != -1 or given and origin("restarts") in ("flag", "file")):
        raise _bad("restarts", cfg.restarts, "must be >= 0")  # -1 is only the default's "1 with a fault, else 0"
    for name in ("kill", "hang", "fail_commit", "corrupt_allreduce"):
        if not all(isinstance(x, str) for x in getattr(cfg, name)):
            raise _bad(name, getattr(cfg, name), "must be a list of strings like '1@25'")
    cfg.faults()
    if cfg.corrupt_allreduce and not cfg.sketches:
        raise _bad("corrupt_allreduce", cfg.corrupt_allreduce[0], "needs the sketches it is checked by (drop --no-sketches)")
    if cfg.replica_group_id != -1:
        if not 0 <= cfg.replica_group_id < cfg.replicas:
            raise _bad("replica_group_id", cfg.replica_group_id, f"must be in 0..--num-replica-groups-1 ({cfg.replicas - 1})")
        if not cfg.lighthouse:
            raise _bad("replica_group_id", cfg.replica_group_id, "needs --lighthouse http://HOST:PORT (start one with `ftrun lighthouse`)")
    if cfg.master_port and not 1 <= cfg.master_port <= 65535:
        raise _bad("master_port", cfg.master_port, "must be a TCP port")
    if cfg.job_id and not _RUN_NAME_RE.fullmatch(cfg.job_id):
        raise _bad("job_id", cfg.job_id, "use letters, digits, '.', '_' or '-'")
    if not 0 <= cfg.seed < 2**32:
        raise _bad("seed", cfg.seed, "must be between 0 and 2**32-1")
    out = Path(cfg.out)
    probe = out if out.exists() else next((p for p in out.parents if p.exists()), Path("."))
    if not probe.is_dir() or not os.access(probe, os.W_OK):
        raise _bad("out", cfg.out, "output directory is not writable")


_SCHEDULE = ("fragments", "sync_every", "fragment_sync_delay")


def _schedule_message(cfg: RunConfig, e: ScheduleError, where: Callable[[str], str], origin: Callable[[str], str]) -> str:
    """One line for a schedule torchft would reject. A rule between several values is blamed
    on one the user gave (not on a preset's value), and names the others with their origin."""
    f, h, tau = cfg.fragments, cfg.sync_every, cfg.fragment_sync_delay
    if e.field == "sync_every" and h >= 1:
        involved = ["sync_every", "fragments"]
        rule = f"torchft needs H >= F and H a multiple of F, here H={h}, F={f}"
    elif e.field == "fragment_sync_delay" and tau >= 0:
        involved = ["fragment_sync_delay", "sync_every", "fragments"]
        rule = (f"torchft needs tau < H/F, here tau={tau} >= {h}/{f} = {h // f} "
                f"(a fragment must sync before it is sent again)")
    else:
        return f"{where(e.field)} {_show(e.value)}: {e.rule}"
    given = [k for k in involved if origin(k) in ("flag", "file")]
    lead = e.field if e.field in given or not given else given[0]
    letter = {"fragments": "F", "sync_every": "H", "fragment_sync_delay": "tau"}
    others = []
    for k in involved:
        if k != lead:
            src = origin(k)
            others.append(f"{letter[k]} is {where(k)} {getattr(cfg, k)}" + ("" if src in ("flag", "file") else f" ({src})"))
    return f"{where(lead)} {getattr(cfg, lead)}: {rule}; {', '.join(others)}"
