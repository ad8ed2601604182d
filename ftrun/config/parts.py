"""The run's configuration as one typed tree: ``RunConfig`` and its parts, each a msgspec Struct
that checks its own rules. Torch-free and cheap to import (the CLI builds its options from it).

Every field's name is its key everywhere: the ``--config`` TOML key, the flag (dashes; a few
aliases, ``Opt.flags``), the sweep axis and the manifest's ``config`` entry; its ``Opt`` is its
command-line face (help, flags, which commands take it). A field's home in code is its part:
``cfg.schedule.fragment_sync_delay``. A part's ``check(cfg, at)`` raises one ``BadInput`` line
naming the field as ``at.where`` says (``--flag VALUE`` or ``FILE: key = VALUE``); rules that
need two parts live with the part that owns the value blamed.
"""

# No ``from __future__ import annotations``: the fields' ``Opt``s are objects at class creation,
# so reading them (``ftrun.config.options``) evaluates no annotation strings (the CLI does it at every start).

import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, ClassVar

import msgspec

from ftrun.config.faults import FaultsConfig as FaultsConfig
from ftrun.config.fields import (
    _ALL as _ALL,
    _PROFILE_RE as _PROFILE_RE,
    _RUN_NAME_RE as _RUN_NAME_RE,
    BACKENDS as BACKENDS,
    COMPARE as COMPARE,
    FAULTS as FAULTS,
    GROUPS as GROUPS,
    HOSTS as HOSTS,
    LINK as LINK,
    MAX_HEARTBEAT_MS as MAX_HEARTBEAT_MS,
    MAX_REPLICAS as MAX_REPLICAS,
    MAX_SPARES as MAX_SPARES,
    MAX_STEP_SLEEP_MS as MAX_STEP_SLEEP_MS,
    MAX_WAIT_S as MAX_WAIT_S,
    MODEL_DATA as MODEL_DATA,
    MODELS as MODELS,
    NATIVE_STORE_BACKENDS as NATIVE_STORE_BACKENDS,
    OPTIMIZER as OPTIMIZER,
    OUTPUT as OUTPUT,
    PANELS as PANELS,
    PROFILING as PROFILING,
    RUN as RUN,
    SCHEDULE as SCHEDULE,
    SWEEP as SWEEP,
    TIMEOUTS as TIMEOUTS,
    TRAIN as TRAIN,
    At as At,
    ConfigValue as ConfigValue,
    Opt as Opt,
    _at_least_one as _at_least_one,
    _show as _show,
)
from ftrun.config.hosts import HostsConfig as HostsConfig
from ftrun.errors import BadInput
from ftrun.schedule import Schedule, ScheduleError, validate
from ftrun.small_files import describe_size

if TYPE_CHECKING:
    from ftrun.fault_flags import Fault
    from ftrun.link_spec import Link
    from ftrun.model_spec import ModelSpec


class ScheduleConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """torchft's streaming-DiLoCo schedule, by torchft's names (``ftrun.schedule``)."""

    PANEL: ClassVar[str] = SCHEDULE

    fragments: Annotated[int, Opt("Model fragments F.", commands=(TRAIN, SWEEP))] = 2
    sync_every: Annotated[int, Opt("Inner steps H between two syncs of a fragment.", commands=(TRAIN, SWEEP))] = 20
    fragment_sync_delay: Annotated[
        int, Opt("Steps tau between a fragment's send and its sync.", commands=(TRAIN, SWEEP))
    ] = 5
    fragment_update_alpha: Annotated[float, Opt("alpha: mix of local into global params after a sync.")] = 0.0

    @property
    def expected(self) -> Schedule:
        """The schedule the traces must show (``ScheduleError`` if torchft would refuse it)."""
        return Schedule(self.fragments, self.sync_every, self.fragment_sync_delay)

    def check(self, cfg: "RunConfig", at: At) -> None:
        try:
            validate(self.fragments, self.sync_every, self.fragment_sync_delay, self.fragment_update_alpha)
        except ScheduleError as e:
            raise BadInput(self._message(e, at)) from None

    def _message(self, e: ScheduleError, at: At) -> str:
        """One line for a schedule torchft would reject. A rule between several values is blamed
        on one the user gave (not on a preset's value), and names the others with their origin."""
        f, h, delay = self.fragments, self.sync_every, self.fragment_sync_delay
        if e.field == "sync_every" and h >= 1:
            involved = ["sync_every", "fragments"]
            rule = f"torchft needs H >= F and H a multiple of F, here H={h}, F={f}"
        elif e.field == "fragment_sync_delay" and delay >= 0:
            involved = ["fragment_sync_delay", "sync_every", "fragments"]
            rule = (
                f"torchft needs tau < H/F, here tau={delay} >= {h}/{f} = {h // f} "
                f"(a fragment must sync before it is sent again)"
            )
        else:
            return f"{at.where(e.field)} {_show(e.value)}: {e.rule}"
        given = [k for k in involved if at.origin(k) in ("flag", "file")]
        lead = e.field if e.field in given or not given else given[0]
        letter = {"fragments": "F", "sync_every": "H", "fragment_sync_delay": "tau"}
        others = []
        for k in involved:
            if k != lead:
                src = at.origin(k)
                others.append(
                    f"{letter[k]} is {at.where(k)} {getattr(self, k)}"
                    + ("" if src in ("flag", "file") else f" ({src})")
                )
        return f"{at.where(lead)} {getattr(self, lead)}: {rule}; {', '.join(others)}"


class ModelConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """The model: a built-in one (its shape) or a user's ``MODULE:FACTORY`` / ``hf:NAME`` (``ftrun.model_spec``)."""

    PANEL: ClassVar[str] = MODEL_DATA

    model: Annotated[
        str,
        Opt("mlp, transformer, hf:NAME or MODULE:FACTORY (FACTORY(vocab_size=, seq_len=, **args) -> logits)."),
    ] = "mlp"
    model_args: Annotated[
        list[str],
        Opt("KEY=VALUE for --model MODULE:FACTORY's factory. Repeatable.", flags=("--model-arg",), commands=(TRAIN,)),
    ] = []
    # user model: explicit fragments "a,b;c" (default: split its largest ModuleList)
    fragment_fqns: Annotated[
        str,
        Opt(
            "Fragments of a MODULE:FACTORY model, e.g. 'emb,blocks.0;blocks.1,head' (default: split its ModuleList).",
            commands=(TRAIN,),
        ),
    ] = ""
    blocks: Annotated[int, Opt("Model blocks (>= fragments; default 4).")] = 4
    width: Annotated[int, Opt("Model width (default 128).")] = 128
    vocab: Annotated[int, Opt(commands=())] = 256

    def check(self, cfg: "RunConfig", at: At) -> None:
        from ftrun.model_spec import is_user_model, parse_fragment_fqns, parse_model, parse_model_args

        fragments = cfg.schedule.fragments
        if is_user_model(self.model):  # its blocks are checked when the model is built (ftrun.model_spec.check)
            parse_model(self.model)
            if not all(isinstance(x, str) for x in self.model_args):
                raise at.bad("model_args", self.model_args, "must be a list of strings like 'n_layer=4'")
            parse_model_args(self.model_args)
            parse_fragment_fqns(self.fragment_fqns, fragments)
        else:
            if self.model_args or self.fragment_fqns:
                name = "model_args" if self.model_args else "fragment_fqns"
                raise at.bad(
                    name,
                    self.model_args or self.fragment_fqns,
                    f"only for --model MODULE:FACTORY, not the built-in {self.model}",
                )
            if fragments > self.blocks:
                raise at.bad(
                    "fragments",
                    fragments,
                    f"must be <= the model's blocks ({self.blocks}); each fragment is a group of whole blocks",
                )

    def check_vocab(self, cfg: "RunConfig", at: At) -> None:
        if self.vocab < 2 or self.vocab > 256 and cfg.data.data != "synthetic":
            raise at.bad("vocab", self.vocab, "must be 2..256 for byte-level text data")


# Bytes of a --data file at most: every rank holds it whole as int64 tokens (8 bytes a byte), so
# 1 GB is 8 GB of memory per rank; a corpus for a small-model test of torchft is megabytes
DATA_LIMIT = 1 << 30


class DataConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """What each step trains on."""

    PANEL: ClassVar[str] = MODEL_DATA

    seq_len: Annotated[int, Opt("Tokens per sample.")] = 64
    batch_size: Annotated[int, Opt("Samples per step.")] = 16
    data: Annotated[str, Opt("synthetic, or a text file (byte-level tokens).")] = "synthetic"
    seed: Annotated[int, Opt("Seed for model and data.")] = 0

    def check(self, cfg: "RunConfig", at: At) -> None:
        if self.data != "synthetic":
            p = Path(self.data)
            if not p.is_file():
                raise at.bad("data", self.data, "not a file (use 'synthetic' or a path to a text file)")
            if p.stat().st_size < self.seq_len + 2:
                raise at.bad("data", self.data, f"file too small for --seq-len {self.seq_len}")
            if p.stat().st_size > DATA_LIMIT:
                raise at.bad("data", self.data, f"more than {describe_size(DATA_LIMIT)} (each rank holds it whole)")

    def check_seed(self, at: At) -> None:
        if not 0 <= self.seed < 2**32:
            raise at.bad("seed", self.seed, "must be between 0 and 2**32-1")


class OptimizerConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """DiLoCo's inner and outer optimizers, and how the outer step's allreduce runs."""

    PANEL: ClassVar[str] = OPTIMIZER

    outer_lr: Annotated[float, Opt("Outer Nesterov SGD lr (default 0.7).")] = 0.7
    outer_momentum: Annotated[float, Opt("Outer momentum (default 0.9).")] = 0.9
    inner_lr: Annotated[float, Opt("Inner AdamW lr.")] = 1e-3
    quantize: Annotated[bool, Opt("torchft quantized allreduce (needs triton/GPU).", commands=(TRAIN, SWEEP))] = False
    bucketize: Annotated[bool, Opt("One allreduce per bucket instead of per parameter.")] = False

    def check(self, cfg: "RunConfig", at: At) -> None:
        if self.inner_lr <= 0 or self.outer_lr <= 0:
            name = "inner_lr" if self.inner_lr <= 0 else "outer_lr"
            raise at.bad(name, min(self.inner_lr, self.outer_lr), "must be > 0")
        if not 0.0 <= self.outer_momentum < 1.0:
            raise at.bad("outer_momentum", self.outer_momentum, "must be in [0, 1)")


class ProfilingConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """What the run records: the profiled steps, a relaunched group's profile, the numeric sketches."""

    PANEL: ClassVar[str] = PROFILING

    profile: Annotated[str, Opt("auto, none, or A:B (profile steps A..B).")] = "auto"
    profile_recovery: Annotated[
        bool,
        Opt(
            "Profile a relaunched group up to its first commit, and the others around it (default on).",
            flags=("--profile-recovery",),
            commands=(TRAIN,),
            metavar="on|off",
            on_off=True,
        ),
    ] = True
    # numeric check of every sync (ftrun.worker.sketch, ftrun.check.numerics): sketches in the event logs
    sketches: Annotated[bool, Opt("Sketch every sync for the numeric check (default on).", commands=(TRAIN,))] = True

    def check(self, cfg: "RunConfig", at: At) -> None:
        steps, h = cfg.steps, cfg.schedule.sync_every
        if self.profile not in ("auto", "none"):
            m = _PROFILE_RE.fullmatch(self.profile)
            if not m:
                raise at.bad("profile", self.profile, "use auto, none or A:B (profile steps A..B)")
            a, b = int(m[1]), int(m[2])
            if not 1 <= a <= b <= steps:
                raise at.bad("profile", self.profile, f"need 1 <= A <= B <= --steps ({steps})")
        elif self.profile == "auto" and steps < h:
            raise at.bad(
                "steps", steps, f"profiling needs at least one full cycle of --sync-every {h} steps (or --profile none)"
            )


class EmulationConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """Stand-ins for what this machine lacks: a slow link between the groups, a bigger model's compute."""

    PANEL: ClassVar[str] = LINK

    link: Annotated[str, Opt("Emulate a slow link: BANDWIDTH[,LATENCY], e.g. 1gbit,20ms.")] = ""
    step_sleep_ms: Annotated[float, Opt("Sleep this long in every step (stand-in for a bigger model's compute).")] = 0.0

    def check_link(self, at: At) -> None:
        if self.link:
            from ftrun.link_spec import parse_link

            parse_link(self.link, name=at.where("link"))

    def parsed_link(self) -> "Link | None":
        """``link`` as the one ``Link`` (``ftrun.link_spec``; its text was checked at build, and is
        parsed once: the parse is memoised by text); None without an emulated link."""
        from ftrun.link_spec import parse_link

        return parse_link(self.link) if self.link else None

    def check(self, cfg: "RunConfig", at: At) -> None:
        if not 0 <= self.step_sleep_ms <= MAX_STEP_SLEEP_MS:
            raise at.bad(
                "step_sleep_ms", self.step_sleep_ms, f"must be between 0 and {MAX_STEP_SLEEP_MS:g} ms (1 hour)"
            )


class TimeoutsConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """How long ftrun and torchft wait before they call something lost."""

    PANEL: ClassVar[str] = TIMEOUTS

    timeout_s: Annotated[float, Opt(commands=())] = 60.0
    stall_timeout_s: Annotated[
        float,
        Opt(
            "Seconds without progress before the run is stopped, naming the group (default 120).",
            flags=("--stall-timeout",),
        ),
    ] = 120.0
    quorum_timeout_s: Annotated[
        float,
        Opt(
            "Seconds a quorum may wait before the run fails, and past --steps for a relaunch (default 60).",
            flags=("--quorum-timeout",),
        ),
    ] = 60.0
    heartbeat_timeout_ms: Annotated[int, Opt(commands=())] = 2000

    def check(self, cfg: "RunConfig", at: At) -> None:
        for name in ("timeout_s", "stall_timeout_s", "quorum_timeout_s"):
            if not 0 < getattr(self, name) <= MAX_WAIT_S:
                raise at.bad(name, getattr(self, name), f"must be > 0 and at most {MAX_WAIT_S:g} s (7 days)")

    def check_heartbeat(self, at: At) -> None:
        if not 100 <= self.heartbeat_timeout_ms <= MAX_HEARTBEAT_MS:
            raise at.bad(
                "heartbeat_timeout_ms", self.heartbeat_timeout_ms, f"must be between 100 and {MAX_HEARTBEAT_MS} ms"
            )


class VerdictConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """What the run says at its end: the check of what it captured (``ftrun.commands.run_check``).
    Its one field is named ``check`` (flags --check/--no-check), so the part has no ``check`` rule."""

    PANEL: ClassVar[str] = PROFILING

    check: Annotated[
        bool,
        Opt(
            "Check the captured traces as inspect-trace does (schedule and numerics); exit 1 on a FAIL (default on).",
            commands=(TRAIN,),
        ),
    ] = True


class RunConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """Everything a run needs, as parts. ``resolved()``: the flat form by key (manifest, TOML);
    ``RunConfig.from_keys``: back. spec.json carries the tree itself (``layout.Spec``). Frozen, as
    every part: built once (``ftrun.config.build``), a changed value is a new tree (``replaced``)."""

    PANEL: ClassVar[str] = RUN

    mode: Annotated[
        str, Opt("Preset: streaming (F=2,H=20,tau=5) or baseline (F=1,H=20,tau=0).", commands=(TRAIN, SWEEP))
    ] = "streaming"
    steps: Annotated[int, Opt("Inner training steps N (default 60).")] = 60
    out: Annotated[str, Opt("Output root (default profiles/).", panel=OUTPUT)] = "profiles"
    run_name: Annotated[
        str,
        Opt(
            "Run directory name (default: mode + time; with --replica-group-id K: NAME-groupK).",
            commands=(TRAIN,),
            panel=OUTPUT,
        ),
    ] = ""
    schedule: ScheduleConfig = msgspec.field(default_factory=ScheduleConfig)
    hosts: HostsConfig = msgspec.field(default_factory=HostsConfig)
    model: ModelConfig = msgspec.field(default_factory=ModelConfig)
    data: DataConfig = msgspec.field(default_factory=DataConfig)
    optimizer: OptimizerConfig = msgspec.field(default_factory=OptimizerConfig)
    profiling: ProfilingConfig = msgspec.field(default_factory=ProfilingConfig)
    emulation: EmulationConfig = msgspec.field(default_factory=EmulationConfig)
    timeouts: TimeoutsConfig = msgspec.field(default_factory=TimeoutsConfig)
    faults: FaultsConfig = msgspec.field(default_factory=FaultsConfig)
    verdict: VerdictConfig = msgspec.field(default_factory=VerdictConfig)

    def profile_window(self) -> tuple[int, int] | None:
        """The profiled step window [A, B] (inclusive), or None for ``--profile none``."""
        profile = self.profiling.profile
        if profile == "none":
            return None
        if profile == "auto":
            return self.schedule.expected.auto_window(self.steps)
        a, b = (int(x) for x in profile.split(":"))
        return (a, b)

    def planned_faults(self) -> "list[Fault]":
        """The injected faults, parsed and checked against the run (``ftrun.fault_flags``)."""
        from ftrun.fault_flags import parse_faults

        f = self.faults
        return parse_faults(
            f.kill,
            f.hang,
            self.hosts.replicas,
            self.steps,
            f.fail_commit,
            self.schedule.expected.window,
            corrupts=f.corrupt_allreduce,
            sync_every=self.schedule.sync_every,
            corrupt_syncs=f.corrupt_sync,
            alpha=self.schedule.fragment_update_alpha,
        )

    def model_spec(self) -> "ModelSpec":
        """What building the model needs (``ftrun.model_spec.ModelSpec``): the one place it is
        taken from the tree (``BadInput`` for a ``--model-arg`` that is not KEY=VALUE)."""
        from ftrun.model_spec import ModelSpec, parse_model_args

        m = self.model
        return ModelSpec(
            model=m.model,
            model_args=parse_model_args(m.model_args),
            vocab=m.vocab,
            seq_len=self.data.seq_len,
            width=m.width,
            blocks=m.blocks,
            fragments=self.schedule.fragments,
            fragment_fqns=m.fragment_fqns,
            seed=self.data.seed,
        )

    def check(self, at: At) -> None:
        """Every part's rules, in the order a user reads the flags."""
        self.schedule.check(self, at)
        self.hosts.check_sizes(self, at)
        _at_least_one(at, self, "steps")
        _at_least_one(at, self.model, "blocks", "width")
        _at_least_one(at, self.data, "seq_len", "batch_size")
        self.model.check(self, at)
        self.hosts.check(self, at)
        self.optimizer.check(self, at)
        self.model.check_vocab(self, at)
        self.data.check(self, at)
        self.profiling.check(self, at)
        if self.run_name and not _RUN_NAME_RE.fullmatch(self.run_name):
            raise at.bad("run_name", self.run_name, "use letters, digits, '.', '_' or '-'")
        self.hosts.check_lighthouse(at)
        self.emulation.check_link(at)
        self.timeouts.check(self, at)
        self.emulation.check(self, at)
        self.timeouts.check_heartbeat(at)
        self.faults.check(self, at)
        self.hosts.check_hosts(self, at)
        self.data.check_seed(at)
        out = Path(self.out)
        probe = out if out.exists() else next((p for p in out.parents if p.exists()), Path("."))
        if not probe.is_dir() or not os.access(probe, os.W_OK):
            raise at.bad("out", self.out, "output directory is not writable")

    def resolved(self) -> dict[str, ConfigValue]:
        """The flat form: every field by its key, the top level's first (``manifest.json``'s
        ``config``, a TOML file's keys); lists copied."""
        out: dict[str, ConfigValue] = {}
        for name in self.__struct_fields__:
            v = getattr(self, name)
            items = [(k, getattr(v, k)) for k in v.__struct_fields__] if isinstance(v, msgspec.Struct) else [(name, v)]
            for key, x in items:
                out[key] = list(x) if isinstance(x, list) else x
        return out

    def get(self, key: str) -> object:
        """Field ``key`` (a TOML key, a sweep axis), wherever it lives."""
        part = _part_of().get(key)
        return getattr(getattr(self, part) if part else self, key)

    def replaced(self, **values: object) -> "RunConfig":
        """A copy with ``values`` (by key) set; unchecked."""
        return RunConfig.from_keys(**{**self.resolved(), **values})

    @classmethod
    def from_keys(cls, **values: object) -> "RunConfig":
        """A tree from flat key values (the rest: defaults), unchecked (``ftrun.config.build`` checks).
        Built once: the tree is frozen (a changed value is a new tree: ``replaced``)."""
        part_of = _part_of()
        top: dict[str, object] = {}
        parts: dict[str, dict[str, object]] = {}
        for key, v in values.items():
            if key not in part_of and key not in cls.__struct_fields__:
                raise TypeError(f"RunConfig has no field {key!r}")
            part = part_of.get(key)
            if part:
                parts.setdefault(part, {})[key] = v
            else:
                top[key] = v
        kinds = _part_types()
        built = {name: msgspec.structs.replace(kinds[name](), **kv) for name, kv in parts.items()}
        return msgspec.structs.replace(cls(), **top, **built)


@functools.cache
def _part_types() -> dict[str, type[msgspec.Struct]]:
    """Part name -> its Struct type (``schedule`` -> ``ScheduleConfig``)."""
    cfg = RunConfig()
    return {name: type(p) for name in cfg.__struct_fields__ if isinstance(p := getattr(cfg, name), msgspec.Struct)}


@functools.cache
def _part_of() -> dict[str, str]:
    """Key -> the part holding it (keys of ``RunConfig`` itself are absent)."""
    cfg = RunConfig()
    return {
        k: name
        for name in cfg.__struct_fields__
        if isinstance(p := getattr(cfg, name), msgspec.Struct)
        for k in p.__struct_fields__
    }
