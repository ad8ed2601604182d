"""ftrun's Python API: the front door for tests and notebooks, the peer of ``cli.py``.

Torch-free (training runs in child processes, as with ``ftrun train``), and every function
calls the very code its command runs, so a verdict here is the command's verdict:

* ``check_traces(paths, ...) -> Report``: ``inspect-trace``'s analysis (``ftrun.check.analyze``);
* ``Schedule(fragments, sync_every, fragment_sync_delay).events(steps)``: what torchft's
  ``DiLoCo`` does when (``ftrun.schedule``);
* ``train(config, out=...) -> Run``: ``ftrun train`` in this process (its children train);
* ``compare(a, b, ...) -> Comparison``: ``ftrun compare``, without printing.

Bad input raises ``BadInput`` (the CLI's one-line message, which the CLI turns into exit 2); a
training that fails raises ``TrainFailed`` (exit 1 on the CLI). What is stable and how it
changes: README, "Python API and pytest plugin".
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Union

from ftrun import _API
from ftrun.errors import BadInput, RunFailed
from ftrun.schedule import Event, Schedule, ScheduleError  # noqa: F401  (Event: re-exported, __all__)

if TYPE_CHECKING:  # typing only: importing ftrun.api stays cheap (no msgspec, rich, typer)
    from ftrun import layout
    from ftrun.check import result as check_result
    from ftrun.check.result import EventResult
    from ftrun.config import RunConfig
    from ftrun.config.fields import ConfigValue as ConfigValue

# the one list of the API's names: ftrun's (``ftrun._API``), which re-exports them lazily
__all__ = list(_API)

PathLike = str | Path


def __getattr__(name: str):
    """``EventResult`` on first use: the check's records are msgspec Structs, and importing
    ftrun.api imports no msgspec."""
    if name == "EventResult":
        from ftrun.check.result import EventResult

        return EventResult
    raise AttributeError(f"module 'ftrun.api' has no attribute {name!r}")


StepNumbering = Literal["top", "end", "auto"]


class TrainFailed(RunFailed):
    """A training that ran and failed (a group crashed, replicas disagreed): the CLI's exit 1.
    ``run`` is its run dir, kept for its logs (None when nothing was written)."""

    def __init__(self, message: str, run: Run | None) -> None:
        super().__init__(message)
        self.run = run


@dataclass(frozen=True)
class Report:
    """The verdict of ``check_traces``: what ``inspect-trace`` prints, as values.

    ``events`` has one ``EventResult`` per expected or observed send/sync on every worker
    (``expected_step`` vs ``observed_step``, ``expected_fragment`` vs ``fragment``, ``ok``,
    ``problem``). ``raw`` is the check's own report (its fields may change between releases)."""

    raw: check_result.Report

    @property
    def ok(self) -> bool:
        """Every send and sync landed as expected, replicas agreed, no run problem: exit 0."""
        return self.raw.ok

    @property
    def verdict(self) -> str:
        """``"pass"`` or ``"fail"``."""
        return self.raw.verdict

    @property
    def problems(self) -> list[str]:
        """One line per problem, in the CLI's words (empty when ``ok``)."""
        return self.raw.problems()

    @property
    def events(self) -> list[EventResult]:
        return list(self.raw.events)

    @property
    def failing(self) -> list[EventResult]:
        """The events that did not land as expected."""
        return [e for e in self.raw.events if not e.ok]

    @property
    def failed_commits(self) -> list[layout.JsonObject]:
        """``{replica, rank, sync_step, fragment, source, explained_by_fault, ...}`` per failed commit
        (``FailedCommit`` as report.json writes it)."""
        return [c.to_json() for c in self.raw.failed_commits]

    @property
    def notes(self) -> list[str]:
        """What the traces could not tell (said once each); never a failure."""
        return list(self.raw.notes)

    @property
    def schedule(self) -> Schedule:
        s = self.raw.schedule
        return Schedule(s.fragments, s.sync_every, s.fragment_sync_delay)

    @property
    def numerics(self) -> layout.JsonObject | None:
        """The numeric check of the outer steps (``{checked, tolerance, problems}``), or None
        when it did not run: numerics were then not checked (never read None as a pass)."""
        import msgspec

        from ftrun.check.result import numerics_of

        n = numerics_of(self.raw)
        return None if n is None else msgspec.to_builtins(n)

    def table(self, width: int = 100) -> str:
        """The text ``inspect-trace`` prints: one table per worker, the problems, the verdict line."""
        from ftrun.report.inspect_view import render_text

        return render_text(self.raw, width)

    def failing_table(self) -> str:
        """The failing rows only (replica, rank, kind, expected→observed step and fragment,
        problem), then cross-replica and run problems. Empty when ``ok``."""
        from ftrun.report.inspect_view import failing_table

        return failing_table(self.raw)

    def to_json(self) -> layout.JsonObject:
        """``inspect-trace --json``'s object."""
        return self.raw.to_json()


