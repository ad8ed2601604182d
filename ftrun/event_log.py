"""Read the JSON-lines event logs: the ranks' step logs (``events/replica{r}_rank{g}.jsonl``, one
``ftrun.layout.EventRecord`` per line) and the parent's run log (``events/run.jsonl``, one
``ftrun.layout.RunEvent`` per line), the ranks' lifecycle logs (``events/lifecycle/``, one
``ftrun.layout.LifecycleEvent`` per line); and what one rank's log says about its run
(``replica_stats``). The one reader; torch-free.

A group killed mid-write leaves a torn last line, and a relaunched group appends after it, so
a torn record (a line starting with ``{`` that does not parse) may also sit mid-file: it is
skipped. Anything else that is not a record is skipped too, unless ``strict``, where a line
that is not even a torn record, a JSON object that is not a record, or an unreadable file, is
``BadInput`` naming the place.

A rank's step log is evidence, so ``read_event_log`` also says where it is damaged
(``EventLog.damage``, one line each naming file and line; the check reports them as problems)
instead of skipping it silently: a torn line is accepted only where its writer ended (the
file's last line, or a line after which a later incarnation, a higher ``restart``, wrote); a
line that looks like a record (``{``) but is malformed JSON (a ``NaN`` where a number belongs)
anywhere; a step missing from an incarnation's run of steps (each incarnation numbers its steps
one after another, jumping only where it rejoined: ``rejoined``). An integer outside int64 (what
the writers produce) is ``BadInput`` naming file, line and field when ``strict``, else skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, overload

import msgspec

from ftrun.errors import BadInput
from ftrun.layout import EventRecord, LifecycleEvent, RunEvent
from ftrun.small_files import Missing, read_file

# Bytes of one event log read at most: a step's line is ~0.3 KB, ~2 KB with the numerics
# sketches of a send and a sync, so 1 GB holds a million sketched steps of one rank.
EVENT_LOG_LIMIT = 1 << 30

R = TypeVar("R", EventRecord, RunEvent, LifecycleEvent)


@overload
def parse_lines(lines: Sequence[str | bytes], path: Path | None = None, strict: bool = False) -> list[EventRecord]: ...


@overload
def parse_lines(
    lines: Sequence[str | bytes], path: Path | None = None, strict: bool = False, *, record_type: type[R]
) -> list[R]: ...


def parse_lines(
    lines: Sequence[str | bytes], path: Path | None = None, strict: bool = False, record_type: type[Any] = EventRecord
) -> list[Any]:
    """The records of ``lines`` (torn and foreign lines skipped as the module docstring says),
    of ``record_type`` (``EventRecord`` unless given)."""
    out: list[Any] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(msgspec.json.decode(line, type=record_type))
        except msgspec.ValidationError as e:  # JSON, but not a record
            if strict and line.lstrip()[:1] in ("{", b"{"):
                raise BadInput(f"{path}:{n}: not an event record ({e})") from None
        except msgspec.DecodeError:
            text = line.decode(errors="replace") if isinstance(line, bytes) else line
            if strict and n != len(lines) and not text.lstrip().startswith("{"):
                raise BadInput(f"{path}:{n}: not a JSON line") from None
        except RecursionError:  # nested deeper than the decoder's stack (as small_files.decode_json)
            if strict:
                raise BadInput(f"{path}:{n}: not an event record (nested too deeply)") from None
    return out


def _lines(path: Path, strict: bool, what: str) -> list[str]:
    return _split(_read(path, strict, what), path, strict, what)


def _read(path: Path, strict: bool, what: str) -> bytes:
    try:
        return read_file(path, EVENT_LOG_LIMIT, what)
    except Missing:
        if strict:
            raise
        return b""


def _split(data: bytes, path: Path, strict: bool, what: str) -> list[str]:
    try:
        text = data.decode() if strict else data.decode(errors="replace")
    except UnicodeDecodeError as e:
        raise BadInput(f"{path}: unreadable {what} ({e})") from None
    return text.splitlines()


class EventLog(list[EventRecord]):
    """One rank's step records, and ``damage``: where its log is damaged (module docstring),
    one line each naming file and line."""

    def __init__(self, records: Sequence[EventRecord] = (), damage: Sequence[str] = ()) -> None:
        super().__init__(records)
        self.damage = list(damage)


def read_event_log(path: Path, strict: bool = False) -> EventLog:
    """Every step record of one rank's event log ([] for a missing file unless ``strict``), with
    where it is damaged (``EventLog.damage``; the module docstring says what counts)."""
    data = _read(path, strict, "event log")
    # (one pass over the bytes in C: a per-line search for long digit runs would cost ~7x the parse)
    long = _LONG_DIGITS in data.translate(_DIGITS)
    return _step_records(_split(data, path, strict, "event log"), path, strict, long)


def read_run_events(path: Path, strict: bool = False) -> list[RunEvent]:
    """Every record of the parent's run log ``events/run.jsonl`` ([] for a missing file unless ``strict``)."""
    return parse_lines(_lines(path, strict, "run log"), path, strict, record_type=RunEvent)


