"""Where a run's loop time went, from one rank's event log: the throughput decomposition.

Hiding communication is not free: the steps that compute while a fragment's collectives are in
flight share the machine with them (Gloo's threads share the CPU cores; NCCL kernels share SMs
and memory bandwidth), so they run slower. This module measures that per step and splits the
loop time into terms that add up. Torch-free.

Per step (``ftrun.layout.EventRecord``): compute time = step time − exposed data (``exposed_s``)
− exposed control (``quorum_s`` + ``commit_s``), as compare's compute utilisation defines it.
Every step is one of three classes:

* **comm step**: it sent or synced a fragment, or saw a quorum change (it also computes the
  pseudo-gradients, issues the allreduces or runs the outer step);
* **overlapped**: a fragment sent at an earlier step is not yet synced (its collectives were
  issued and not yet waited for: the event log cannot tell whether they already finished, so this
  is "in flight" as the schedule has it; the trace check refines it per send);
* **plain**: neither — the run's compute at its unoverlapped speed.

The loop time (sum of step times) is split exactly, by class, against ``base`` = the *mean*
compute time of the plain steps: ``compute_at_base_s`` (steps × base) + ``overlap_slowdown_s``
(the overlapped steps' compute beyond base) + ``comm_step_work_s`` (the comm steps' compute beyond
base) + ``exposed_data_s`` + ``exposed_control_s``. Every term is measured from the steps of
its class, so they add up to the loop time; ``unaccounted_s`` is what is left (float error, or
the whole compute when the run has no plain step to measure the base from). Means make the
accounting exact; the medians of both classes and their ratio (``overlap_slowdown``) are the
robust "how much slower" figure shown beside it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ftrun.event_log import seconds, stepped
from ftrun.layout import EventRecord

# The named terms of a decomposition, in the order they are shown; they and unaccounted_s add
# up to loop_s.
TERMS = ("compute_at_base_s", "overlap_slowdown_s", "comm_step_work_s", "exposed_data_s", "exposed_control_s")
TERM_LABELS = {
    "compute_at_base_s": "compute at unoverlapped speed",
    "overlap_slowdown_s": "overlap slowdown",
    "comm_step_work_s": "send/sync step work",
    "exposed_data_s": "exposed data",
    "exposed_control_s": "exposed control",
    "unaccounted_s": "unaccounted",
}
EXPLAINED_WITHIN = 0.05  # the named terms must explain the throughput ratio this closely


@dataclass(frozen=True)
class StepCost:
    """One step as the decomposition sees it."""

    step: int
    kind: str  # "plain" | "overlapped" | "comm"
    compute_s: float
    step_time_s: float


@dataclass
class Decomposition:
    """One rank's loop time, split (seconds; see the module docstring). ``None`` terms: the run had
    no plain step to measure the unoverlapped speed from."""

    steps: int
    loop_s: float
    plain_steps: int
    overlapped_steps: int
    comm_steps: int
    median_plain_compute_s: float | None
    median_overlapped_compute_s: float | None
    overlap_slowdown: float | None  # median overlapped / median plain compute; 1.0 when no step overlapped
    mean_overlap_slowdown: float | None  # the same of the means: what overlap_slowdown_s accounts
    compute_at_base_s: float | None
    overlap_slowdown_s: float | None
    comm_step_work_s: float | None
    exposed_data_s: float
    exposed_control_s: float
    unaccounted_s: float

    def to_json(self) -> dict:
        return dict(self.__dict__)


def step_costs(records: list[EventRecord]) -> list[StepCost]:
    """Each training step's class and compute time, in log order (a restarted group's replayed
    steps count again; a restart ends whatever was in flight)."""
    out: list[StepCost] = []
    in_flight = False
    restart = None
    for x in stepped(records):
        if x.restart != restart:
            in_flight, restart = False, x.restart
        exposed = seconds(x.exposed_s) + seconds(x.quorum_s) + seconds(x.commit_s)
        comm = x.sent is not None or x.synced is not None or bool(x.quorums)
        kind = "comm" if comm else "overlapped" if in_flight else "plain"
        assert x.step is not None  # a stepped record
        out.append(StepCost(x.step, kind, max(0.0, x.step_time_s - exposed), x.step_time_s))
        if x.synced is not None:
            in_flight = False
        if x.sent is not None and x.synced is None:  # tau > 0: its collectives stay in flight
            in_flight = True
    return out


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def decompose(records: list[EventRecord]) -> Decomposition | None:
    """The decomposition of one rank's event log (None without a step record)."""
    costs = step_costs(records)
    if not costs:
        return None
    recs = stepped(records)
    data = sum(seconds(x.exposed_s) for x in recs if x.synced is not None)
    control = sum(seconds(x.quorum_s) + seconds(x.commit_s) for x in recs)
    loop = sum(c.step_time_s for c in costs)
    plain = [c.compute_s for c in costs if c.kind == "plain"]
    over = [c.compute_s for c in costs if c.kind == "overlapped"]
    comm = [c.compute_s for c in costs if c.kind == "comm"]
    med_plain, med_over = _median(plain), _median(over)
    if not plain:
        slowdown = mean_slowdown = slow_s = work_s = at_base = None
        unaccounted = loop - data - control
    else:
        base = sum(plain) / len(plain)
        slowdown = (med_over / med_plain if med_plain and med_over is not None else None) if over else 1.0
        mean_slowdown = (sum(over) / len(over) / base if base else None) if over else 1.0
        at_base = len(costs) * base
        slow_s = sum(over) - len(over) * base
        work_s = sum(comm) - len(comm) * base
        unaccounted = loop - (at_base + slow_s + work_s + data + control)
    return Decomposition(
        steps=len(costs),
        loop_s=loop,
        plain_steps=len(plain),
        overlapped_steps=len(over),
        comm_steps=len(comm),
        median_plain_compute_s=med_plain,
        median_overlapped_compute_s=med_over,
        overlap_slowdown=slowdown,
        mean_overlap_slowdown=mean_slowdown,
        compute_at_base_s=at_base,
        overlap_slowdown_s=slow_s,
        comm_step_work_s=work_s,
        exposed_data_s=data,
        exposed_control_s=control,
        unaccounted_s=unaccounted,
    )