def check_traces(
    paths: PathLike | Sequence[PathLike],
    *,
    schedule: Schedule | None = None,
    manifest: PathLike | None = None,
    step_numbering: StepNumbering | None = "top",
    allow_failed_commits: bool = False,
) -> Report:
    """Check the traces under ``paths`` (run dirs, trace folders or files) as ``inspect-trace`` does.

    ``schedule``: the schedule traces without a manifest ran (a run dir's manifest must agree
    with it, as ``--fragments/--sync-every/--fragment-sync-delay`` must). ``manifest``: take the
    schedule from this ``manifest.json`` (or run dir) instead, for traces kept elsewhere.
    ``step_numbering=None``: what the run recorded (``ftrun launch``), else top. ``BadInput``
    (the CLI's one line) on bad input."""
    from ftrun.check.analyze import analyze

    given = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if not given:
        raise BadInput("check_traces: no paths given")
    for p in given:  # as the CLI: '' is not "the current directory" (Path('') is '.')
        if isinstance(p, str) and not p.strip():
            raise BadInput(f"check_traces: path {p!r}: must not be empty")
    if not isinstance(allow_failed_commits, bool):  # 'no' is truthy: refuse it, never read it as True
        raise BadInput(f"check_traces: allow_failed_commits must be True or False, not {allow_failed_commits!r}")
    if schedule is not None and manifest is not None:
        raise BadInput("check_traces: give schedule or manifest, not both")
    if manifest is not None:
        schedule = _manifest_schedule(Path(manifest))
    if schedule is not None and not isinstance(schedule, Schedule):
        raise BadInput(f"check_traces: schedule must be an ftrun.Schedule, not {type(schedule).__name__}")
    f = schedule
    return Report(
        analyze(
            [Path(p) for p in given],
            fragments=f.fragments if f else None,
            sync_every=f.sync_every if f else None,
            fragment_sync_delay=f.fragment_sync_delay if f else None,
            step_numbering=step_numbering,
            allow_failed_commits=allow_failed_commits,
        )
    )


def _manifest_schedule(path: Path) -> Schedule:
    """The schedule a manifest (``manifest.json`` or the run dir holding it) records."""
    from ftrun import layout

    run_dir = path.parent if path.name == layout.MANIFEST else path
    if not (run_dir / layout.MANIFEST).is_file():
        raise BadInput(f"manifest {path}: no {layout.MANIFEST} there")
    s = layout.read_manifest(run_dir).schedule
    f, h, tau = s.fragments, s.sync_every, s.fragment_sync_delay
    if f is None or h is None or tau is None:
        raise BadInput(f"manifest {run_dir / layout.MANIFEST}: records no schedule (launched with --no-check)")
    try:
        return Schedule(f, h, tau)
    except ScheduleError as e:
        raise BadInput(f"manifest {run_dir / layout.MANIFEST}: schedule {e}") from None


