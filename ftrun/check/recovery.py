"""Where the time goes between a fault and the first commit with the group back. Torch-free.

For each fired fault (manifest ``faults.fired``: replica R, ``fired_at`` = t0), from the run's
own records, each phase measured by its own two clock readings (never one phase derived from
another):

* ``detect``: t0 -> the survivors' first quorum without R: the end of that survivor's
  ``torchft::manager::_client::_quorum`` span (the lighthouse's answer) in its profile around the
  fault (``traces/recovery/replica{s}_rank0.{fault}.pt.trace.json.gz``) or its window trace, else
  ``Quorum.t`` in its step log. What bounded it: the time the survivors waited in that quorum
  beside the lighthouse's heartbeat and join timeouts (the manifest's ``detection``).
* ``relaunch``: the group's relaunch (``restart`` in ``events/run.jsonl``: its launcher started)
  -> torchft Manager up (``manager_up`` in R's lifecycle log, ``ftrun.worker.lifecycle``).
* ``join``: manager up (a hang: the stall's end) -> the first quorum R's new incarnation
  computed together with another group (``Quorum.t`` in R's step log).
* ``reconfigure``: torchft's process-group ``configure`` for that quorum on R: its
  ``torchft::manager::_pg::configure`` span in R's recovery profile (``traces/recovery/``) where
  traced, else the ``configure`` lifecycle record; every participant's own configure beside it
  (from its traces where they cover it, else its lifecycle record).
* ``heal``: R's ``recv_checkpoint`` (traced span, else lifecycle record; bytes = the state
  dict's tensor bytes, rate over the lifecycle's own timing; source = the quorum's heal
  source, whose ``send_checkpoint`` record gives the bytes it staged). ``sources`` says which.
* ``catch_up``: the end of the last of those phases that happened -> R's first commit.

``total_s`` = R's first commit - t0. The phases can overlap in time (the survivors detect the
loss while R relaunches), so ``phases`` counts each second of [t0, first commit] once: for R's
own chain first (relaunch, join, reconfigure, heal, catch-up: what the first commit waits on),
and for ``detect`` only what that chain does not cover (the survivors' detection is on the
critical path only until R's relaunch begins, or when R waits in its join for it: then it is
the join's). ``spans`` keeps every phase's own interval (seconds after the fault), so a
detection hidden behind the relaunch still shows; ``unaccounted_s`` = seconds no phase covers.
A phase that did not happen is None, with the reason in ``reasons``. Survivors' losses over
[t0, first commit]: failed commits, steps they ran before R was back in their quorum, steps/s
against the same length of time before t0.

Only a fault that stops a group's processes (``STOPS``: kill, sigterm, hang) has a recovery: a
``--fail-commit`` or ``--corrupt-allreduce`` leaves every process running and in its quorum, so
there is nothing to detect, relaunch or rejoin (the commit and numerics checks judge those).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from ftrun import layout
from ftrun.check.provenance import header
from ftrun.event_log import read_lifecycle, seconds
from ftrun.layout import EventRecord, LifecycleEvent, Manifest, Quorum
from ftrun.torchft_compat import LABELS

LABELS_CONFIGURE, LABELS_RECV = LABELS.pg_configure, LABELS.recv_checkpoint
PHASES = ("detect", "relaunch", "join", "reconfigure", "heal", "catch_up")
ACCOUNT_ORDER = ("relaunch", "join", "reconfigure", "heal", "catch_up", "detect")  # who owns an overlapped second
TOLERANCE = 0.10  # the phases must cover the measured total to within this share
STOPS = ("kill", "sigterm", "hang")  # the fault actions that stop a group's processes (a recovery follows)


@dataclass
class Recovery:
    fault: str  # "kill 1@25"
    replica: int
    t0: float  # unix time the fault fired
    total_s: float | None  # None: never back with a commit
    phases: dict[str, float | None]
    spans: dict[str, tuple[float, float] | None]
    reasons: dict[str, str]
    unaccounted_s: float | None
    heal_bytes: int | None = None
    heal_bytes_sent: int | None = None
    heal_rate_bps: float | None = None
    heal_source: int | None = None
    heal_link_hold_s: float | None = None
    detect_bound: str = ""
    detect_limits: dict[str, Any] = field(default_factory=dict)  # the manifest's ``detection`` (what bounds it)
    reconfigure_participants: dict[int, float] = field(default_factory=dict)
    participant_sources: dict[int, str] = field(default_factory=dict)  # participant -> "trace" | "event log"
    heal_send_s: float | None = None  # the source's send_checkpoint (traced, else its lifecycle record)
    heal_send_source: str | None = None  # "trace" | "event log"
    sources: dict[str, str] = field(default_factory=dict)  # phase -> "trace" | "event log"
    relaunch_detail: dict[str, float] = field(default_factory=dict)
    survivors: dict[str, Any] = field(default_factory=dict)
    text: str = ""

    @property
    def largest_phase(self) -> str | None:
        done = {k: v for k, v in self.phases.items() if v is not None}
        return max(done, key=lambda k: done[k]) if done else None

    @property
    def covered(self) -> bool:
        """The phases account for the total within ``TOLERANCE``."""
        return (
            self.total_s is not None
            and self.unaccounted_s is not None
            and self.unaccounted_s <= TOLERANCE * self.total_s
        )

    def to_json(self) -> dict[str, Any]:
        r3 = lambda x: None if x is None else round(x, 3)  # noqa: E731
        return {
            "fault": self.fault,
            "replica": self.replica,
            "fault_at": self.t0,
            "phases": {k: r3(v) for k, v in self.phases.items()},
            "unaccounted_s": r3(self.unaccounted_s),
            "total_s": r3(self.total_s),
            "heal_bytes": self.heal_bytes,
            "heal_source": self.heal_source,
            "heal_bytes_sent": self.heal_bytes_sent,
            "heal_rate_bps": None if self.heal_rate_bps is None else round(self.heal_rate_bps),
            "heal_link_hold_s": r3(self.heal_link_hold_s),
            "largest_phase": self.largest_phase,
            "spans": {
                k: None if v is None else [round(v[0] - self.t0, 3), round(v[1] - self.t0, 3)]
                for k, v in self.spans.items()
            },
            "sources": self.sources,
            "relaunch_detail": {k: round(v, 3) for k, v in self.relaunch_detail.items()},
            "reasons": self.reasons,
            "detect_bound": self.detect_bound,
            "detect_limits": self.detect_limits,
            "reconfigure_participants": {str(k): round(v, 3) for k, v in sorted(self.reconfigure_participants.items())},
            "participant_sources": {str(k): v for k, v in sorted(self.participant_sources.items())},
            "heal_send_s": r3(self.heal_send_s),
            "heal_send_source": self.heal_send_source,
            "survivors": self.survivors,
            "text": self.text,
        }


def read_lifecycles(run_dir: Path, replicas: list[int]) -> dict[int, list[LifecycleEvent]]:
    """Rank 0's lifecycle log of each replica group (missing file: [])."""
    return {r: read_lifecycle(layout.lifecycle_log(run_dir, r, 0)) for r in replicas}


