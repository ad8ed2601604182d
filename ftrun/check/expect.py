"""What the traces should show: the schedule (manifest or flags).

The expected events are ``ftrun.schedule.Schedule.events`` — never re-derived here — limited
to the steps each trace file captured; commit failures (``ftrun.check.commits``) shift them.
"""

from __future__ import annotations

from pathlib import Path

from ftrun import layout
from ftrun.config import ScheduleConfig
from ftrun.errors import BadInput
from ftrun.schedule import Schedule, ScheduleError
from ftrun.trace.discover import Inputs


def _spec_hint(run_dir: Path) -> str:
    """What the interrupted run's ``spec.json`` says it was started with, as flags to pass."""
    path = run_dir / layout.SPEC
    s: ScheduleConfig
    try:
        s = layout.read_spec(path).config.schedule
    except BadInput:  # none, not one, or of another format (``layout.refuse_format``)
        return "; to check the traces it wrote anyway, give --fragments --sync-every --fragment-sync-delay"
    flags = f"--fragments {s.fragments} --sync-every {s.sync_every} --fragment-sync-delay {s.fragment_sync_delay}"
    return f"; it was started with {flags}: pass them to check the traces it wrote"


# How messages name the three schedule values (the flags of inspect-trace, by their keys).
_FLAGS = {"fragments": "--fragments", "sync_every": "--sync-every", "fragment_sync_delay": "--fragment-sync-delay"}
Triple = tuple[int | None, int | None, int | None]


def schedule_for(
    inputs: Inputs, fragments: int | None, sync_every: int | None, fragment_sync_delay: int | None
) -> Schedule:
    """The manifest's schedule (flags, if given, must agree) or the one the flags give."""
    flags: Triple = (fragments, sync_every, fragment_sync_delay)
    m = inputs.manifest
    values = flags
    if m is not None:
        recorded: Triple = (m.schedule.fragments, m.schedule.sync_every, m.schedule.fragment_sync_delay)
        where = inputs.run_dir / "manifest.json" if inputs.run_dir else "manifest.json"
        if all(v is None for v in recorded):
            if any(v is None for v in flags):
                raise BadInput(
                    f"{where}: records no schedule (launched with --no-check); give --fragments, "
                    "--sync-every and --fragment-sync-delay"
                )
            # a manifest that records no schedule (ftrun launch --no-check): the flags say it
        elif any(v is None for v in recorded):
            raise BadInput(f"{where}: schedule needs integer fragments, sync_every, fragment_sync_delay")
        else:
            for k, v, want in zip(_FLAGS, flags, recorded, strict=True):
                if v is not None and v != want:
                    raise BadInput(f"{_FLAGS[k]} {v} disagrees with {where} ({k}={want})")
            values = recorded
    else:
        missing = [_FLAGS[k] for k, v in zip(_FLAGS, flags, strict=True) if v is None]
        if missing:
            first = inputs.files[0].path
            if inputs.interrupted:  # ftrun's own run, stopped before it wrote its manifest
                raise BadInput(
                    f"{inputs.interrupted[0]}: interrupted run (stopped before it finished: no manifest.json, "
                    f"so no schedule was recorded){_spec_hint(inputs.interrupted[0])}"
                )
            need = " ".join(missing)
            raise BadInput(f"{first}: no manifest.json for these traces; give the run's schedule with {need}")
    f, h, delay = values
    assert f is not None and h is not None and delay is not None
    try:
        return Schedule(f, h, delay)
    except ScheduleError as e:
        raise BadInput(f"schedule {e}") from None
