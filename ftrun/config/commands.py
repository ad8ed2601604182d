"""The options of ``inspect-trace`` and ``launch``, declared once each (``InspectOptions``,
``LaunchOptions``; ``ftrun.cli`` generates their flags, ``ftrun.config.options.declared``). A
field without ``Opt`` is a config key and takes the config field's flags and help, so the
schedule's flags read the same in train, sweep, plan, inspect-trace and launch. Cheap to import.
"""

# No ``from __future__ import annotations``: the declarations are read at every CLI start.

from typing import Annotated

import msgspec

from ftrun.config.parts import FAULTS, GROUPS, OUTPUT, PROFILING, TIMEOUTS, Opt

# inspect-trace's and launch's: how the traces number their steps (one help text for both)
StepNumbering = Annotated[
    str | None,
    Opt(
        "top (prof.step() at loop top, torchft's way), end or auto (ProfilerStep#0 tells); default: run's, else top.",
        panel=PROFILING,
    ),
]
JUNIT_HELP = "Also write JUnit XML here: a case per checked event class and worker, or per sweep cell."


class InspectOptions(msgspec.Struct, kw_only=True, frozen=True):
    """``ftrun inspect-trace``'s options (its PATHs are its argument). The schedule: for traces
    without a manifest."""

    fragments: int | None = None
    sync_every: int | None = None
    fragment_sync_delay: int | None = None
    step_numbering: StepNumbering = None
    json_out: Annotated[bool, Opt("Print one JSON object instead of tables.", flags=("--json",))] = False
    export_perfetto: Annotated[
        str | None,
        Opt(
            "Also write OUT.json (.json.gz): the traces plus ftrun's verdicts, for Perfetto's UI.",
            flags=("--export-perfetto",),
            metavar="<path>",
        ),
    ] = None
    allow_failed_commits: Annotated[
        bool, Opt("Do not fail on commits that failed without an injected fault.", flags=("--allow-failed-commits",))
    ] = False
    merge_jobs: Annotated[
        bool,
        Opt(
            "Check traces of different runs (other world size, GPUs or wall clock) together anyway.",
            flags=("--merge-jobs",),
        ),
    ] = False
    max_trace_mb: Annotated[
        int | None,
        Opt(
            "Refuse a trace file whose JSON (gunzipped) exceeds this many MB (default 4096).", flags=("--max-trace-mb",)
        ),
    ] = None
    overwrite: Annotated[
        bool, Opt("Let --export-perfetto replace a file ftrun did not write.", flags=("--overwrite",))
    ] = False
    junit: Annotated[str | None, Opt(JUNIT_HELP, flags=("--junit",), metavar="<path>")] = None


class LaunchOptions(msgspec.Struct, kw_only=True, frozen=True):
    """``ftrun launch``'s options (its script and the script's arguments are its argument). The
    schedule: the one the script runs, for the check."""

    replicas: int = 2
    nproc_per_replica: int = 1
    lighthouse: str | None = None
    min_replicas: Annotated[
        int | None,
        Opt(
            "min_replicas of the lighthouse ftrun starts (default R: every group joins the first quorum).", panel=GROUPS
        ),
    ] = None
    fragments: int | None = None
    sync_every: int | None = None
    fragment_sync_delay: int | None = None
    no_inspect: Annotated[
        bool,
        Opt(
            "Do not check the traces (schedule flags then optional).",
            flags=("--no-check", "--no-inspect"),
            panel=PROFILING,
        ),
    ] = False
    step_numbering: StepNumbering = None
    kill: Annotated[
        list[str],
        Opt(
            "R@SECONDSs or R@line:REGEX, optionally :sigterm (default SIGKILL). Repeatable.",
            flags=("--kill",),
            panel=FAULTS,
        ),
    ] = msgspec.field(default_factory=list)
    restarts: int | None = None
    timeout: Annotated[
        float | None,
        Opt(
            "Seconds a group may run without joining a quorum (torchft's log) before the launch fails.", panel=TIMEOUTS
        ),
    ] = None
    env: Annotated[
        list[str], Opt("K=V added to every group's environment. Repeatable.", flags=("--env",), panel=GROUPS)
    ] = msgspec.field(default_factory=list)
    out: str = "profiles"
    run_name: Annotated[str | None, Opt("Run directory name (default launch-<time>).", panel=OUTPUT)] = None
    overwrite: Annotated[bool, Opt("Replace an existing ftrun run dir of the same name.", panel=OUTPUT)] = False
    json_out: Annotated[bool, Opt("Print the summary (and the check) as JSON.", flags=("--json",), panel=OUTPUT)] = (
        False
    )
