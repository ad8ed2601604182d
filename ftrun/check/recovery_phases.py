"""One function per phase of a recovery (``ftrun.check.recovery``'s module docstring says what
each phase is and which clock readings bound it). Torch-free.

Each phase reads the fault's records (``FaultRecords``), writes its interval, its source and,
when it did not happen, its reason into the ``Recovery`` being built, and returns what the next
phase starts from (the Manager coming up, the quorum the group joined, its first commit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import msgspec

from ftrun import layout
from ftrun.check.recovery_model import GroupSpans, Recovery, TraceSpans
from ftrun.event_log import seconds
from ftrun.layout import EventRecord, LifecycleEvent, Manifest, Quorum
from ftrun.torchft_compat import LABELS


@dataclass(frozen=True)
class FaultRecords:
    """What every phase of one fault's recovery reads.

    ``restart``: the launcher's restart of the group after the fault (None: not relaunched);
    ``incarnation``: the relaunched incarnation it names (None: not relaunched, or a restart
    record that does not name it: then the group's lifecycle records after the fault are its
    relaunch's); ``events``: those lifecycle records; ``mine``: the group's rank-0 step records
    after the fault; ``survivors``: the other groups' replica ids."""

    fault: layout.FaultMarker
    manifest: Manifest
    logs: dict[tuple[int, int], list[EventRecord]]
    life: dict[int, list[LifecycleEvent]]
    traced: TraceSpans
    around: GroupSpans
    restart: layout.RunEvent | None
    incarnation: int | None
    events: list[LifecycleEvent]
    mine: list[EventRecord]
    survivors: list[int]

    @property
    def replica(self) -> int:
        return self.fault.replica

    @property
    def t0(self) -> float:
        return self.fault.fired_at


def fault_records(
    f: layout.FaultMarker,
    manifest: Manifest,
    logs: dict[tuple[int, int], list[EventRecord]],
    life: dict[int, list[LifecycleEvent]],
    traced: TraceSpans,
    around: GroupSpans,
) -> FaultRecords:
    """The records of fault ``f`` that the phases read (``FaultRecords``): the group's own up to the
    next fault that hit it (a chaos run's faults follow each other: a later relaunch is not this one's)."""
    r, t0 = f.replica, f.fired_at
    until = min((g.fired_at for g in manifest.faults.fired if g.replica == r and g.fired_at > t0), default=math.inf)
    restart = next(
        (e for e in manifest.run_events if e.event == "restart" and e.replica == r and t0 < e.t < until), None
    )
    inc = restart.incarnation if restart is not None and isinstance(restart.incarnation, int) else None
    return FaultRecords(
        fault=f,
        manifest=manifest,
        logs=logs,
        life=life,
        traced=traced,
        around=around,
        restart=restart,
        incarnation=inc,
        events=[e for e in life.get(r, []) if t0 < e.t_start < until and (inc is None or e.incarnation == inc)],
        mine=[x for x in logs.get((r, 0), []) if t0 < x.t < until],
        survivors=sorted(k for k, g in logs if g == 0 and k != r),
    )


def quorums(records: list[EventRecord]) -> list[Quorum]:
    """Every quorum the step records hold, in order."""
    return [q for x in records for q in (x.quorums or [])]


def detect(fr: FaultRecords, out: Recovery, rejoined: Quorum | None = None) -> None:
    """t0 -> the survivors' first quorum without the group (the traced quorum RPC's end where a
    survivor's profile covers it, else the step log's ``Quorum.t``), and what bounded it. Or,
    when the group's new incarnation was back before the lighthouse left it out (a warm spare,
    ``--spares``, took its replica id): the quorum it rejoined in (``rejoined``), the first
    that no longer waited for the dead incarnation."""
    r, t0 = fr.replica, fr.t0
    back = rejoined.quorum_id if rejoined is not None else None
    detected = sorted(
        (
            (q.t, s, q)
            for s in fr.survivors
            for q in quorums(fr.logs[(s, 0)])
            if q.t > t0 and (r not in q.participants or q.quorum_id == back)
        ),
        key=lambda x: x[0],
    )
    limits = out.detect_limits = detection_limits(fr.manifest)
    if not detected:
        out.reasons["detect"] = (
            "no survivor computed a quorum without the group after the fault (it was back first, or none ran)"
        )
        out.detect_bound = _bound_text(limits, fr.fault.action, None).lstrip("; ")
        return
    td, s, q = detected[0]
    # the same quorum as each survivor's traced quorum RPC (it ends when the lighthouse answered)
    rpc = sorted(
        (b, a, s2)
        for t2, s2, q2 in detected
        if q2.quorum_id == q.quorum_id
        for a, b in fr.around.get(s2, {}).get(LABELS.client_quorum, [])
        if a <= t2 <= b + 0.05
    )
    if rpc:
        b, a, s = rpc[0]
        out.spans["detect"], out.sources["detect"] = (t0, b), "trace"
        waited: float | None = b - a
        out.detect_bound = f"replica {s}'s quorum RPC for quorum {q.quorum_id} waited {waited:.2f} s (traced)"
    else:
        out.spans["detect"], out.sources["detect"] = (t0, td), "event log"
        rec = next(
            (x for x in fr.logs[(s, 0)] if x.quorums and any(y.quorum_id == q.quorum_id for y in x.quorums)), None
        )
        waited = seconds(rec.quorum_s) if rec is not None and rec.quorum_s is not msgspec.UNSET else None
        out.detect_bound = (
            f"replica {s} waited {waited:.2f} s in quorum {q.quorum_id} (step {rec.step})"
            if waited is not None and rec is not None
            else f"quorum {q.quorum_id}"
        )
    if q.quorum_id == back:
        out.detect_bound += " with the group's new incarnation in place of the dead one"
    out.detect_bound += _bound_text(limits, fr.fault.action, waited)


def relaunch(fr: FaultRecords, out: Recovery) -> LifecycleEvent | None:
    """The launcher's restart -> torchft Manager up; returns the ``manager_up`` record (None:
    the Manager never came up again)."""
    f, restart = fr.fault, fr.restart
    up = next((e for e in fr.events if e.event == "manager_up"), None)
    if restart is not None and up is not None:
        out.spans["relaunch"] = (restart.t, up.t)
        out.sources["relaunch"] = "event log"
        began = next((e for e in fr.events if e.event == "start"), None)
        if began is not None:  # where the relaunch went: torchrun, then imports and the model, then the Manager
            out.relaunch_detail = {
                "launcher_to_rank_s": began.t - restart.t,
                "rank_to_manager_s": up.t_start - began.t,
                "manager_s": up.t - up.t_start,
            }
    elif restart is None:
        out.reasons["relaunch"] = (
            f"not relaunched: a hang is not a crash, the group's processes lived on (stalled {f.seconds:g} s"
            " inside the step; until the stall's end no phase of it is counted)"
            if f.action == "hang"
            else "not relaunched (no restart left: --restarts)"
        )
    else:
        named = f" (incarnation {fr.incarnation})" if fr.incarnation is not None else ""
        out.reasons["relaunch"] = f"relaunched{named} but no manager_up in its lifecycle log"
    return up


def join(fr: FaultRecords, out: Recovery, up: LifecycleEvent | None) -> Quorum | None:
    """Manager up (a hang: the stall's end) -> the first quorum the group computed together with
    another group; returns that quorum (None: never in one again)."""
    f, r = fr.fault, fr.replica
    start = up.t if up is not None else (fr.t0 + f.seconds if f.action == "hang" else None)
    joined = None
    if start is not None:
        joined = next(
            (q for q in quorums(fr.mine) if q.t >= start and any(p is not None and p != r for p in q.participants)),
            None,
        )
    if joined is not None and start is not None:
        out.spans["join"], out.sources["join"] = (start, joined.t), "event log"
    else:
        out.reasons["join"] = (
            "never in a quorum with another group again" if start is not None else "the group never came back up"
        )
    return joined


def reconfigure(fr: FaultRecords, out: Recovery, joined: Quorum | None) -> None:
    """The group's process-group ``configure`` for the quorum it joined (traced span, else its
    lifecycle record), and every participant's own configure beside it."""
    if joined is None:
        out.reasons["reconfigure"] = "no quorum to configure for"
        return
    conf = next((e for e in fr.events if e.event == "configure" and e.quorum_id == joined.quorum_id), None)
    if conf is None:
        conf = next((e for e in fr.events if e.event == "configure" and e.t_start >= joined.t), None)
    tspan = _traced(fr.traced, fr.replica, fr.incarnation, LABELS.pg_configure, joined.t)
    if tspan is not None:
        out.spans["reconfigure"], out.sources["reconfigure"] = tspan, "trace"
    elif conf is not None:
        out.spans["reconfigure"], out.sources["reconfigure"] = (conf.t_start, conf.t), "event log"
    else:
        out.reasons["reconfigure"] = f"no process-group configure logged for quorum {joined.quorum_id}"
    for p in joined.participants:
        if p is not None:
            _participant_configure(fr, out, joined, p, tspan)


def _participant_configure(
    fr: FaultRecords, out: Recovery, joined: Quorum, p: int, own_span: tuple[float, float] | None
) -> None:
    """Participant ``p``'s configure for ``joined``: traced where its profiles cover it (the
    faulted group's from its recovery profile, a survivor's from its profile around the fault or
    its window trace, the one overlapping its log's), else its lifecycle record."""
    c = next((e for e in fr.life.get(p, []) if e.event == "configure" and e.quorum_id == joined.quorum_id), None)
    spans = (
        ([own_span] if own_span is not None else [])
        if p == fr.replica
        else fr.around.get(p, {}).get(LABELS.pg_configure, [])
    )
    t_conf = next(
        (
            x
            for x in spans
            if (c is not None and x[0] <= c.t and x[1] >= c.t_start) or (c is None and x[0] >= joined.t - 1.0)
        ),
        None,
    )
    if t_conf is not None:
        out.reconfigure_participants[p], out.participant_sources[p] = t_conf[1] - t_conf[0], "trace"
    elif c is not None:
        out.reconfigure_participants[p], out.participant_sources[p] = c.t - c.t_start, "event log"


def heal(fr: FaultRecords, out: Recovery, joined: Quorum | None) -> None:
    """The group's ``recv_checkpoint`` after it joined (traced span, else its lifecycle record;
    bytes and rate from the lifecycle), and its heal source's ``send_checkpoint``."""
    recv = next(
        (e for e in fr.events if e.event == "recv_checkpoint" and joined is not None and e.t_start >= joined.t), None
    )
    if recv is None:
        out.reasons["heal"] = (
            f"no heal: torchft's quorum {joined.quorum_id} did not ask this group to heal (nothing committed it lacked)"
            if joined is not None and not joined.heal
            else "no checkpoint received"
        )
        return
    tspan = _traced(fr.traced, fr.replica, fr.incarnation, LABELS.recv_checkpoint, recv.t_start - 0.5)
    out.spans["heal"], out.sources["heal"] = (
        (tspan, "trace") if tspan is not None else ((recv.t_start, recv.t), "event log")
    )
    out.heal_bytes, out.heal_link_hold_s = recv.bytes, recv.hold_s
    if recv.bytes is not None and recv.t > recv.t_start:
        out.heal_rate_bps = recv.bytes * 8 / (recv.t - recv.t_start)  # the lifecycle's own timing
    out.heal_source = joined.heal_source if joined is not None else None
    if out.heal_source is not None and joined is not None:
        _heal_send(fr, out, joined, out.heal_source)


def _heal_send(fr: FaultRecords, out: Recovery, joined: Quorum, source: int) -> None:
    """The heal source's ``send_checkpoint``: bytes it staged, its time (traced, else its log)."""
    sent = next(
        (e for e in fr.life.get(source, []) if e.event == "send_checkpoint" and e.t_start >= joined.t - 1.0), None
    )
    out.heal_bytes_sent = sent.bytes if sent is not None else None
    t_send = next(
        (
            x
            for x in fr.around.get(source, {}).get(LABELS.send_checkpoint, [])
            if (sent is not None and x[0] <= sent.t and x[1] >= sent.t_start)
            or (sent is None and x[0] >= joined.t - 1.0)
        ),
        None,
    )
    if t_send is not None:
        out.heal_send_s, out.heal_send_source = t_send[1] - t_send[0], "trace"
    elif sent is not None:
        out.heal_send_s, out.heal_send_source = sent.t - sent.t_start, "event log"


def catch_up(fr: FaultRecords, out: Recovery, joined: Quorum | None) -> EventRecord | None:
    """The end of the last of join/reconfigure/heal that happened -> the group's first commit;
    returns that commit's step record (None: it never committed again, with the cause train and
    inspect give when it was relaunched)."""
    commit = next((x for x in fr.mine if x.commit and (joined is None or x.t >= joined.t)), None)
    last_end = max(
        (s[1] for k, s in out.spans.items() if s is not None and k in ("join", "reconfigure", "heal")), default=None
    )
    if commit is not None and last_end is not None:
        out.spans["catch_up"], out.sources["catch_up"] = (last_end, commit.t), "event log"
    else:
        out.reasons["catch_up"] = "no commit of the group after the fault" if commit is None else "never rejoined"
    if commit is None and fr.restart is not None:  # relaunched, never back: the cause train and inspect give
        from ftrun.worker.stop import never_back_cause, ran_to

        out.reasons["catch_up"] = never_back_cause(
            fr.manifest.schedule.steps, ran_to(fr.logs), fr.manifest.config.timeouts.quorum_timeout_s
        )
    return commit


def detection_limits(manifest: Manifest) -> layout.DetectionBound:
    """What bounded detection: the manifest's ``detection`` (the lighthouse's timeouts); without
    it, only the configured heartbeat timeout (the config requires one)."""
    if manifest.detection is not None:
        return manifest.detection
    return layout.DetectionBound(heartbeat_timeout_ms=manifest.config.timeouts.heartbeat_timeout_ms)


def _bound_text(limits: layout.DetectionBound, action: str, waited: float | None) -> str:
    """The limit that decides when the lighthouse leaves the group out, for this kind of fault,
    and whether the survivors' wait shows it (within 20% of it or more)."""
    if limits.lighthouse == "external":
        return "; the lighthouse is not ftrun's (--lighthouse): its heartbeat and join timeouts are not known here"
    hb, jt = limits.heartbeat_timeout_ms, limits.join_timeout_ms
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
