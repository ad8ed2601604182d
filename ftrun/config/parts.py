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
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

import msgspec

from ftrun.errors import BadInput
from ftrun.model_desc import BUILTIN_MODELS
from ftrun.schedule import Schedule, ScheduleError, validate
from ftrun.small_files import describe_size

if TYPE_CHECKING:
    from ftrun.fault_flags import Fault
    from ftrun.link_spec import Link

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


class HostsConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """The replica groups, their ranks and process group, and (several hosts) where this one runs."""

    PANEL: ClassVar[str] = GROUPS

    replicas: Annotated[int, Opt("Replica groups R (default 2).", flags=("--replicas", "--num-replica-groups"))] = 2
    nproc_per_replica: Annotated[int, Opt("Ranks per replica group G (default 1).")] = 1
    backend: Annotated[
        str,
        Opt("auto (NCCL with CUDA, else Gloo), gloo, nccl, baby-nccl, baby-gloo, gloo-native, nccl2, torchcomms."),
    ] = "auto"
    min_replicas: Annotated[int, Opt("torchft min_replica_size (and the lighthouse's min_replicas).")] = 1
    lighthouse: Annotated[
        str, Opt("Use this lighthouse (http://HOST:PORT) instead of starting one.", commands=(TRAIN,), panel=HOSTS)
    ] = ""
    replica_group_id: Annotated[
        int, Opt("Run only replica group K here (needs --lighthouse).", commands=(TRAIN,), panel=HOSTS)
    ] = -1  # -1: every group, on this host
    job_id: Annotated[
        str, Opt("The job's id (default: from --lighthouse and --run-name).", commands=(TRAIN,), panel=HOSTS)
    ] = ""
    master_addr: Annotated[
        str,
        Opt(
            "torchrun --master-addr for this group's store (default: this host's address toward the lighthouse).",
            commands=(TRAIN,),
            panel=HOSTS,
        ),
    ] = ""
    master_port: Annotated[
        int, Opt("torchrun --master-port (default: a free port).", commands=(TRAIN,), panel=HOSTS)
    ] = 0
    advertise_host: Annotated[
        str,
        Opt(
            "The name other groups reach this host by (default: this host's address toward the lighthouse).",
            commands=(TRAIN,),
            panel=HOSTS,
        ),
    ] = ""
    interface: Annotated[
        str,
        Opt(
            "Interface toward the other hosts (default: toward the lighthouse); sets GLOO/NCCL_SOCKET_IFNAME if unset.",
            commands=(TRAIN,),
            panel=HOSTS,
        ),
    ] = ""
    native_store: Annotated[
        str,
        Opt(
            "gloo-native/nccl2 across hosts: the bootstrap store HOST:PORT all groups reach; group 0's ftrun hosts it.",
            commands=(TRAIN,),
            panel=HOSTS,
            metavar="HOST:PORT",
        ),
    ] = ""  # "": every group here, the store on a free loopback port
    start_gate: Annotated[
        str,
        Opt(
            "A file: the groups start (imports, model) at once and build their torchft Manager once it exists.",
            commands=(),
        ),
    ] = ""  # sweep --warm-start's next cell, parked while the current one trains (ftrun.worker.park)

    @property
    def groups_here(self) -> list[int]:
        """The replica groups this host launches."""
        return list(range(self.replicas)) if self.replica_group_id < 0 else [self.replica_group_id]

    def check_sizes(self, cfg: "RunConfig", at: At) -> None:
        _at_least_one(at, self, "replicas", "nproc_per_replica")
        for key in ("replicas", "nproc_per_replica"):  # lists of groups and ranks are made from them
            if getattr(self, key) > MAX_REPLICAS:
                raise at.bad(key, getattr(self, key), f"must be at most {MAX_REPLICAS:,}")

    def check(self, cfg: "RunConfig", at: At) -> None:
        if self.backend not in BACKENDS:
            raise at.bad("backend", self.backend, f"choose from {', '.join(BACKENDS)}")
        if not 1 <= self.min_replicas <= self.replicas:
            raise at.bad("min_replicas", self.min_replicas, f"must be between 1 and --replicas ({self.replicas})")

    def check_hosts(self, cfg: "RunConfig", at: At) -> None:
        """The several-hosts rules (after the faults, as a user reads the flags)."""
        if self.replica_group_id != -1:
            if not 0 <= self.replica_group_id < self.replicas:
                raise at.bad(
                    "replica_group_id",
                    self.replica_group_id,
                    f"must be in 0..--num-replica-groups-1 ({self.replicas - 1})",
                )
            if not self.lighthouse:
                raise at.bad(
                    "replica_group_id",
                    self.replica_group_id,
                    "needs --lighthouse http://HOST:PORT (start one with `ftrun lighthouse`)",
                )
        if self.master_port and not 1 <= self.master_port <= 65535:
            raise at.bad("master_port", self.master_port, "must be a TCP port")
        if self.job_id and not _RUN_NAME_RE.fullmatch(self.job_id):
            raise at.bad("job_id", self.job_id, "use letters, digits, '.', '_' or '-'")
        self.check_native_store(at)

    def check_native_store(self, at: At) -> None:
        """``--native-store HOST:PORT``: only for a native group, and needed by one across hosts
        (a group there cannot know where replica group 0's ftrun hosts the store)."""
        native = self.backend in NATIVE_STORE_BACKENDS
        if not self.native_store:
            if native and self.replica_group_id >= 0:
                raise at.bad(
                    "backend",
                    self.backend,
                    "across hosts (--replica-group-id) needs --native-store HOST:PORT, the bootstrap store every "
                    "group reaches (replica group 0's ftrun hosts it; the same value on every host)",
                )
            return
        if not native:
            raise at.bad("native_store", self.native_store, f"only for --backend {' or '.join(NATIVE_STORE_BACKENDS)}")
        host, _, port = self.native_store.rpartition(":")
        if not host.strip("[]") or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise at.bad("native_store", self.native_store, "expected HOST:PORT (a TCP port 1-65535)")

    def check_lighthouse(self, at: At) -> None:
        if self.lighthouse and not re.fullmatch(r"https?://[^/:\s]+(:\d+)?/?", self.lighthouse):
            raise at.bad("lighthouse", self.lighthouse, "expected http://HOST:PORT")


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


