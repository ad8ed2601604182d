"""The ``ftrun`` command line (typer + rich). Never imports torch: training runs in children.

Each command parses flags, hands them to its module, and maps ``BadInput`` to one red line and
exit 2 (``ftrun.cli_support.guarded``). ``train``, ``compare`` and ``sweep`` take the config's
fields as flags, generated from their one declaration in ``ftrun.config`` (``config_options``),
and get them as one ``Overrides``; ``plan``, ``inspect-trace`` and ``launch`` take the options
their declaration Struct lists (``ftrun.plan.options``, ``ftrun.config.commands``) as one
instance of it. Their --help groups the options by typer's ``rich_help_panel`` (a config
field's: its part's panel) and shows the examples in the epilog (``PanelCommand``). Imports of
the heavier modules happen inside the commands so ``ftrun --help`` stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import typer

from ftrun.cli_support import (
    COMPARISON,
    GRID,
    OUTPUT,
    RUN,
    PanelCommand,
    _fail,
    config_options,
    examples_of,
    guarded,
    help_of,
    refuse_empty,
    refuses_blank,
)
from ftrun.config.commands import JUNIT_HELP

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Train with torchft (streaming) DiLoCo, capture traces, and check the schedule.",
)


def panel_command(name: str, text: str, short_help: str):
    """``app.command`` for a command whose options are shown in panels: help and examples from ``text``."""
    return app.command(name, cls=PanelCommand, help=help_of(text), epilog=examples_of(text), short_help=short_help)


OVERWRITE_HELP = "Replace an existing run dir of the same name."
JSON_HELP = "Print the result as JSON."


TRAIN_HELP = """Run torchft DiLoCo across replica groups and capture traces.

Starts a torchft lighthouse on loopback, launches each replica group with torch's elastic
launcher, trains, and writes traces, manifest and event logs to OUT/RUN_NAME. With
--lighthouse URL --replica-group-id K, runs only group K on this host (one per host).

Example: ftrun train --mode streaming --replicas 2 --steps 60

Example (host K of R): ftrun train --lighthouse http://HOST0:29510 --replica-group-id K
--num-replica-groups R --run-name job1
"""


@panel_command("train", TRAIN_HELP, "Run torchft DiLoCo across replica groups and capture traces.")
@config_options("train")
def train_cmd(
    opts: Any = None,
    config: str | None = typer.Option(
        None, "--config", metavar="<path>", help="TOML file with the same keys as the flags.", rich_help_panel=RUN
    ),
    overwrite: bool = typer.Option(False, help=OVERWRITE_HELP, rich_help_panel=OUTPUT),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP, rich_help_panel=OUTPUT),
) -> None:
    def body() -> int:
        refuse_empty({"config": config})

        from ftrun import config as cfgmod
        from ftrun.commands.train import train

        file_values = cfgmod.load_toml(config) if config else None
        return train(cfgmod.build(file_values=file_values, overrides=opts), overwrite=overwrite, json_out=json_out)

    raise typer.Exit(guarded(body) or 0)


COMPARE_HELP = """Train two configurations (or read two run dirs), check both schedules, report side by side.