TraceSpans = dict[tuple[int, int], dict[str, list[tuple[float, float]]]]  # (replica, incarnation) -> label -> spans


GroupSpans = dict[int, dict[str, list[tuple[float, float]]]]  # surviving replica -> label -> spans (rank 0)


def breakdown(
    manifest: Manifest,
    logs: dict[tuple[int, int], list[EventRecord]],
    life: dict[int, list[LifecycleEvent]],
    traced: TraceSpans | None = None,
    around: GroupSpans | None = None,
) -> list[Recovery]:
    """One ``Recovery`` per fired fault that stops a group (``STOPS``), in firing order (module
    docstring). ``traced``: the relaunched groups' recovery profiles' ``_pg::configure`` / ``recv_checkpoint`` spans
    (``recovery_trace_spans``); ``around``: the surviving groups' quorum, configure and
    checkpoint spans (``around_fault_spans``); both preferred to the logs' timings where present."""
    return [
        _one(f, manifest, logs, life, traced or {}, around or {})
        for f in sorted(manifest.faults.fired, key=lambda f: f.fired_at)
        if f.action in STOPS
    ]


def recovery_of(run_dir: Path, manifest: Manifest, logs: dict[tuple[int, int], list[EventRecord]]) -> list[Recovery]:
    """``breakdown`` with the lifecycle logs and recovery traces read from ``run_dir``."""
    groups = sorted({r for r, _ in logs} | {f.replica for f in manifest.faults.fired})
    return breakdown(
        manifest,
        logs,
        read_lifecycles(run_dir, groups),
        recovery_trace_spans(run_dir),
        around_fault_spans(run_dir, manifest, logs),
    )


