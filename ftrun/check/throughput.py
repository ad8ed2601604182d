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

Every term carries its spread (``<term>_spread``, ``ftrun.check.noise``): from the per-step
samples of the classes it is measured from (a term against the base: the two classes' means'
difference, times its steps). Averaged over replicas the spreads are averaged too (wider than the
mean's own: a conservative figure). A term within its spread is said "no difference measured".
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ftrun.check.noise import NO_DIFFERENCE, Measured, mean_difference, mean_of, quadrature, ratio_spread
from ftrun.event_log import seconds, stepped
from ftrun.layout import EventRecord

# a decomposition in its JSON form (``Decomposition.to_json``, ``mean_decomposition``): term -> figure
DecompositionJson = dict[str, float | None]

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
    # the spreads (ftrun.check.noise) of the terms above, same unit; None: not measurable
    overlap_slowdown_spread: float | None = None
    compute_at_base_s_spread: float | None = None
    overlap_slowdown_s_spread: float | None = None
    comm_step_work_s_spread: float | None = None
    exposed_data_s_spread: float | None = None
    exposed_control_s_spread: float | None = None
    loop_s_spread: float | None = None

    def to_json(self) -> DecompositionJson:
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
    spreads = _spreads(costs, recs, plain, over, comm)
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
        **spreads,
    )


def _times(k: int, m: Measured | None) -> float | None:
    """The spread of ``k`` x a per-step mean (None: not measured)."""
    return None if m is None or m.spread is None else k * m.spread


def _spreads(
    costs: list[StepCost], recs: list[EventRecord], plain: list[float], over: list[float], comm: list[float]
) -> dict[str, float | None]:
    """The terms' spreads (module docstring). Exposed time sits at the syncs (data) and the sends
    and syncs (quorum, commit): its spread is that of the like events' mean, not of every step's
    (a step without a sync waits nothing by the schedule, not by chance)."""
    n = len(costs)
    data = [seconds(x.exposed_s) for x in recs if x.synced is not None]
    quorum = [seconds(x.quorum_s) for x in recs if x.quorum_s is not None]
    commit = [seconds(x.commit_s) for x in recs if x.commit_s is not None]
    out = {
        # no overlapped step: the slowdown is 1 by definition, not by measurement
        "overlap_slowdown_spread": (ratio_spread(over, plain) if over else 0.0) if plain else None,
        "compute_at_base_s_spread": _times(n, mean_of(plain)),
        "overlap_slowdown_s_spread": _times(len(over), mean_difference(over, plain)) if over else 0.0,
        "comm_step_work_s_spread": _times(len(comm), mean_difference(comm, plain)) if comm else 0.0,
        "exposed_data_s_spread": _times(len(data), mean_of(data)) if data else 0.0,
        "exposed_control_s_spread": quadrature(
            [
                _times(len(quorum), mean_of(quorum)) if quorum else 0.0,
                _times(len(commit), mean_of(commit)) if commit else 0.0,
            ]
        ),
    }
    terms = [out[k + "_spread"] for k in TERMS]  # the loop is the terms' sum (and float error)
    out["loop_s_spread"] = quadrature(terms)
    return out


def mean_decomposition(parts: list[Decomposition]) -> DecompositionJson | None:
    """The replicas' decompositions averaged term by term (a term is None if any replica's is)."""
    if not parts:
        return None
    out: DecompositionJson = {}
    for key in Decomposition.__dataclass_fields__:
        vals = [getattr(p, key) for p in parts]
        out[key] = None if any(v is None for v in vals) else sum(vals) / len(vals)
    return out


def explained_ratio(a: DecompositionJson, b: DecompositionJson) -> float | None:
    """Throughput ratio a/b that the named terms alone predict (steps per second of named time)."""

    def named(d: DecompositionJson) -> float | None:
        vals = [v for k in TERMS if (v := d.get(k)) is not None]
        steps = d.get("steps")
        return None if len(vals) < len(TERMS) or not steps else sum(vals) / steps

    na, nb = named(a), named(b)
    return nb / na if na and nb else None


def per_step_ms(d: DecompositionJson, key: str) -> float | None:
    v, steps = d.get(key), d.get("steps")
    return None if v is None or not steps else v / steps * 1e3


def overlap_cause(backend: str | None) -> str:
    """Why overlapped steps run slower, on this backend (what the run's collectives compete for)."""
    if backend in ("nccl", "baby-nccl"):
        return "NCCL kernels share the GPU's SMs and memory bandwidth with compute"
    return "collectives share the CPU cores with compute"


def per_step(d: DecompositionJson, key: str) -> Measured | None:
    """A term of a decomposition (its JSON) per step, in ms, with its spread (None: not measured)."""
    v = per_step_ms(d, key)
    return None if v is None else Measured(v, per_step_ms(d, key + "_spread"))