_FAULT_LISTS = ("kill", "hang", "fail_commit", "corrupt_allreduce", "corrupt_sync")


class FaultsConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """Injected faults (``ftrun.fault_flags``) and how often a dead group is relaunched."""

    PANEL: ClassVar[str] = FAULTS

    kill: Annotated[list[str], Opt("SIGKILL replica group R at step S: R@S, or R@S:sigterm. Repeatable.")] = []
    hang: Annotated[list[str], Opt("Replica group R stalls SECONDS inside step S: R@S:SECONDS. Repeatable.")] = []
    corrupt_allreduce: Annotated[
        list[str],
        Opt(
            "R@S:KIND: group R averages the sync at step S wrongly (wrong-count, drop, stale, late, noise).",
            commands=(TRAIN,),
        ),
    ] = []  # KINDs: ftrun.fault_flags
    corrupt_sync: Annotated[
        list[str],
        Opt(
            "R@S:KIND: group R gets the outer step of the sync at step S wrong (sign, stale, lr, alpha).",
            commands=(TRAIN,),
        ),
    ] = []  # KINDs: ftrun.fault_flags.SYNC_KINDS
    fail_commit: Annotated[
        list[str],
        Opt("R@S: replica group R votes false in should_commit at its first sync from step S. Repeatable."),
    ] = []
    chaos: Annotated[
        list[str],
        Opt(
            "Chaos run: faults KIND:MTBF (kill, sigterm, hang[:SECONDS]; MTBF in seconds) at random, e.g. kill:60.",
            commands=(TRAIN,),
        ),
    ] = []  # ftrun.chaos_plan
    chaos_seed: Annotated[int, Opt("Seed of the --chaos fault draw (same seed: same faults).", commands=(TRAIN,))] = 0
    chaos_min_alive: Annotated[
        int, Opt("--chaos never leaves fewer than N groups up (default 1: never all at once).", commands=(TRAIN,))
    ] = 1
    chaos_max_faults: Annotated[
        int, Opt("--chaos injects at most N faults (default 0: no cap).", commands=(TRAIN,))
    ] = 0
    # -1: 1 with a fault, else 0 (``max_restarts``)
    restarts: Annotated[int, Opt("Relaunch a dead group up to N times (default 1 with faults, else 0).")] = -1
    spares: Annotated[
        int,
        Opt(
            "N warm spare groups, built and waiting outside the quorum; one takes over a dead group's restart.",
            commands=(TRAIN,),
        ),
    ] = 0

    @property
    def max_restarts(self) -> int:
        if self.restarts >= 0:
            return self.restarts
        return 1 if (self.kill or self.hang) else 0

    def check(self, cfg: "RunConfig", at: At) -> None:
        if self.restarts < 0 and (self.restarts != -1 or at.known and at.origin("restarts") in ("flag", "file")):
            raise at.bad("restarts", self.restarts, "must be >= 0")  # -1 is only the default's "1 with a fault, else 0"
        for name in _FAULT_LISTS:
            if not all(isinstance(x, str) for x in getattr(self, name)):
                raise at.bad(name, getattr(self, name), "must be a list of strings like '1@25'")
        cfg.planned_faults()
        if not 0 <= self.spares <= MAX_SPARES:
            raise at.bad("spares", self.spares, f"must be between 0 and {MAX_SPARES}")
        if self.spares and cfg.hosts.replica_group_id >= 0:
            raise at.bad("spares", self.spares, "needs every replica group on this host (no --replica-group-id)")
        if (
            self.chaos
            or at.known
            and any(at.origin(k) in ("flag", "file") for k in ("chaos_seed", "chaos_min_alive", "chaos_max_faults"))
        ):
            self._check_chaos(cfg, at)
        for name in ("corrupt_allreduce", "corrupt_sync"):
            if getattr(self, name) and not cfg.profiling.sketches:
                raise at.bad(name, getattr(self, name)[0], "needs the sketches it is checked by (drop --no-sketches)")

    def _check_chaos(self, cfg: "RunConfig", at: At) -> None:
        """The ``--chaos*`` rules (``ftrun.chaos_plan``): parsable kinds, two groups or more on this
        host, ``--chaos-min-alive`` between ``--min-replicas`` (the survivors must still make a
        quorum) and ``--replicas`` - 1, a hang shorter than ``--stall-timeout``."""
        from ftrun.chaos_plan import parse_kinds

        if not all(isinstance(x, str) for x in self.chaos):
            raise at.bad("chaos", self.chaos, "must be a list of strings like 'kill:60'")
        hosts, given = cfg.hosts, ",".join(self.chaos)
        kinds = parse_kinds(self.chaos, at.where("chaos"))
        if not kinds:
            raise at.bad("chaos_seed", self.chaos_seed, "needs --chaos KIND:MTBF")
        if hosts.replica_group_id >= 0:
            raise at.bad("chaos", given, "needs every replica group on this host (no --replica-group-id)")
        if hosts.replicas < 2:
            raise at.bad("chaos", given, "needs at least 2 replica groups (--replicas)")
        low, high = max(1, hosts.min_replicas), hosts.replicas - 1
        if not low <= self.chaos_min_alive <= high:
            raise at.bad(
                "chaos_min_alive",
                self.chaos_min_alive,
                f"must be between {low} (--min-replicas: the survivors' quorum) and --replicas - 1 ({high})",
            )
        if self.chaos_max_faults < 0:
            raise at.bad("chaos_max_faults", self.chaos_max_faults, "must be >= 0 (0: no cap)")
        stall = cfg.timeouts.stall_timeout_s
        if any(k.action == "hang" and k.seconds >= stall for k in kinds):
            raise at.bad("chaos", given, f"a hang as long as --stall-timeout {stall:g} s would stop the run")


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

    def resolved(self) -> dict[str, Any]:
        """The flat form: every field by its key, the top level's first (``manifest.json``'s
        ``config``, a TOML file's keys); lists copied."""
        out: dict[str, Any] = {}
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