_INCARNATION_RE = re.compile(r"\.restart(\d+)\.")


WANTED = (LABELS.pg_configure, LABELS.recv_checkpoint, LABELS.send_checkpoint, LABELS.client_quorum)


def _spans_of(path: Path) -> dict[str, list[tuple[float, float]]] | None:
    """The ``WANTED`` spans of one trace as unix times (the trace's ``baseTimeNanoseconds`` + ts);
    None for a trace ftrun cannot read (the logs still have the timings)."""
    from ftrun.errors import BadInput
    from ftrun.trace.load import load_trace
    from ftrun.trace.schema import name_filter, trace_events

    try:
        trace = load_trace(path)
        base_us = header(trace).base_us
        if base_us is None:
            return None
        base = base_us / 1e6
        found: dict[str, list[tuple[float, float]]] = {}
        for e in trace_events(trace, name_filter(WANTED, ())):
            if e.name in WANTED and e.ph == "X":
                found.setdefault(e.name, []).append((base + e.ts / 1e6, base + (e.ts + e.dur) / 1e6))
    except (BadInput, msgspec.ValidationError):
        return None
    return found


def recovery_trace_spans(run_dir: Path) -> TraceSpans:
    """Rank 0's recovery profiles of relaunched groups (``traces/recovery/*.restart{n}.*``)."""
    out: TraceSpans = {}
    for p in sorted(layout.recovery_trace_dir(run_dir).glob("*.pt.trace.json*")):
        w, m = layout.parse_worker(p.name), _INCARNATION_RE.search(p.name)
        if w is None or w[1] != 0 or m is None:
            continue
        found = _spans_of(p)
        if found is not None:
            out[(w[0], int(m[1]))] = {k: sorted(v) for k, v in found.items()}
    return out


def around_fault_spans(run_dir: Path, manifest: Manifest, logs: dict[tuple[int, int], list[EventRecord]]) -> GroupSpans:
    """Rank 0 of every surviving group: its profiles around the faults
    (``traces/recovery/replica{s}_rank0.{fault key}[.part].pt.trace.json.gz``) and those of its
    window traces recorded while a fault's recovery ran (by its step log: the window's steps
    ended after the fault and began before the group's end), merged per group (one clock)."""
    faulted = {f.replica: f.fired_at for f in manifest.faults.fired}
    if not faulted:
        return {}
    first_fault = min(faulted.values())
    paths: dict[int, list[Path]] = {}
    for p in sorted(layout.recovery_trace_dir(run_dir).glob("*.pt.trace.json*")):
        w = layout.parse_worker(p.name)
        if w is not None and w[1] == 0 and layout.AROUND_FAULT_RE.search(p.name):
            paths.setdefault(w[0], []).append(p)
    for t in manifest.traces:
        if t.rank != 0 or not t.window:
            continue
        steps = [
            x.t for x in logs.get((t.replica, 0), []) if x.step is not None and t.window[0] <= x.step <= t.window[1]
        ]
        if steps and max(steps) > first_fault:  # the window ran past a fault: it may hold the quorum change
            paths.setdefault(t.replica, []).append(run_dir / t.path)
    out: GroupSpans = {}
    for s, ps in paths.items():
        merged: dict[str, list[tuple[float, float]]] = {}
        for p in ps:
            for k, v in (_spans_of(p) or {}).items():
                merged.setdefault(k, []).extend(v)
        out[s] = {k: sorted(v) for k, v in merged.items()}
    return out


