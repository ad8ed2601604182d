"""The ``ftrun`` command line (typer + rich). Never imports torch: training runs in children.

Each command parses flags, hands them to its module, and maps ``BadInput`` to one red line and
exit 2. Imports of the heavier modules happen inside the commands so ``ftrun --help`` stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from ftrun.errors import BadInput, RunFailed

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Train with torchft (streaming) DiLoCo, capture traces, and check the schedule.",
)


def _fail(message: str, code: int) -> None:
    from rich.console import Console

    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {message}", markup=True)
    raise typer.Exit(code)


def guarded(fn):
    """Run a command body: BadInput -> exit 2, RunFailed -> exit 1, both as one line."""
    try:
        return fn()
    except BadInput as e:
        _fail(str(e), 2)
    except RunFailed as e:
        _fail(str(e), 1)
    except KeyboardInterrupt:
        _fail("interrupted", 130)


TRAIN_HELP = """Run torchft DiLoCo across replica groups on this host and capture traces.

Starts a torchft lighthouse on loopback, launches each replica group with torch's elastic
launcher, trains, and writes traces, manifest and event logs to OUT/RUN_NAME.

Example: ftrun train --mode streaming --replicas 2 --steps 60
"""


@app.command("train", help=TRAIN_HELP)
def train_cmd(
    mode: Optional[str] = typer.Option(None, help="Preset: streaming (F=2,H=20,tau=5) or baseline (F=1,H=20,tau=0)."),
    config: Optional[Path] = typer.Option(None, "--config", help="TOML file with the same keys as the flags."),
    replicas: Optional[int] = typer.Option(None, help="Replica groups R (default 2)."),
    nproc_per_replica: Optional[int] = typer.Option(None, help="Ranks per replica group G (default 1)."),
    fragments: Optional[int] = typer.Option(None, help="Model fragments F."),
    sync_every: Optional[int] = typer.Option(None, help="Inner steps H between two syncs of a fragment."),
    fragment_sync_delay: Optional[int] = typer.Option(None, help="Steps tau between a fragment's send and its sync."),
    fragment_update_alpha: Optional[float] = typer.Option(None, help="alpha: mix of local into global params after a sync."),
    outer_lr: Optional[float] = typer.Option(None, help="Outer Nesterov SGD lr (default 0.7)."),
    outer_momentum: Optional[float] = typer.Option(None, help="Outer momentum (default 0.9)."),
    inner_lr: Optional[float] = typer.Option(None, help="Inner AdamW lr."),
    quantize: Optional[bool] = typer.Option(None, "--quantize/--no-quantize", help="torchft quantized allreduce (needs triton/GPU)."),
    bucketize: Optional[bool] = typer.Option(None, "--bucketize/--no-bucketize", help="One allreduce per bucket instead of per parameter."),
    steps: Optional[int] = typer.Option(None, help="Inner training steps N."),
    model: Optional[str] = typer.Option(None, help="mlp or transformer."),
    blocks: Optional[int] = typer.Option(None, help="Model blocks (>= fragments)."),
    width: Optional[int] = typer.Option(None, help="Model width."),
    seq_len: Optional[int] = typer.Option(None, help="Tokens per sample."),
    batch_size: Optional[int] = typer.Option(None, help="Samples per step."),
    data: Optional[str] = typer.Option(None, help="synthetic, or a text file (byte-level tokens)."),
    backend: Optional[str] = typer.Option(None, help="auto (NCCL with CUDA, else Gloo), gloo, nccl, baby-nccl."),
    min_replicas: Optional[int] = typer.Option(None, help="torchft min_replica_size."),
    seed: Optional[int] = typer.Option(None, help="Seed for model and data."),
    profile: Optional[str] = typer.Option(None, help="auto, none, or A:B (profile steps A..B)."),
    lighthouse: Optional[str] = typer.Option(None, help="Use this lighthouse (http://HOST:PORT) instead of starting one."),
    link: Optional[str] = typer.Option(None, help="Emulate a slow link: BANDWIDTH[,LATENCY], e.g. 1gbit,20ms."),
    out: Optional[str] = typer.Option(None, help="Output root (default profiles/)."),
    run_name: Optional[str] = typer.Option(None, help="Run directory name (default: mode + time)."),
    overwrite: bool = typer.Option(False, help="Replace an existing run dir of the same name."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    flags = {k: v for k, v in locals().items() if k not in ("config", "overwrite", "json_out")}

    def body() -> int:
        from ftrun import config as cfgmod
        from ftrun.launch.run import train

        file_values = cfgmod.load_toml(config) if config else None
        cfg = cfgmod.build(file_values=file_values, **flags)
        return train(cfg, overwrite=overwrite, json_out=json_out)

    raise typer.Exit(guarded(body) or 0)


INSPECT_HELP = """Check traces against the streaming-DiLoCo schedule: per replica, fragment and step.

PATH is a run dir from `ftrun train`, a folder of traces, or trace files (.json, .json.gz).
Traces without a manifest need --fragments, --sync-every and --fragment-sync-delay.
Exit 0 = every send and sync landed as expected, 1 = mismatch, 2 = bad input.

Example: ftrun inspect-trace profiles/streaming-0001
"""


@app.command("inspect-trace", help=INSPECT_HELP)
def inspect_cmd(
    paths: List[Path] = typer.Argument(..., help="Run dir, trace folder or trace files."),
    fragments: Optional[int] = typer.Option(None, help="F, for traces without a manifest."),
    sync_every: Optional[int] = typer.Option(None, help="H, for traces without a manifest."),
    fragment_sync_delay: Optional[int] = typer.Option(None, help="tau, for traces without a manifest."),
    step_numbering: str = typer.Option(
        "top", help="top: prof.step() at loop top (torchft example; ProfilerStep#k = step k); end: at loop end; auto: fit."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    def body() -> int:
        from ftrun.check.command import inspect_trace

        return inspect_trace(
            paths,
            fragments=fragments,
            sync_every=sync_every,
            fragment_sync_delay=fragment_sync_delay,
            step_numbering=step_numbering,
            json_out=json_out,
        )

    raise typer.Exit(guarded(body) or 0)


def main() -> None:
    app(prog_name="ftrun")


if __name__ == "__main__":
    sys.exit(main())
