"""The event logs under ``events/`` (read with ``ftrun.event_log``). Torch-free.

Each rank's step log (``EventRecord``), the parent's run log (``RunEvent``) and each rank's
lifecycle log (``LifecycleEvent``)."""

from __future__ import annotations

import msgspec
from msgspec import UNSET, UnsetType

from ftrun.layout.sketches import HealNumerics, RoundNumerics


class Quorum(msgspec.Struct):
    """A quorum torchft computed for this rank (``ftrun.worker.quorum_probe``)."""

    quorum_id: int
    participants: list[int | None]
    replica_rank: int
    max_step: int
    heal: bool
    heal_source: int | None
    t: float


class Healed(msgspec.Struct):
    source_replica: int | None
    peer_step: int
    manager_step: int


class Rejoined(msgspec.Struct):
    local_step: int
    aligned_step: int | None


class StepNews(msgspec.Struct):
    """What a rank's training loop saw during one step, beside what its recorder saw: the
    ``EventRecord`` fields of the same names (``ftrun.worker.recorder.StepRecorder.end_step``
    writes an empty list or None as absent)."""

    quorums: list[Quorum] = []
    healed: Healed | None = None
    rejoined: Rejoined | None = None
    numerics: list[RoundNumerics] = []
    heal_numerics: HealNumerics | None = None


class EventRecord(msgspec.Struct):
    """One line of ``events/replica{r}_rank{g}.jsonl``: what one rank did in one training step.

    ``step`` is None while a restarted group has not rejoined yet. ``manager_step``: at the
    step's start; ``sent``/``synced``: the fragment sent / synced in this step; ``commit``: the
    sync's commit result; ``fingerprint``: hex hash of the synced fragment's parameters after a
    commit; ``t``: unix time at step end. Timings (seconds, present when measured this step):
    ``send_s``, ``sync_s``, ``exposed_s`` (data plane), ``quorum_s``, ``commit_s`` (control plane),
    ``real_s`` (at a sync on an emulated link: its send's start to the backend's own completion of
    the send's last collective, before the hold) — see ``ftrun.worker.recorder``.
    ``quorums``/``healed``/``rejoined``: membership changes. ``loss``: None where ftrun does not see
    the loss (``ftrun launch``'s hook in a user's script: ``ftrun.launch.autohook.attach``).
    ``numerics``: the step's sketches (``RoundNumerics``: a send and/or a sync), ``heal_numerics``
    after a heal (absent with ``--no-sketches``). ``commit_error``: when the sync's commit failed,
    torchft's own error that made this rank vote against it (``Manager.errored()``: type and the
    message's first line, at most ``COMMIT_ERROR_CHARS``); absent when the commit succeeded, when
    this rank had no error (another rank of its group voted no, too few replicas) and in logs of
    an ftrun before the field.
    """

    step: int | None
    manager_step: int
    manager_step_after: int
    participants: int | None
    quorum_id: int | None
    loss: float | None
    step_time_s: float
    restart: int
    sent: int | None
    synced: int | None
    commit: bool | None
    fingerprint: str | None
    t: float
    quorums: list[Quorum] | UnsetType = UNSET
    healed: Healed | UnsetType = UNSET
    rejoined: Rejoined | UnsetType = UNSET
    send_s: float | UnsetType = UNSET
    sync_s: float | UnsetType = UNSET
    exposed_s: float | UnsetType = UNSET
    quorum_s: float | UnsetType = UNSET
    commit_s: float | UnsetType = UNSET
    real_s: float | UnsetType = UNSET
    numerics: list[RoundNumerics] | UnsetType = UNSET
    heal_numerics: HealNumerics | UnsetType = UNSET
    commit_error: str | UnsetType = UNSET


# the longest ``EventRecord.commit_error`` written or shown: a message line, never a traceback
COMMIT_ERROR_CHARS = 200


def clip_error(text: str) -> str:
    """``text``'s first non-empty line, stripped, at most ``COMMIT_ERROR_CHARS`` characters (a cut
    one ends in "..."): how a commit error is written and shown, whatever a log holds."""
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return first if len(first) <= COMMIT_ERROR_CHARS else first[: COMMIT_ERROR_CHARS - 3] + "..."


def commit_error_text(exc: BaseException) -> str:
    """``EventRecord.commit_error`` for ``exc``: ``Type: message`` (``clip_error``; the type alone
    for an empty message)."""
    name = type(exc).__name__
    msg = clip_error(str(exc))
    return clip_error(f"{name}: {msg}" if msg else name)


class RunEvent(msgspec.Struct):
    """One line of ``events/run.jsonl`` (the parent's log). ``event``: group_done, group_exit,
    restart, group_lost, stall, stopped, spare_exit; the other fields as the event has them
    (``spare``: the warm spare's slot that took the restart over, or that exited while waiting)."""

    event: str
    t: float
    replica: int | UnsetType = UNSET
    step: int | UnsetType = UNSET
    code: int | UnsetType = UNSET
    restarts: int | UnsetType = UNSET
    incarnation: int | UnsetType = UNSET
    after_step: int | UnsetType = UNSET
    fault: str | None | UnsetType = UNSET
    seconds: float | UnsetType = UNSET
    signal: str | UnsetType = UNSET
    spare: int | UnsetType = UNSET


class LifecycleEvent(msgspec.Struct, omit_defaults=True):
    """One line of ``events/lifecycle/replica{r}_rank{g}.jsonl`` (``ftrun.worker.lifecycle``):
    what a rank's incarnation went through outside its steps, each with its own clock readings.

    ``event``: ``start`` (the rank's Python entered ftrun's worker), ``parked`` (started warm, it
    waited for its start gate with its model built: ``ftrun.worker.park``), ``manager_up`` (torchft's
    Manager constructed: its server heartbeats the lighthouse), ``configure`` (torchft's
    process-group ``configure`` for quorum ``quorum_id``), ``send_checkpoint`` (this rank staged
    its state for healing peers ``peers``; torchft's HTTP transport serves it afterwards),
    ``recv_checkpoint`` (this rank fetched a peer's state, ``peers`` = [source replica rank]),
    ``gave_up_waiting`` (past ``--steps``, this rank stopped after training step ``step`` at
    ``--quorum-timeout`` without relaunched groups ``peers`` back: ``ftrun.worker.stop``),
    ``spare_ready`` (a warm spare, ``--spares``: from its process start to ready and waiting,
    before it was assigned this replica id; ``start`` is then the assignment's pickup).
    ``t_start``/``t``: unix times at start / end (equal for instants); ``bytes``: tensor bytes of
    the state dict sent or received; ``step``: the manager step torchft healed to;
    ``hold_s``: the emulated link's hold of the transfer (``--link``), inside ``t_start..t``.
    """

    event: str
    incarnation: int
    t_start: float
    t: float
    quorum_id: int | None = None
    bytes: int | None = None
    step: int | None = None
    peers: list[int] | None = None
    hold_s: float | None = None