def recovery_of_run_dir(run_dir: Path) -> list[Recovery]:
    """``recovery_of`` for an ``ftrun train`` run dir ([] for another kind or a run without faults)."""
    from ftrun.event_log import read_event_log

    m = layout.read_manifest(run_dir)
    if not isinstance(m, Manifest) or not m.faults.fired:
        return []
    logs: dict[tuple[int, int], list[EventRecord]] = {
        (e.replica, e.rank): read_event_log(run_dir / e.path) for e in m.event_logs
    }
    return recovery_of(run_dir, m, logs)


def _quorums(records: list[EventRecord]) -> list[Quorum]:
    return [q for x in records for q in (x.quorums or [])]


def _one(
    f: layout.FaultMarker,
    manifest: Manifest,
    logs: dict[tuple[int, int], list[EventRecord]],
    life: dict[int, list[LifecycleEvent]],
    traced: TraceSpans,
    around: GroupSpans,
) -> Recovery:
    r, t0 = f.replica, f.fired_at
    label = layout.fault_label(f.action, r, f.fired_step or f.step)
    mine = [x for x in logs.get((r, 0), []) if x.t > t0]
    survivors = sorted(k for k, g in logs if g == 0 and k != r)
    spans: dict[str, tuple[float, float] | None] = dict.fromkeys(PHASES)
    reasons: dict[str, str] = {}
    out = Recovery(label, r, t0, None, dict.fromkeys(PHASES), spans, reasons, None)

    # detect: the survivors' first quorum without R
    detected = sorted(
        ((q.t, s, q) for s in survivors for q in _quorums(logs[(s, 0)]) if q.t > t0 and r not in q.participants),
        key=lambda x: x[0],
    )
    out.detect_limits = detection_limits(manifest)
    if detected:
        td, s, q = detected[0]
        # the same quorum as each survivor's traced quorum RPC (it ends when the lighthouse answered)
        rpc = sorted(
            (b, a, s2)
            for t2, s2, q2 in detected
            if q2.quorum_id == q.quorum_id
            for a, b in around.get(s2, {}).get(LABELS.client_quorum, [])
            if a <= t2 <= b + 0.05
        )
        if rpc:
            b, a, s = rpc[0]
            spans["detect"], out.sources["detect"] = (t0, b), "trace"
            waited: float | None = b - a
            out.detect_bound = f"replica {s}'s quorum RPC for quorum {q.quorum_id} waited {waited:.2f} s (traced)"
        else:
            spans["detect"], out.sources["detect"] = (t0, td), "event log"
            rec = next(
                (x for x in logs[(s, 0)] if x.quorums and any(y.quorum_id == q.quorum_id for y in x.quorums)), None
            )
            waited = seconds(rec.quorum_s) if rec is not None and rec.quorum_s is not msgspec.UNSET else None
            out.detect_bound = (
                f"replica {s} waited {waited:.2f} s in quorum {q.quorum_id} (step {rec.step})"
                if waited is not None and rec is not None
                else f"quorum {q.quorum_id}"
            )
        out.detect_bound += _bound_text(out.detect_limits, f.action, waited)
    else:
        reasons["detect"] = (
            "no survivor computed a quorum without the group after the fault (it was back first, or none ran)"
        )
        out.detect_bound = _bound_text(out.detect_limits, f.action, None).lstrip("; ")

    # relaunch: the launcher's restart -> manager up
    restart = next((e for e in manifest.run_events if e.event == "restart" and e.replica == r and e.t > t0), None)
    # the relaunched incarnation; None: not relaunched, or a restart record that does not name it
    # (then the group's lifecycle records after the fault are its relaunch's)
    inc = restart.incarnation if restart is not None and isinstance(restart.incarnation, int) else None
    events = [e for e in life.get(r, []) if e.t_start > t0 and (inc is None or e.incarnation == inc)]
    up = next((e for e in events if e.event == "manager_up"), None)
    if restart is not None and up is not None:
        spans["relaunch"] = (restart.t, up.t)
        out.sources["relaunch"] = "event log"
        began = next((e for e in events if e.event == "start"), None)
        if began is not None:  # where the relaunch went: torchrun, then imports and the model, then the Manager
            out.relaunch_detail = {
                "launcher_to_rank_s": began.t - restart.t,
                "rank_to_manager_s": up.t_start - began.t,
                "manager_s": up.t - up.t_start,
            }
    elif restart is None:
        reasons["relaunch"] = (
            f"not relaunched: a hang is not a crash, the group's processes lived on (stalled {f.seconds:g} s"
            " inside the step; until the stall's end no phase of it is counted)"
            if f.action == "hang"
            else "not relaunched (no restart left: --restarts)"
        )
    else:
        named = f" (incarnation {inc})" if inc is not None else ""
        reasons["relaunch"] = f"relaunched{named} but no manager_up in its lifecycle log"

    # join: manager up (a hang: the stall's end) -> first quorum with another group
    start = up.t if up is not None else (t0 + f.seconds if f.action == "hang" else None)
    joined = None
    if start is not None:
        joined = next(
            (q for q in _quorums(mine) if q.t >= start and any(p is not None and p != r for p in q.participants)), None
        )
    if joined is not None and start is not None:
        spans["join"], out.sources["join"] = (start, joined.t), "event log"
    else:
        reasons["join"] = (
            "never in a quorum with another group again" if start is not None else "the group never came back up"
        )

    # reconfigure: R's process-group configure for that quorum (every participant's beside it)
    if joined is not None:
        conf = next((e for e in events if e.event == "configure" and e.quorum_id == joined.quorum_id), None)
        if conf is None:
            conf = next((e for e in events if e.event == "configure" and e.t_start >= joined.t), None)
        tspan = _traced(traced, r, inc, LABELS_CONFIGURE, joined.t)
        if tspan is not None:
            spans["reconfigure"], out.sources["reconfigure"] = tspan, "trace"
        elif conf is not None:
            spans["reconfigure"], out.sources["reconfigure"] = (conf.t_start, conf.t), "event log"
        else:
            reasons["reconfigure"] = f"no process-group configure logged for quorum {joined.quorum_id}"
        for p in joined.participants:
            if p is None:
                continue
            c = next((e for e in life.get(p, []) if e.event == "configure" and e.quorum_id == joined.quorum_id), None)
            # the participant's own traced configure: R's from its recovery profile, a survivor's
            # from its profile around the fault or its window trace (the one overlapping its log's)
            mine_t = ([tspan] if tspan is not None else []) if p == r else around.get(p, {}).get(LABELS_CONFIGURE, [])
            t_conf = next(
                (
                    x
                    for x in mine_t
                    if (c is not None and x[0] <= c.t and x[1] >= c.t_start) or (c is None and x[0] >= joined.t - 1.0)
                ),
                None,
            )
            if t_conf is not None:
                out.reconfigure_participants[p], out.participant_sources[p] = t_conf[1] - t_conf[0], "trace"
            elif c is not None:
                out.reconfigure_participants[p], out.participant_sources[p] = c.t - c.t_start, "event log"
    else:
        reasons["reconfigure"] = "no quorum to configure for"

    # heal: R's recv_checkpoint; the source's send_checkpoint
    recv = next(
        (e for e in events if e.event == "recv_checkpoint" and joined is not None and e.t_start >= joined.t), None
    )
    if recv is not None:
        tspan = _traced(traced, r, inc, LABELS_RECV, recv.t_start - 0.5)
        spans["heal"], out.sources["heal"] = (
            (tspan, "trace") if tspan is not None else ((recv.t_start, recv.t), "event log")
        )
        out.heal_bytes, out.heal_link_hold_s = recv.bytes, recv.hold_s
        if recv.bytes is not None and recv.t > recv.t_start:
            out.heal_rate_bps = recv.bytes * 8 / (recv.t - recv.t_start)  # the lifecycle's own timing
        out.heal_source = joined.heal_source if joined is not None else None
        if out.heal_source is not None:
            sent = next(
                (
                    e
                    for e in life.get(out.heal_source, [])
                    if e.event == "send_checkpoint" and joined is not None and e.t_start >= joined.t - 1.0
                ),
                None,
            )
            out.heal_bytes_sent = sent.bytes if sent is not None else None
            t_send = next(
                (
                    x
                    for x in around.get(out.heal_source, {}).get(LABELS.send_checkpoint, [])
                    if (sent is not None and x[0] <= sent.t and x[1] >= sent.t_start)
                    or (sent is None and joined is not None and x[0] >= joined.t - 1.0)
                ),
                None,
            )
            if t_send is not None:
                out.heal_send_s, out.heal_send_source = t_send[1] - t_send[0], "trace"
            elif sent is not None:
                out.heal_send_s, out.heal_send_source = sent.t - sent.t_start, "event log"
    elif joined is not None and not joined.heal:
        reasons["heal"] = (
            f"no heal: torchft's quorum {joined.quorum_id} did not ask this group to heal (nothing committed it lacked)"
        )
    else:
        reasons["heal"] = "no checkpoint received"

    # catch-up: the end of the last phase that happened -> R's first commit
    commit = next((x for x in mine if x.commit and (joined is None or x.t >= joined.t)), None)
    last_end = max(
        (s[1] for k, s in spans.items() if s is not None and k in ("join", "reconfigure", "heal")), default=None
    )
    if commit is not None and last_end is not None:
        spans["catch_up"], out.sources["catch_up"] = (last_end, commit.t), "event log"
    else:
        reasons["catch_up"] = "no commit of the group after the fault" if commit is None else "never rejoined"
    if commit is None and restart is not None:  # relaunched, never back: the cause train and inspect give
        from ftrun.worker.stop import never_back_cause, ran_to

        reasons["catch_up"] = never_back_cause(
            manifest.schedule.steps, ran_to(logs), manifest.config.get("quorum_timeout_s")
        )

    if commit is not None:
        out.total_s = commit.t - t0
        _account(out, t0, commit.t)
    else:  # nothing to account against: each phase's own length
        out.phases = {k: None if s is None else s[1] - s[0] for k, s in spans.items()}
    out.survivors = _losses(logs, survivors, r, t0, commit.t if commit is not None else None, joined)
    out.text = describe(out)
    return out