def read_lifecycle(path: Path, strict: bool = False) -> list[LifecycleEvent]:
    """Every record of one rank's lifecycle log ``events/lifecycle/replica{r}_rank{g}.jsonl``."""
    return parse_lines(_lines(path, strict, "lifecycle log"), path, strict, record_type=LifecycleEvent)


# an integer of 19+ digits may be outside int64: only a line with one is walked for it
_LONG_NUMBER = re.compile(r"[0-9]{19}")
_DIGITS, _LONG_DIGITS = bytes.maketrans(b"0123456789", b"0" * 10), b"0" * 19
INT_BOUND = 1 << 63


def _out_of_range(value: object, where: str = "$") -> Iterator[str]:
    """Where in a decoded JSON ``value`` an integer lies outside int64."""
    if isinstance(value, bool):
        return
    if isinstance(value, int) and not -INT_BOUND <= value < INT_BOUND:
        yield f"{where} ({len(str(abs(value)))} digits)"
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _out_of_range(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _out_of_range(v, f"{where}[{i}]")


def _decode(line: str, path: Path, n: int, strict: bool, last_line: bool, long: bool) -> EventRecord | str | None:
    """Line ``n`` of ``path`` as a record; else "torn" (cut short), "damaged: why"
    (malformed JSON that looks like a record), or None (not a record: skipped, or ``BadInput``
    when ``strict`` as ``parse_lines`` says)."""
    try:
        rec = msgspec.json.decode(line, type=EventRecord)
    except RecursionError:  # nested deeper than the decoder's stack (as small_files.decode_json)
        return "damaged: nested too deeply"
    except msgspec.ValidationError as e:  # JSON, but not a record
        if strict and line.lstrip()[:1] == "{":
            raise BadInput(f"{path}:{n}: not an event record ({e})") from None
        return None
    except msgspec.DecodeError as e:
        if not line.lstrip().startswith("{"):
            if strict and not last_line:
                raise BadInput(f"{path}:{n}: not a JSON line") from None
            return None
        # a cut record: the decoder ran out of input, or the line lacks the closing brace
        # (a cut inside a number reads as an invalid number)
        if "truncated" in str(e) or not line.rstrip().endswith("}"):
            return "torn"
        return f"damaged: {e}"
    if long and _LONG_NUMBER.search(line):
        try:
            far = next(_out_of_range(msgspec.json.decode(line)), None)
        except RecursionError:  # the walk recurses too: a record this deep is damaged
            return "damaged: nested too deeply"
        if far is not None:
            if strict:
                raise BadInput(f"{path}:{n}: a number out of range at {far}")
            return None
    return rec


def _step_records(lines: Sequence[str], path: Path, strict: bool, long: bool = True) -> EventLog:
    """The records of ``lines`` and their damage (module docstring); ``long``: some line may hold
    an integer outside int64 (a run of 19 digits)."""
    out = EventLog()
    torn: list[int] = []  # torn lines since the last record: accepted once a later incarnation writes
    last: tuple[int, EventRecord] | None = None  # (line, record) of the last stepped record
    restart = 0  # the last record's incarnation
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        got = _decode(line, path, n, strict, n == len(lines), long)
        if got is None:
            continue
        if got == "torn":
            torn.append(n)
            continue
        if isinstance(got, str):
            out.damage.append(f"{path}:{n}: a damaged record ({got.removeprefix('damaged: ')})")
            last = None  # no gap named across it: this line may hold the step that seems missing
            continue
        if got.restart < restart + len(torn):  # each cut line needs a later incarnation after it
            out.damage += [
                f"{path}:{t}: a cut record, not where its writer ended (line {n} is the same incarnation's)"
                for t in torn
            ]
            last = None
        torn, restart = [], got.restart
        out.append(got)
        if got.step is not None:
            _gap(out, path, n, got, last)
            last = (n, got)
    return out


def _gap(out: EventLog, path: Path, n: int, rec: EventRecord, last: tuple[int, EventRecord] | None) -> None:
    """A step missing between ``last`` and ``rec`` (line ``n``), named in ``out.damage``: an
    incarnation numbers its steps one after another, jumping only where it rejoined."""
    if last is None or last[1].restart != rec.restart or rec.rejoined or rec.step is None:
        return
    prev = last[1].step
    assert prev is not None  # (last is a stepped record)
    if rec.step == prev + 1:
        return
    what = (
        f"the record of step {prev + 1} is missing"
        if rec.step == prev + 2
        else f"the records of steps {prev + 1}..{rec.step - 1} are missing"
    )
    if rec.step <= prev:
        what = "its steps out of order"
    out.damage.append(
        f"{path}:{n}: step {rec.step} follows step {prev} of the same incarnation (line {last[0]}): {what}"
    )


def stepped(records: list[EventRecord]) -> list[EventRecord]:
    """The records of training steps (a restarted group's records before it rejoined have no step)."""
    return [x for x in records if x.step is not None]


@dataclass
class ReplicaStats:
    """What one rank's event log says about its whole run (every figure from ``stepped`` records).

    ``records``: step records (a step run twice by a restarted group counts twice); ``steps``:
    distinct steps; ``train_s``: sum of step times; ``exposed_data_s``: sum of the syncs'
    ``exposed_s``; ``exposed_control_s``: sum of ``quorum_s + commit_s``; ``median_plain_step_s``:
    median time of the steps with neither send, sync nor quorum change (pure compute).
    """

    records: int = 0
    steps: int = 0
    last_step: int = 0
    train_s: float = 0.0
    syncs: int = 0
    commits: int = 0
    failed_commits: int = 0
    exposed_data_s: float = 0.0
    exposed_control_s: float = 0.0
    median_plain_step_s: float | None = None
    final_loss: float | None = None
    final_manager_step: int | None = None
    losses: dict[int, float] = field(default_factory=dict)

    @property
    def steps_per_s(self) -> float | None:
        return self.records / self.train_s if self.train_s else None


def replica_stats(records: list[EventRecord]) -> ReplicaStats:
    recs = stepped(records)
    if not recs:
        return ReplicaStats()
    syncs = [x for x in recs if x.synced is not None]
    plain = sorted(x.step_time_s for x in recs if x.sent is None and x.synced is None and not x.quorums)
    steps = [x.step for x in recs if x.step is not None]  # every one of them: recs are stepped
    return ReplicaStats(
        records=len(recs),
        steps=len(set(steps)),
        last_step=steps[-1],
        train_s=sum(x.step_time_s for x in recs),
        syncs=len(syncs),
        commits=sum(1 for x in recs if x.commit),
        failed_commits=sum(1 for x in recs if x.commit is False),
        exposed_data_s=sum(seconds(x.exposed_s) for x in syncs),
        exposed_control_s=sum(seconds(x.quorum_s) + seconds(x.commit_s) for x in recs),
        median_plain_step_s=plain[len(plain) // 2] if plain else None,
        final_loss=next((x.loss for x in reversed(recs) if x.loss is not None), None),
        final_manager_step=recs[-1].manager_step_after,
        losses={s: x.loss for s, x in zip(steps, recs, strict=True) if x.loss is not None},
    )


def seconds(value: float | msgspec.UnsetType) -> float:
    """A record's optional timing (``send_s``, ``exposed_s``, ...) as seconds, 0 when not measured."""
    return 0.0 if value is msgspec.UNSET else value