def per_step_difference(a: DecompositionJson, b: DecompositionJson, key: str) -> Measured | None:
    """Run a's term minus run b's, per step in ms, with the two spreads combined."""
    x, y = per_step(a, key), per_step(b, key)
    return x.minus(y) if x is not None and y is not None else None


def _exposed(d: DecompositionJson) -> Measured | None:
    data, control = per_step(d, "exposed_data_s"), per_step(d, "exposed_control_s")
    return data.plus(control) if data is not None and control is not None else None


def machine_clause(a_name: str, a: DecompositionJson, b_name: str, b: DecompositionJson) -> str | None:
    """The machine caveat, either way: a's unoverlapped steps computed faster or slower than b's
    beyond their spread. The schedule does not change a plain step's compute, so that difference
    is the machine's speed between the two runs, not the schedule. None within the spread."""
    base = per_step_difference(a, b, "compute_at_base_s")
    if base is None or not base.beyond():
        return None
    how = "slower" if base.value > 0 else "faster"
    return (
        f"{a_name}'s unoverlapped steps computed {abs(base.value):.1f} ms per step {how} than {b_name}'s "
        f"(the machine, not the schedule: a step without communication computes the same under either)"
    )


def largest_reason(
    a_name: str, a: DecompositionJson, b_name: str, b: DecompositionJson, backend: str | None
) -> str | None:
    """One sentence: how much exposed communication ``a`` saved (or added) per step against
    ``b``, the largest cost that took the gain back (or that it became throughput), and the
    machine caveat either way. Only differences beyond their spread are said (``ftrun.check.noise``)."""
    ea, eb = _exposed(a), _exposed(b)
    if ea is None or eb is None:
        return None
    gain = eb.minus(ea)  # ms per step of communication a no longer waits for
    costs = {k: m for k in ("overlap_slowdown_s", "comm_step_work_s") if (m := per_step_difference(a, b, k))}
    if not costs and per_step(a, "compute_at_base_s") is None:
        return None
    if not gain.beyond():
        text = f"{a_name} and {b_name} wait on communication alike per step ({NO_DIFFERENCE})"
    else:
        more = "less" if gain.value > 0 else "more"
        text = f"{a_name} waits {abs(gain.value):.1f} ms per step {more} on communication than {b_name}"
    grew = {k: m for k, m in costs.items() if m.beyond() and m.value > 0}
    machine = machine_clause(a_name, a, b_name, b)
    tail = f"; {machine}" if machine else ""
    if not grew:
        if gain.beyond() and gain.value > 0:
            return text + "; no other term grew beyond its spread, so the gain became throughput" + tail
        return text + tail
    key, extra = max(grew.items(), key=lambda kv: kv[1].value)
    if key == "overlap_slowdown_s":
        how, why = _overlap_how(a), f": {overlap_cause(backend)}"
    else:
        how, why = "its send/sync steps computed longer (pseudo-gradients, issuing collectives, outer steps)", ""
    share = min(extra.value / gain.value, 9.99) if gain.beyond() and gain.value > 0 else None
    took = f", taking back {share * 100:.0f}% of that" if share is not None else ""
    return f"{text}; the largest cost against it: {how} (+{extra.value:.1f} ms per step{took}){why}{tail}"


def slowdown_measured(d: DecompositionJson) -> Measured | None:
    """The overlap slowdown (the medians' ratio) with its spread, said only where the compute it
    cost (``overlap_slowdown_s``, the means' difference) also lies beyond its spread, on the same
    side: on a skewed class the median and the mean disagree, and no slowdown is claimed on the
    median alone (its spread is then widened to reach 1). None: not measured."""
    med, spread = d.get("overlap_slowdown"), d.get("overlap_slowdown_spread")
    if med is None:
        return None
    lost, lost_spread = d.get("overlap_slowdown_s"), d.get("overlap_slowdown_s_spread")
    if spread is None or lost is None:
        return Measured(med, spread)
    if Measured(lost, lost_spread).beyond() and (lost > 0) == (med > 1.0):
        return Measured(med, spread)
    return Measured(med, max(spread, abs(med - 1.0)))


def _overlap_how(a: DecompositionJson) -> str:
    """How much longer a's overlapped steps computed: the mean (what the term accounts), and the
    median beside it where it lies beyond its spread from 1."""
    mean, med = a.get("mean_overlap_slowdown"), a.get("overlap_slowdown")
    if not mean:
        return "its overlapped steps ran slower"
    said = (m := slowdown_measured(a)) is not None and m.beyond(1.0)
    return f"its steps overlapping communication computed {(mean - 1) * 100:.0f}% longer on average" + (
        f" (median {(med - 1) * 100:+.0f}%)" if said and med else ""
    )
