"""What ``ftrun plan`` can be asked: its options, declared once (``PlanRequest``). Cheap to import
(msgspec and the config's ``Opt``): the CLI reads the declaration at every start to make the flags."""

from __future__ import annotations

from typing import Annotated

import msgspec

from ftrun.config.parts import Opt

TOLERANCE = 0.25  # --check's default tolerance
# what --check takes besides itself (every other flag given is refused: each run is predicted as it ran)
CHECK_TAKES = ("check", "tolerance", "json_out", "target_util")
# what the goodput model (--mtbf, --recovery-s) takes
GOODPUT_TAKES = ("from_dir", "mtbf", "recovery_s", "replicas", "step_ms", "sync_every", "fragments", "json_out")


class PlanRequest(msgspec.Struct, kw_only=True, frozen=True):
    """What ``ftrun plan`` was asked: one field per flag, declared once here (its help and flags;
    ``ftrun.cli`` generates the options from it). A field without ``Opt`` is a config key and
    takes the config field's flags and help (``ftrun.config.options.declared``). None = not given:
    a run's own value (``--from``), else the model's default."""

    from_dir: Annotated[
        str | None,
        Opt(
            "Take fragment bytes, replicas, schedule, step time and the groups' drift from a run.",
            flags=("--from",),
            metavar="RUN_DIR",
        ),
    ] = None
    params: Annotated[float | None, Opt("Model parameters N, e.g. 1e9 (without --from).")] = None
    # of the exchanged pseudo-gradients (DiLoCo) / gradients (data-parallel)
    dtype: Annotated[str | None, Opt("fp32 (default), bf16, fp16, fp8 or fp4: bytes per exchanged value.")] = None
    step_ms: Annotated[float | None, Opt("Compute time of one training step in ms (without --from).")] = None
    # per replica group; with the three below: step = 6 N T / (G F MFU)
    tokens_per_step: Annotated[
        float | None, Opt("Tokens one replica group trains on per step (FLOPs-based step time).")
    ] = None
    flops_per_gpu: Annotated[float | None, Opt("Peak FLOP/s of one accelerator (FLOPs-based step time).")] = None
    gpus_per_replica: Annotated[int | None, Opt("Accelerators per replica group (default 1).")] = None
    mfu: Annotated[float | None, Opt("Model FLOPs utilisation (default 0.4): step = 6 N T / (G F MFU).")] = None
    links: Annotated[list[str], Opt("BANDWIDTH[,LATENCY], e.g. 1gbit,20ms. Repeatable.", flags=("--link",))] = (
        msgspec.field(default_factory=list)
    )
    sweep_link: Annotated[str | None, Opt("LO..HI[,LATENCY]: log-spaced bandwidths, e.g. 10mbit..10gbit,20ms.")] = None
    replicas: int | None = None
    fragments: int | None = None
    layers: Annotated[int | None, Opt("Model layers (with --layers-per-fragment: F = layers / per fragment).")] = None
    layers_per_fragment: Annotated[int | None, Opt("Layers per fragment (needs --layers).")] = None
    sync_every: int | None = None
    fragment_sync_delay: int | None = None
    step_jitter_ms: Annotated[
        float | None,
        Opt(
            "Per-step standard deviation of each group's step (what-if; default 0, or the run's).",
            flags=("--step-jitter",),
            metavar="MS",
        ),
    ] = None
    overlap_slowdown: Annotated[
        float | None,
        Opt(
            "How much longer a step computes while a fragment's collectives are in flight "
            "(default 1, or the run's measured one with --from/--check).",
            metavar="X",
        ),
    ] = None
    data_parallel: Annotated[
        bool, Opt("Also plan data-parallel training: every step all-reduces the gradients.", flags=("--data-parallel",))
    ] = False
    dp_dtype: Annotated[str | None, Opt("Dtype of the data-parallel gradients (default: --dtype).")] = None
    train_tokens: Annotated[
        float | None,
        Opt("Tokens of the whole training: D / (R x --tokens-per-step) steps; hours, bytes sent and bits exchanged."),
    ] = None
    # recovery: the lighthouse's heartbeat timeout
    heartbeat_timeout_ms: Annotated[
        float | None,
        Opt(
            "Recovery: how long the lighthouse keeps a group whose heartbeats stopped (default 2000, or the run's).",
            metavar="MS",
        ),
    ] = None
    mtbf: Annotated[
        float | None,
        Opt(
            "Goodput: mean seconds between faults over the run (with --recovery-s, or --from a --chaos run).",
            metavar="SECONDS",
        ),
    ] = None
    recovery_s: Annotated[
        float | None, Opt("Goodput: seconds from a fault to the group's first commit (measured).", metavar="SECONDS")
    ] = None
    target_util: Annotated[float, Opt("Compute utilisation to reach (smallest tau / F, hiding bandwidth).")] = 0.95
    png: Annotated[str | None, Opt("Write utilisation vs bandwidth to FILE.png.", flags=("--png",), metavar="FILE")] = (
        None
    )
    check: Annotated[
        str | None,
        Opt(
            "Predict the runs of a compare/sweep dir (or a --kill run dir's recovery) and compare.",
            flags=("--check",),
            metavar="DIR",
        ),
    ] = None
    tolerance: Annotated[float, Opt("--check: largest relative error (exposed time: or 5 ms) before exit 1.")] = (
        TOLERANCE
    )
    json_out: Annotated[bool, Opt("Print the result as JSON.", flags=("--json",))] = False

    def given(self, *skip: str) -> list[str]:
        """The flags given (a value other than the default), but ``skip``'s, in --help's order."""
        from ftrun.config.options import declared

        return [f.flags[0] for f in declared(PlanRequest) if f.key not in skip and getattr(self, f.key) != f.default]
