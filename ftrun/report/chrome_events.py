"""The Chrome-trace events ``inspect-trace --export-perfetto`` adds of its own, typed: metadata
(process and thread names, sort order, labels), a verdict per checked send or sync, a
cross-replica failure, a recovery phase. Torch-free.

The trace format's shape is open (keys by phase, ``args`` free-form); these records are the
part of it ftrun writes: ``omit_defaults`` leaves out a key that does not apply (an instant has
no ``dur``, a slice no ``s``), as the format expects. The traces' own events pass through the
export untouched and stay untyped there (``ftrun.report.perfetto``: a foreign file's events).
"""

from __future__ import annotations

import msgspec


class MetaArgs(msgspec.Struct, omit_defaults=True):
    """A metadata event's ``args``: one of ``name`` (process_name, thread_name), ``sort_index``
    (process_sort_index, thread_sort_index) or ``labels`` (process_labels)."""

    name: str | None = None
    sort_index: int | None = None
    labels: str | None = None


class VerdictArgs(msgspec.Struct, omit_defaults=True):
    """A verdict's ``args``: the check's placement of the event and its figures; a key whose
    value is None (not of this kind, not observed) is left out."""

    verdict: str  # "ok" | "FAIL"
    kind: str  # "send" | "sync"
    replica: int
    rank: int
    evidence: str
    expected_step: int | None = None
    observed_step: int | None = None
    fragment: int | None = None
    expected_fragment: int | None = None
    manager_step: int | None = None
    cycle: int | None = None
    problem: str | None = None
    notes: str | None = None  # the check's notes, joined by "; "
    # a send's figures
    allreduces: int | None = None
    collectives: int | None = None
    numel: int | None = None
    bytes: int | None = None
    # a sync's figures
    exposed_comm_ms: float | None = None
    hidden_comm_ms: float | None = None
    send_to_done_ms: float | None = None
    comm_union_ms: float | None = None
    should_commit_ms: float | None = None
    serialized: bool | None = None
    serialized_collectives: int | None = None
    send_captured: bool | None = None


class CrossArgs(msgspec.Struct):
    """A cross-replica failure's ``args``: its problem, each worker's fragment ("replica/rank" ->
    fragment, null: event absent) and the manager step."""

    problem: str | None
    fragments: dict[str, int | None]
    manager_step: int | None


class RecoveryArgs(msgspec.Struct):
    """A recovery phase's ``args`` (every key written, null where not known)."""

    phase: str
    seconds_on_critical_path: float | None  # the phase's share of the recovery (None: not accounted)
    source: str | None  # "trace" | "event log"
    total_s: float | None
    unaccounted_s: float | None


class ChromeEvent(msgspec.Struct, omit_defaults=True):
    """One event ftrun writes: ``ph`` "M" (metadata), "i" (instant, ``s`` its scope) or "X"
    (slice, ``dur`` µs); ``ts`` µs on the traces' clock."""

    name: str
    ph: str
    ts: float
    pid: int
    tid: int
    cat: str | None = None
    s: str | None = None
    dur: float | None = None
    args: MetaArgs | VerdictArgs | CrossArgs | RecoveryArgs | None = None


def meta(name: str, pid: int, tid: int, args: MetaArgs) -> ChromeEvent:
    """A metadata event (``process_name``, ``thread_sort_index``, ...) at ts 0."""
    return ChromeEvent(name=name, ph="M", ts=0, pid=pid, tid=tid, args=args)
