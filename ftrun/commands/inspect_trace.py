"""``ftrun inspect-trace``: run the check (``analyze``), render it, optionally export for Perfetto
and write JUnit XML (``ftrun.report.junit``).

Exit 0 pass, 1 mismatch (BadInput -> 2 in cli)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from ftrun.check.analyze import analyze
from ftrun.config.commands import InspectOptions
from ftrun.errors import BadInput

if TYPE_CHECKING:
    from ftrun import layout
    from ftrun.check.result import Report
    from ftrun.report.perfetto import PerfettoExport


def inspect_trace(
    paths: Sequence[Path], opts: InspectOptions | None = None, on_done: Callable[[int], None] | None = None
) -> int:
    """``opts``: the command's options (``ftrun.config.commands``; None: the defaults).
    ``on_done``: called with the exit code once everything is written, while what the check
    built is still alive (the command line exits there, without freeing it)."""
    from ftrun.trace.load import LIMIT_FLAG, MAX_TRACE_BYTES

    req = opts or InspectOptions()
    max_trace_mb, overwrite = req.max_trace_mb, req.overwrite
    export_perfetto = Path(req.export_perfetto) if req.export_perfetto is not None else None
    junit = Path(req.junit) if req.junit is not None else None
    if max_trace_mb is not None and max_trace_mb < 1:
        raise BadInput(f"{LIMIT_FLAG} {max_trace_mb}: must be at least 1")
    limit = max_trace_mb << 20 if max_trace_mb is not None else MAX_TRACE_BYTES
    outs = [(export_perfetto, "--export-perfetto"), (junit, "--junit")]
    if any(o is not None for o, _ in outs):
        _check_outputs(paths, outs, overwrite)
    # One short process making ~1M objects that are never cyclic (gc=False event structs, their
    # lists): the cyclic collector only walks them again and again (measured: ~25 ms of the
    # parent's 0.6 s on a 295 MB trace). Refcounting still frees everything as before.
    with _cyclic_gc_paused():
        report = analyze(
            paths,
            fragments=req.fragments,
            sync_every=req.sync_every,
            fragment_sync_delay=req.fragment_sync_delay,
            step_numbering=req.step_numbering,
            allow_failed_commits=req.allow_failed_commits,
            merge_jobs=req.merge_jobs,
            max_trace_bytes=limit,
        )
        from ftrun.check.recovery import recovery_of_run_dir

        recovery = [x.record() for rd in report.run_dirs for x in recovery_of_run_dir(Path(rd))]
        if junit is not None:
            from ftrun.output import atomic_write
            from ftrun.report.junit import inspect_junit

            atomic_write(junit, inspect_junit(report), "--junit", overwrite)
        exported = None
        if export_perfetto is not None:
            exported = _export(report, export_perfetto, recovery, limit, overwrite)
        if req.json_out:
            import sys

            from ftrun.report.inspect_json import inspect_json

            sys.stdout.write(msgspec.json.encode(inspect_json(report, recovery, exported)).decode() + "\n")
        else:
            _print(report, recovery, exported)
        code = 0 if report.ok else 1
        if on_done is not None:
            on_done(code)
        return code


def _check_outputs(paths: Sequence[Path], outs: list[tuple[Path | None, str]], overwrite: bool) -> None:
    """Before reading anything: never write onto what is read, nor onto a user's file, nor into a
    missing dir (the Perfetto export makes its own; ``ftrun.output``)."""
    from ftrun.output import check_target, check_writable
    from ftrun.trace.discover import run_dir_of

    given = [Path(p) for p in paths]
    for target, flag in outs:
        if target is not None:
            check_target(
                target,
                flag,
                inputs=[p for p in given if not p.is_dir()],
                reading=[p for p in given if p.is_dir()] + [rd for p in given if (rd := run_dir_of(p)) is not None],
            )
            check_writable(target, flag, overwrite, parent_made=flag == "--export-perfetto")


def _export(
    report: Report, target: Path, recovery: list[layout.RecoveryRecord], limit: int, overwrite: bool
) -> PerfettoExport:
    """``--export-perfetto``: the traces with the verdicts, and the recovery on the traces' clock."""
    from ftrun.report.perfetto import export_perfetto

    base_ns = None  # the traces' clock origin, for the recovery process
    if recovery and report.workers and report.workers[0].files:
        from ftrun.check.provenance import header
        from ftrun.trace.load import load_trace

        base_us = header(load_trace(Path(report.workers[0].files[0]), limit)).base_us
        base_ns = None if base_us is None else base_us * 1e3
    return export_perfetto(report, target, recovery, base_ns, overwrite=overwrite, max_trace_bytes=limit)


def _print(report: Report, recovery: list[layout.RecoveryRecord], exported: PerfettoExport | None) -> None:
    """The report as text (``ftrun.report.inspect_view``), the recovery, where the export went."""
    from ftrun.report.inspect_view import render

    render(report)
    if recovery:
        from ftrun.console import console
        from ftrun.report.recovery_view import print_recovery

        print_recovery(console(), recovery)
    if exported is not None:
        from ftrun.console import escape_controls

        print(
            f"perfetto: {escape_controls(exported.path)} ({exported.events} trace events, "
            f"{exported.verdicts} verdicts; open in ui.perfetto.dev)"
        )


@contextlib.contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off inside (as it was, after); a forked trace reader inherits it."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