@dataclass(frozen=True)
class Run:
    """A run dir of ``ftrun train`` (``path``): its manifest, summary and checked traces."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @functools.cached_property
    def manifest(self) -> layout.Manifest:
        from ftrun import layout

        return layout.read_train_manifest(self.path)

    @functools.cached_property
    def summary(self) -> layout.TrainSummary:
        """What ``ftrun train`` printed (``summary.json``), as the typed record ``layout.TrainSummary``:
        ``summary.replicas`` (per group: steps, last_step, commits, loss), ``.agreement``, ``.numerics``,
        ``.faults``, ``.recovery``, ``.ok``, ... (It was the file's dict before: ``summary["key"]`` still
        reads, with a ``DeprecationWarning``.) ``BadInput`` if the file is missing or not one."""
        from ftrun import layout

        return layout.read_train_summary(self.path)

    @functools.cached_property
    def report(self) -> Report:
        """``check_traces`` of the run dir (its manifest's schedule, top step numbering)."""
        return check_traces([self.path])

    def check(self, *, allow_failed_commits: bool = False) -> Report:
        return check_traces([self.path], allow_failed_commits=allow_failed_commits)


# a dict: the config fields by key, as a ``--config`` file spells them (``build`` checks each value)
ConfigLike = Union["RunConfig", Mapping[str, "ConfigValue"], PathLike]


def config_of(config: ConfigLike, out: PathLike | None = None) -> RunConfig:
    """A validated ``RunConfig`` from a ``RunConfig``, a dict of its fields (as a ``--config``
    file spells them) or a TOML file; ``out`` replaces its output root."""
    from ftrun import config as cfgmod

    if isinstance(config, cfgmod.RunConfig):
        cfg = config.replaced(**({"out": str(out)} if out is not None else {}))
        cfgmod.validate_config(cfg)
        return cfg
    if isinstance(config, dict):
        values = {str(k).replace("-", "_"): v for k, v in config.items()}
        file_values = cfgmod.FileValues(values, "config", {k: str(k) for k in config})
    elif isinstance(config, (str, Path)):
        file_values = cfgmod.load_toml(config)
    else:
        raise BadInput(f"train: config must be a RunConfig, a dict or a TOML path, not {type(config).__name__}")
    return cfgmod.build(file_values=file_values, out=str(out) if out is not None else None)


def train(config: ConfigLike, out: PathLike | None = None, *, overwrite: bool = False) -> Run:
    """``ftrun train`` with ``config``, quietly, into ``out`` (default: the config's, ``profiles``).

    Returns the run; ``TrainFailed`` (with ``.run``) when the training failed or the check of its
    traces FAILed (``check = False`` in the config skips it), ``BadInput`` when the config is
    refused (before anything starts)."""
    import threading

    from ftrun.commands.train import train as run_train

    cfg = config_of(config, out)
    if threading.current_thread() is not threading.main_thread():  # it handles SIGINT/SIGTERM to stop its children
        raise BadInput("train: call it from the main thread (it stops its processes on SIGINT/SIGTERM)")
    claimed: list[Path] = []  # the run dir, once ftrun train has claimed it (it may choose the name)
    try:
        if run_train(cfg, overwrite=overwrite, quiet=True, on_run_dir=claimed.append):  # its check FAILed: exit 1
            failed = Run(claimed[-1])
            check = failed.summary.check
            raise TrainFailed(f"{check.line if check else 'check failed'} (run dir {failed.path})", failed)
    except RunFailed as e:
        if isinstance(e, TrainFailed) or type(e) is not RunFailed:  # Interrupted: a stop, not a failure
            raise
        run_dir = claimed[-1] if claimed else None
        run = Run(run_dir) if run_dir is not None and run_dir.is_dir() else None
        raise TrainFailed(f"{e} (run dir {run.path})" if run is not None else str(e), run) from None
    return Run(claimed[-1])


@dataclass(frozen=True)
class Comparison:
    """``ftrun compare``'s result: ``result`` is its ``report.json``, the typed record
    ``ftrun.layout.CompareReport`` (its fields the file's keys: ``.runs``, ``.link``,
    ``.verdict``, ...; the run dirs as given, not relative to the file); ``reports`` each run's
    check."""

    result: layout.CompareReport
    reports: list[list[Report]]

    @property
    def ok(self) -> bool:
        """Both schedules passed (and ``expect_hidden`` held): the CLI's exit 0."""
        return self.result.ok

    @property
    def dir(self) -> Path:
        return Path(self.result.compare_dir)


def compare(
    a: str | PathLike | Run,
    b: str | PathLike | Run,
    *,
    settings: Mapping[str, ConfigValue] | None = None,
    link: str | None = None,
    out: PathLike | None = None,
    name: str | None = None,
    expect_hidden: float | None = None,
    repeat: int = 1,
    overwrite: bool = False,
) -> Comparison:
    """``ftrun compare A B``: two presets or TOML files (trained, sharing ``settings``: train
    options by field name, e.g. ``{"steps": 20}``) or two runs (read). Writes report.json,
    report.md and timeline.png under ``out/name``; prints nothing."""
    from ftrun.commands.compare import train_quietly
    from ftrun.comparison.run import run_compare
    from ftrun.comparison.specs import SHARED_SETTINGS
    from ftrun.config import overrides

    settings = dict(settings or {})
    unknown = sorted(set(settings) - set(SHARED_SETTINGS))
    if unknown:
        raise BadInput(
            f"compare: settings {', '.join(unknown)}: not shared by both runs (known: {', '.join(SHARED_SETTINGS)})"
        )
    specs = [str(x.path) if isinstance(x, Run) else str(x) for x in (a, b)]
    opts = overrides({**settings, "link": link, "out": str(out) if out is not None else None})
    result, reports = run_compare(
        specs, opts, expect_hidden, overwrite=overwrite, name=name, repeat=repeat, progress=False, train=train_quietly
    )
    return Comparison(result, [[Report(r) for r in reps] for reps in reports])