def detection_limits(manifest: Manifest) -> dict[str, Any]:
    """What bounded detection: the manifest's ``detection`` (the lighthouse's timeouts); a manifest
    of an earlier ftrun has only the configured heartbeat timeout ({} when not even that)."""
    if manifest.detection is not None:
        return msgspec.to_builtins(manifest.detection)
    hb = manifest.config.get("heartbeat_timeout_ms")
    return (
        {"heartbeat_timeout_ms": hb, "join_timeout_ms": None, "quorum_tick_ms": None, "lighthouse": "ftrun"}
        if hb
        else {}
    )


def _bound_text(limits: dict[str, Any], action: str, waited: float | None) -> str:
    """The limit that decides when the lighthouse leaves the group out, for this kind of fault,
    and whether the survivors' wait shows it (within 20% of it or more)."""
    if limits.get("lighthouse") == "external":
        return "; the lighthouse is not ftrun's (--lighthouse): its heartbeat and join timeouts are not known here"
    hb, jt = limits.get("heartbeat_timeout_ms"), limits.get("join_timeout_ms")
    out = ""
    if action == "hang":  # a stalled group's torchft server still heartbeats: only the join timeout leaves it out
        if jt is not None:
            out = (
                f"; a stalled group still heartbeats (torchft's server thread), so the lighthouse issues the quorum"
                f" without it after its join timeout, {jt} ms"
            )
            bound = jt
        else:
            return ""
    elif hb is not None:
        out = f"; the lighthouse drops a group whose heartbeats stop after {hb} ms (heartbeat timeout)"
        if jt is not None:
            out += f", or issues the quorum without it {jt} ms after the first group asked (join timeout)"
        bound = hb
    else:
        return ""
    if waited is not None and waited >= 0.8 * bound / 1e3:
        out += ": bounded by the " + ("join timeout" if action == "hang" else "heartbeat timeout")
    return out


