"""What the traces should show: the schedule (manifest or flags).

The expected events are ``ftrun.schedule.Schedule.events`` — never re-derived here — limited
to the steps each trace file captured; commit failures (``ftrun.check.commits``) shift them.
"""

from __future__ import annotations

from typing import Optional

from ftrun import layout
from ftrun.errors import BadInput
from ftrun.schedule import Schedule, ScheduleError
from ftrun.trace.discover import Inputs


def _spec_hint(run_dir) -> str:
    """What the interrupted run's ``spec.json`` says it was started with, as flags to pass."""
    try:
        c = layout.read_spec(run_dir / layout.SPEC).config
        flags = f"--fragments {c['fragments']} --sync-every {c['sync_every']} --fragment-sync-delay {c['fragment_sync_delay']}"
    except (BadInput, KeyError, TypeError, AttributeError):
        return "; to check the traces it wrote anyway, give --fragments --sync-every --fragment-sync-delay"
    return f"; it was started with {flags}: pass them to check the traces it wrote"


def schedule_for(
    inputs: Inputs, fragments: Optional[int], sync_every: Optional[int], delay: Optional[int]
) -> Schedule:
    """The manifest's schedule (flags, if given, must agree) or the one the flags give."""
    flags = {"fragments": fragments, "sync_every": sync_every, "fragment_sync_delay": delay}
    sched = {k: getattr(inputs.manifest.schedule, k) for k in flags} if inputs.manifest is not None else {}
    if inputs.manifest is not None and all(v is None for v in sched.values()) and all(v is not None for v in flags.values()):
        values = flags  # a manifest that records no schedule (ftrun launch --no-inspect): the flags say it
    elif inputs.manifest is not None:
        where = inputs.run_dir / "manifest.json" if inputs.run_dir else "manifest.json"
        if all(v is None for v in sched.values()):
            raise BadInput(f"{where}: records no schedule (launched with --no-inspect); give --fragments, --sync-every "
                           "and --fragment-sync-delay")
        if any(v is None for v in sched.values()):
            raise BadInput(f"{where}: schedule needs integer fragments, sync_every, fragment_sync_delay")
        values = sched
        for k, v in flags.items():
            if v is not None and v != values[k]:
                raise BadInput(f"--{k.replace('_', '-')} {v} disagrees with {where} ({k}={values[k]})")
    else:
        missing = [k for k, v in flags.items() if v is None]
        if missing:
            first = inputs.files[0].path
            need = " ".join(f"--{k.replace('_', '-')}" for k in missing)
            if inputs.interrupted:  # ftrun's own run, stopped before it wrote its manifest
                raise BadInput(f"{inputs.interrupted[0]}: interrupted run (stopped before it finished: no manifest.json, "
                               f"so no schedule was recorded){_spec_hint(inputs.interrupted[0])}")
            raise BadInput(f"{first}: no manifest.json for these traces; give the run's schedule with {need}")
        values = flags
    try:
        return Schedule(values["fragments"], values["sync_every"], values["fragment_sync_delay"])
    except ScheduleError as e:
        raise BadInput(f"schedule {e}") from None