def mean_decomposition(parts: list[Decomposition]) -> dict | None:
    """The replicas' decompositions averaged term by term (a term is None if any replica's is)."""
    if not parts:
        return None
    out: dict = {}
    for key in Decomposition.__dataclass_fields__:
        vals = [getattr(p, key) for p in parts]
        out[key] = None if any(v is None for v in vals) else sum(vals) / len(vals)
    return out


def explained_ratio(a: dict, b: dict) -> float | None:
    """Throughput ratio a/b that the named terms alone predict (steps per second of named time)."""

    def named(d: dict) -> float | None:
        vals = [v for k in TERMS if (v := d.get(k)) is not None]
        return None if len(vals) < len(TERMS) or not d.get("steps") else sum(vals) / d["steps"]

    na, nb = named(a), named(b)
    return nb / na if na and nb else None


def per_step_ms(d: dict, key: str) -> float | None:
    v = d.get(key)
    return None if v is None or not d.get("steps") else v / d["steps"] * 1e3


def overlap_cause(backend: str | None) -> str:
    """Why overlapped steps run slower, on this backend (what the run's collectives compete for)."""
    if backend in ("nccl", "baby-nccl"):
        return "NCCL kernels share the GPU's SMs and memory bandwidth with compute"
    return "collectives share the CPU cores with compute"


def largest_reason(a_name: str, a: dict, b_name: str, b: dict, backend: str | None) -> str | None:
    """One sentence: how much exposed communication ``a`` saved per step against ``b``, and the
    largest term that took the gain back (or that it became throughput)."""
    exposed = ("exposed_data_s", "exposed_control_s")
    saved = [v for k in exposed if (v := per_step_ms(b, k)) is not None]
    spent = [v for k in exposed if (v := per_step_ms(a, k)) is not None]
    if len(saved) < len(exposed) or len(spent) < len(exposed):
        return None
    gain = sum(saved) - sum(spent)  # ms per step of communication a no longer waits for
    costs = {}
    for key in ("overlap_slowdown_s", "comm_step_work_s", "compute_at_base_s"):
        x, y = per_step_ms(a, key), per_step_ms(b, key)
        if x is not None and y is not None:
            costs[key] = x - y
    if not costs:
        return None
    key, extra = max(costs.items(), key=lambda kv: kv[1])
    text = f"{a_name} waits {gain:.1f} ms per step less on communication than {b_name}"
    if extra <= 0.05 * max(abs(gain), 1e-9) or extra <= 0:
        return text + "; no other term grew by as much, so the gain became throughput"
    if key == "overlap_slowdown_s":
        mean, med = a.get("mean_overlap_slowdown"), a.get("overlap_slowdown")
        how = (
            (
                f"its steps overlapping communication computed {(mean - 1) * 100:.0f}% longer on average"
                + (f" (median {(med - 1) * 100:+.0f}%)" if med else "")
            )
            if mean
            else "its overlapped steps ran slower"
        )
        why = f": {overlap_cause(backend)}"
    elif key == "comm_step_work_s":
        how, why = "its send/sync steps computed longer (pseudo-gradients, issuing collectives, outer steps)", ""
    else:
        how, why = (
            "its unoverlapped steps computed slower",
            " (the machine, not the schedule: compare the median compute step)",
        )
    share = min(extra / gain, 9.99) if gain > 0 else None
    took = f", taking back {share * 100:.0f}% of that" if share is not None else ""
    return f"{text}; the largest cost against it: {how} (+{extra:.1f} ms per step{took}){why}"