A and B are presets (streaming, baseline), config .toml files, or existing run dirs (a run
of several hosts: its groups' run dirs joined by commas, e.g. job-group0,job-group1). Both
trainings share model, data, seed, replicas, steps and an emulated link (--link; by default
one on which plain DiLoCo's full-model sync takes about a quarter of H steps of compute: the
step is calibrated where it runs, and the link chosen again from the first run's measured
step when that is more than 25% off; the summary states the share asked for and the share
achieved). Writes report.json, report.md and timeline.png. Exit 0 = both schedules pass, 1 = a
failure.

Example: ftrun compare streaming baseline --link 1gbit,20ms

Example: ftrun compare profiles/cmp/streaming profiles/cmp/baseline --name again
"""


@panel_command("compare", COMPARE_HELP, "Train (or read) two configurations, check both, report side by side.")
@config_options("compare")
def compare_cmd(
    runs: list[str] = typer.Argument(..., metavar="A B", help="Two presets/config files, or two run dirs."),
    opts: Any = None,
    name: str | None = typer.Option(
        None, help="Compare directory name under OUT (default: compare-<time>).", rich_help_panel=OUTPUT
    ),
    expect_hidden: float | None = typer.Option(
        None,
        help="Exit 1 when the first run hides less than this share of its communication.",
        rich_help_panel=COMPARISON,
    ),
    repeat: int = typer.Option(
        1,
        help="Train each run N times, alternating which goes first; report median and spread.",
        rich_help_panel=COMPARISON,
    ),
    junit: str | None = typer.Option(None, "--junit", metavar="<path>", help=JUNIT_HELP, rich_help_panel=OUTPUT),
    overwrite: bool = typer.Option(False, help=OVERWRITE_HELP, rich_help_panel=OUTPUT),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP, rich_help_panel=OUTPUT),
) -> None:
    def body() -> int:
        refuse_empty({"runs": runs, "name": name, "junit": junit}, {"runs": "A/B"})

        from ftrun.commands.compare import compare

        return compare(
            runs,
            opts,
            json_out,
            expect_hidden,
            overwrite=overwrite,
            name=name,
            repeat=repeat,
            junit=Path(junit) if junit is not None else None,
        )

    raise typer.Exit(guarded(body) or 0)


INSPECT_HELP = """Check traces against the streaming-DiLoCo schedule: per replica, fragment and step.

PATH is a run dir from `ftrun train`, a folder of traces, or trace files (.json, .json.gz).
Several run dirs of one multi-host job (NAME-group0 NAME-group1 ...) are checked as one run.
Traces without a manifest need --fragments, --sync-every and --fragment-sync-delay.
Exit 0 = every send and sync landed as expected, 1 = mismatch, 2 = bad input.

Example: ftrun inspect-trace profiles/streaming-0001
"""


@app.command("inspect-trace", help=INSPECT_HELP, short_help="Check traces against the streaming-DiLoCo schedule.")
@config_options("ftrun.config.commands:InspectOptions", panels=False)
def inspect_cmd(
    paths: list[str] = typer.Argument(..., metavar="PATH", help="Run dir, trace folder or trace files."),
    opts: Any = None,
) -> None:
    def body() -> int:
        refuse_empty({"paths": paths}, {"paths": "PATH"})
        from ftrun.commands.inspect_trace import inspect_trace

        return inspect_trace([Path(p) for p in paths], opts)

    raise typer.Exit(guarded(body) or 0)


LAUNCH_HELP = """Run any torchft script as R replica groups, find its traces and check them.

Starts a torchft lighthouse (unless --lighthouse), then one torchrun job of G ranks per replica
group running SCRIPT unchanged with REPLICA_GROUP_ID, NUM_REPLICA_GROUPS, TORCHFT_LIGHTHOUSE
(plus FTRUN_RUN_DIR, FTRUN_TRACE_DIR and, with CUDA, NCCL_HOSTID), each group in its own
working dir OUT/RUN_NAME/groups/replica{r}/ (give input paths in ARGS as absolute paths).
Afterwards it finds every chrome trace the script wrote there, writes manifest.json and
checks the traces against --fragments/--sync-every/--fragment-sync-delay (as inspect-trace).
Exit 0 = all groups exited 0 and the check passed, 1 = a group failed or the check failed,
2 = bad input or no trace found, 130 = interrupted.

Example (the script in ftrun's examples/): ftrun launch --replicas 2 --fragments 2 --sync-every 4
--fragment-sync-delay 1 -- examples/train_diloco_min.py
"""


@panel_command("launch", LAUNCH_HELP, "Run any torchft script as replica groups; find and check its traces.")
@config_options("ftrun.config.commands:LaunchOptions")
def launch_cmd(
    script_and_args: list[str] | None = typer.Argument(
        None, metavar="-- SCRIPT.py [ARGS...]", help="The script and its arguments, after --."
    ),
    opts: Any = None,
) -> None:
    def body() -> int:
        from ftrun.commands.launch import launch

        return launch(list(script_and_args or []), opts)

    raise typer.Exit(guarded(body) or 0)


LIGHTHOUSE_HELP = """Run torchft's lighthouse (same flags and defaults as torchft_lighthouse) and print its URL.

Replica groups on any host join it with `ftrun train --lighthouse URL --replica-group-id K`.
Ctrl-C stops it.

Example: ftrun lighthouse --bind 0.0.0.0:29510 --min-replicas 2
"""


@app.command("lighthouse", help=LIGHTHOUSE_HELP, short_help="Run torchft's lighthouse and print its URL.")
@refuses_blank()
def lighthouse_cmd(
    bind: str = typer.Option("[::]:29510", help="HOST:PORT to bind (port 0: a free port)."),
    min_replicas: int = typer.Option(..., help="Minimum replica groups for a quorum."),
    join_timeout_ms: int = typer.Option(
        60000, help="How long to wait for heartbeating stragglers before issuing a quorum."
    ),
    quorum_tick_ms: int = typer.Option(100, help="How often to check for a quorum."),
    heartbeat_timeout_ms: int = typer.Option(5000, help="How long without a heartbeat before a replica is dead."),
) -> None:
    def body() -> int:
        from ftrun.commands.lighthouse import serve

        return serve(bind, min_replicas, join_timeout_ms, quorum_tick_ms, heartbeat_timeout_ms)

    raise typer.Exit(guarded(body) or 0)


VIEW_HELP = """Open a run's traces and scalars in TensorBoard's PyTorch profiler plugin.

One profiler run named after RUN_DIR, one worker per replica{r}_rank{g},
plus the tb/replica{r} scalars. Binds 127.0.0.1 unless --host is given.
Prints the URL once TensorBoard answers; Ctrl-C stops it.
Exit 2 = not a run dir with traces, or the port is in use.

Example: ftrun view profiles/streaming-0001 --port 0
"""


@app.command("view", help=VIEW_HELP, short_help="Open a run's traces and scalars in TensorBoard.")
@refuses_blank({"run_dir": "RUN_DIR"})
def view_cmd(
    run_dir: str = typer.Argument(..., metavar="RUN_DIR", help="Run dir from `ftrun train` (with traces/)."),
    port: int = typer.Option(6006, help="Port (0: a free port)."),
    host: str = typer.Option("127.0.0.1", help="Address to bind (0.0.0.0: all interfaces)."),
) -> None:
    def body() -> int:
        from ftrun.commands.view import view

        return view(Path(run_dir), port=port, host=host)

    raise typer.Exit(guarded(body) or 0)


SWEEP_HELP = """Run a grid of trainings (the product of the axes) and check every cell.

Axes vary any `ftrun train` option: --axis KEY=V1,V2,... (values with commas: separate them
with ';'); --preset pgs (every torchft process group x bucketize x streaming/baseline x
quantize, and one cell per group killing group 1 at step 15: its recovery; --axis kill=none
drops those), tau (tau = 0..H/F-1 on compare's default link), fragments (F over the divisors of H).
Other train flags are shared by all cells. Each cell is a real `ftrun train` plus the
inspect-trace analysis and the replica-agreement check; verdicts: pass, fail, failed-commits,
crashed, unavailable (this host cannot run it), invalid (a torchft/ftrun rule forbids it).
Writes OUT/NAME/: one run dir per cell, sweep.json, sweep.md, sweep.png.
Exit 0 = every cell that could run passed, 1 = otherwise (failing cells named), 2 = bad input.

Example: ftrun sweep --preset pgs --steps 40

Example: ftrun sweep --axis fragments=1,2,4 --axis link=1gbit,20ms;100mbit,20ms --steps 40
"""


@panel_command("sweep", SWEEP_HELP, "Run a grid of trainings and check every cell.")
@config_options("sweep")
def sweep_cmd(
    preset: str | None = typer.Option(None, help="pgs, tau or fragments.", rich_help_panel=GRID),
    axis: list[str] | None = typer.Option(
        None, "--axis", metavar="KEY=V1,V2", help="An axis over a train option. Repeatable.", rich_help_panel=GRID
    ),
    name: str | None = typer.Option(
        None, help="Sweep directory name under OUT (default: sweep-<preset>-<time>).", rich_help_panel=OUTPUT
    ),
    parallel: int = typer.Option(
        1, help="Run K cells at once (timing figures are then distorted).", rich_help_panel=GRID
    ),
    resume: bool = typer.Option(
        False, help="Finish the sweep OUT/NAME: skip cells that hold a finished result.", rich_help_panel=GRID
    ),
    warm_start: bool = typer.Option(
        False,
        help="Start the next cell while a cell trains, parked before torchft's Manager (distorts timing figures).",
        rich_help_panel=GRID,
    ),
    junit: str | None = typer.Option(None, "--junit", metavar="<path>", help=JUNIT_HELP, rich_help_panel=OUTPUT),
    metric: str = typer.Option(
        "exposed_comm_per_sync_ms",
        help="Plotted: exposed_comm_per_sync_ms, steps_per_s, final_loss, hidden_share, commits, failed_commits.",
        rich_help_panel=GRID,
    ),
    config: str | None = typer.Option(
        None, "--config", metavar="<path>", help="TOML file shared by every cell.", rich_help_panel=RUN
    ),
    opts: Any = None,
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP, rich_help_panel=OUTPUT),
) -> None:
    def body() -> int:
        refuse_empty({"preset": preset, "axis": axis, "name": name, "junit": junit, "metric": metric, "config": config})

        from ftrun.commands.sweep import sweep

        return sweep(
            preset,
            list(axis or []),
            opts,
            config,
            name,
            parallel,
            resume,
            metric,
            json_out,
            junit=Path(junit) if junit is not None else None,
            warm_start=warm_start,
        )

    raise typer.Exit(guarded(body) or 0)


PLAN_HELP = """Predict whether streaming DiLoCo hides its communication on a link, vs plain DiLoCo.

A pure what-if model of one replica's timeline (compute per step; at each quorum the slowest
replica group's arrival, the lighthouse's reply and the held round trip; each fragment's ring
allreduce queued on the link with the emulator's cost; the sync blocking for what has not
arrived tau steps after the send). Inputs: --from RUN_DIR (fragment bytes, replicas, schedule,
compute step and the groups' drift of a run) or --params, --dtype and --step-ms (or a
FLOPs-based step: --tokens-per-step, --flops-per-gpu, --gpus-per-replica, --mfu).
--replicas, --fragments, --sync-every and --fragment-sync-delay default to the run's, else
R=2, F=2, H=20, tau=5. --data-parallel adds data-parallel training (an allreduce every step). Prints exposed
communication, utilisation, bandwidth and the smallest tau and F that reach --target-util.
--check DIR predicts every run of a compare or sweep dir on its own link and compares with what
was measured (exit 1 when an error exceeds --tolerance).

Example: ftrun plan --params 1000000000 --dtype bf16 --step-ms 400 --sweep-link 10mbit..10gbit,20ms --png plan.png

Example (the Streaming DiLoCo paper's 1B run): ftrun plan --params 1e9 --dtype fp4 --dp-dtype bf16 --step-ms 100
--tokens-per-step 524288 --layers 24 --layers-per-fragment 3 --sync-every 96 --fragment-sync-delay 1 --data-parallel
--train-tokens 25e9 --link 1gbit

Example: ftrun plan --check profiles/compare-20260101-120000
"""


@app.command("plan", help=PLAN_HELP, short_help="What-if model: will streaming DiLoCo hide my communication?")
@config_options("ftrun.plan.options:PlanRequest", panels=False)
def plan_cmd(opts: Any = None) -> None:
    def body() -> int:
        from ftrun.commands.plan import run

        return run(opts)

    raise typer.Exit(guarded(body) or 0)


@runtime_checkable
class _UsageError(Protocol):
    """typer's (vendored click's) UsageError family, duck-typed: typer exports no public class for it."""

    exit_code: int

    def format_message(self) -> str: ...

    def show(self) -> None: ...


def main() -> None:
    """The console script. A usage error (unknown option or command, a value of the wrong type)
    is one line naming the command, exit 2, like every other bad input."""
    try:
        rv = app(prog_name="ftrun", standalone_mode=False)
    except Exception as e:
        if not isinstance(e, _UsageError):
            raise
        if type(e).__name__ == "NoArgsIsHelpError":  # `ftrun` alone: the help, as before
            e.show()
            sys.exit(0)
        ctx = getattr(e, "ctx", None)
        where = f"{ctx.command_path}: " if ctx is not None else ""
        try:
            _fail(f"{where}{e.format_message()}", e.exit_code)
        except typer.Exit as x:
            sys.exit(x.exit_code)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