def _traced(traced: TraceSpans, replica: int, inc: int | None, label: str, after: float) -> tuple[float, float] | None:
    """The first traced span ``label`` of that incarnation starting at or after ``after``."""
    if inc is None:
        return None
    return next((s for s in traced.get((replica, inc), {}).get(label, []) if s[0] >= after), None)


def _account(out: Recovery, t0: float, t1: float) -> None:
    """Each second of [t0, t1] once, for the first phase in ``ACCOUNT_ORDER`` covering it."""
    covered: list[tuple[float, float]] = []
    for k in ACCOUNT_ORDER:
        s = out.spans[k]
        if s is None:
            continue
        a, b = max(s[0], t0), min(s[1], t1)
        new = 0.0
        if b > a:
            new = _length(covered + [(a, b)]) - _length(covered)
            covered.append((a, b))
        out.phases[k] = new
    out.unaccounted_s = max(0.0, (t1 - t0) - _length(covered))


def _length(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def _losses(
    logs: dict[tuple[int, int], list[EventRecord]],
    survivors: list[int],
    r: int,
    t0: float,
    t1: float | None,
    joined: Quorum | None,
) -> dict[str, Any]:
    """What the survivors lost over [t0, t1]: failed commits, steps without R, steps/s before vs during."""
    if not survivors:
        return {}
    end = t1 if t1 is not None else max((x.t for s in survivors for x in logs[(s, 0)]), default=t0)
    back = joined.t if joined is not None else end
    span = end - t0
    failed, without, before, during = 0, 0, [], []
    for s in survivors:
        recs = [x for x in logs[(s, 0)] if x.step is not None]
        failed += sum(1 for x in recs if x.commit is False and t0 < x.t <= end)
        without = max(without, sum(1 for x in recs if t0 < x.t <= back))
        if span > 0 and recs:
            lo = max(t0 - span, recs[0].t)
            n_before = sum(1 for x in recs if lo < x.t <= t0)
            if t0 > lo:
                before.append(n_before / (t0 - lo))
            during.append(sum(1 for x in recs if t0 < x.t <= end) / span)
    b = sum(before) / len(before) if before else None
    d = sum(during) / len(during) if during else None
    return {
        "failed_commits": failed,
        "steps_without_group": without,
        "steps_per_s_before": None if b is None else round(b, 3),
        "steps_per_s_during": None if d is None else round(d, 3),
        "goodput": round(d / b, 3) if b and d is not None else None,
    }


def describe(x: Recovery) -> str:
    """One paragraph: the total, the largest phase, the phases that did not happen and why."""
    if x.total_s is None:
        head = f"{x.fault}: the group never committed again after the fault"
    else:
        big = x.largest_phase
        head = (
            f"{x.fault}: {x.total_s:.2f} s to the group's first commit; largest phase {big} ({x.phases[big]:.2f} s)"
            if big
            else f"{x.fault}: {x.total_s:.2f} s"
        )
        head += f"; unaccounted {x.unaccounted_s:.2f} s"
    parts = [head]
    if x.detect_bound:
        parts.append(f"detect: {x.detect_bound}")
    if x.heal_bytes is not None:
        parts.append(
            f"heal: {x.heal_bytes:,} bytes from replica {x.heal_source}"
            + (f" (source staged {x.heal_bytes_sent:,})" if x.heal_bytes_sent is not None else "")
            + (f", link hold {x.heal_link_hold_s:.3f} s" if x.heal_link_hold_s else "")
        )
    parts += [f"{k}: {why}" for k, why in x.reasons.items()]
    return "; ".join(parts)
