"""The sweep grid: axes, presets, the product of the axes, cell names, and each cell's status
before anything runs. Pure and torch-free (``ftrun sweep`` runs the cells; see
``ftrun.commands.sweep``, ``ftrun.sweep``).

* An axis is ``KEY=V1,V2,...`` over any ``ftrun train`` option (a config key, ``ftrun.config``:
  the flag's and the TOML file's name, dashes or underscores; ``mode`` = the streaming/baseline
  preset). Values are split on ``;`` when the text holds one (``link=1gbit,20ms;100mbit,5ms``),
  else on ``,``. Booleans: on/off, true/false, yes/no, 1/0. ``kill``/``hang``: one value = one
  run's faults, several joined by ``+`` (``kill=none,1@10``). A value that is not of the option's
  type, or not one of its choices (model, backend, mode), is bad input; a value that breaks a
  rule only together with others makes its cells ``invalid``.
* A cell's status: ``invalid`` when ``ftrun.config.build`` refuses its configuration (torchft's
  schedule rules live in ``ftrun.schedule.validate``, ftrun's in ``ftrun.config``; the message
  is kept as the rule), ``unavailable`` when this host cannot run it (the caller's check:
  ``ftrun.launch.preflight.why_unavailable``), else ``run``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ftrun.config import BACKENDS, FIELD_NAMES, MODELS, PRESETS, RunConfig, fields, flag
from ftrun.errors import BadInput
from ftrun.layout import AxisValue, CellVerdict, ConfigValue

Params = dict[str, AxisValue]  # a cell's axis values, by config key, in axis order
Shared = dict[str, ConfigValue]  # the train options every cell shares, by config key (None: not given)

# Options a sweep sets itself or that make no sense per cell (one host, one sweep dir).
NOT_AXES = frozenset(
    {
        "out",
        "run_name",
        "lighthouse",
        "replica_group_id",
        "job_id",
        "master_addr",
        "master_port",
        "advertise_host",
        "interface",
        "native_store",
    }
)
AXIS_KEYS = frozenset(FIELD_NAMES) - NOT_AXES
CHOICES: dict[str, tuple[str, ...]] = {"model": MODELS, "backend": BACKENDS, "mode": tuple(PRESETS)}
PRESET_NAMES = ("pgs", "tau", "fragments")
# Short names in cell names (a cell's run dir is named after its parameters).
SHORT = {
    "fragments": "F",
    "sync_every": "H",
    "fragment_sync_delay": "tau",
    "fragment_update_alpha": "alpha",
    "replicas": "R",
    "nproc_per_replica": "G",
}
# --preset pgs's recovery cell: group 1 killed at step 15 (streaming H=20: after a send, before
# its sync), relaunched once; three groups, 100 ms of compute a step, as tests/train_fixtures.py's
# RECOVERY_RUN, so the survivors still form a quorum and the relaunch has time to heal
KILL = "1@15"
RECOVERY_PARAMS: Params = {"replicas": 3, "step_sleep_ms": 100}
_TRUE, _FALSE = ("on", "true", "yes", "1"), ("off", "false", "no", "0")


@dataclass(frozen=True)
class Axis:
    key: str
    values: tuple[AxisValue, ...]

    @property
    def numeric(self) -> bool:
        """int/float values (not booleans) with more than one value: drawn as an x axis."""
        return len(self.values) > 1 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.values
        )


@dataclass
class Cell:
    """One point of the grid. ``status``: run | invalid | unavailable; ``reason``: the rule or cause."""

    name: str
    params: Params
    status: str = "run"
    reason: str | None = None
    config: RunConfig | None = field(default=None, repr=False)  # for cells that run


def axis_key(key: str, where: str) -> str:
    """``key`` as a field name; ``BadInput`` naming ``where`` when it is no sweepable option."""
    k = key.strip().replace("-", "_")
    if k in NOT_AXES:
        raise BadInput(f"{where}: {key!r} cannot vary per cell (the sweep sets it, or it needs several hosts)")
    if k not in AXIS_KEYS:
        raise BadInput(f"{where}: unknown option {key!r} (known: {', '.join(sorted(AXIS_KEYS))})")
    return k


def parse_value(key: str, raw: str, where: str) -> AxisValue:
    """One axis value, typed like the config field ``key`` (``mode``: a preset name)."""
    text = raw.strip()
    if key == "mode" or key in CHOICES:
        if text not in CHOICES[key]:
            raise BadInput(f"{where}: {key} {text!r} is not one of {', '.join(CHOICES[key])}")
        return text
    kind = fields()[key].kind
    if kind is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise BadInput(f"{where}: {key} {text!r} is not on/off")
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise BadInput(f"{where}: {key} {text!r} is not an integer") from None
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise BadInput(f"{where}: {key} {text!r} is not a number") from None
    if kind is list:
        return [] if text.lower() in ("", "none", "off") else [x.strip() for x in text.split("+")]
    if not text:
        raise BadInput(f"{where}: {key} has an empty value")
    return text


def parse_axis(text: str) -> Axis:
    """``KEY=V1,V2,...`` -> ``Axis`` (``BadInput`` naming ``--axis TEXT``)."""
    where = f"--axis {text}"
    if "=" not in text:
        raise BadInput(f"{where}: expected KEY=V1,V2,...")
    key, _, rest = text.partition("=")
    k = axis_key(key, where)
    parts = rest.split(";") if ";" in rest else rest.split(",")
    if not rest.strip() or any(not p.strip() for p in parts) and fields()[k].kind is not list:
        raise BadInput(f"{where}: empty value (give V1,V2,...; values with commas: separate them with ';')")
    values = tuple(parse_value(k, p, where) for p in parts)
    seen: list[AxisValue] = []
    for v in values:
        if v in seen:
            raise BadInput(f"{where}: value {fmt(v)} given twice")
        seen.append(v)
    return Axis(k, values)


def merge_axes(preset_axes: list[Axis], user_axes: list[Axis]) -> list[Axis]:
    """Preset axes, each replaced by a user axis of the same key; then the other user axes.
    The same key twice among the user's axes is bad input."""
    keys = [a.key for a in user_axes]
    for k in keys:
        if keys.count(k) > 1:
            raise BadInput(f"--axis {k}: given twice (one --axis per option, values separated by commas)")
    mine = {a.key: a for a in user_axes}
    out = [mine.pop(a.key, a) for a in preset_axes]
    return out + [a for a in user_axes if a.key in mine]


def check_shared(axes: list[Axis], shared: Shared) -> None:
    """A train flag shared by all cells must not also be an axis."""
    for a in axes:
        if shared.get(a.key) is not None:
            raise BadInput(f"{flag(a.key)}: also an axis of this sweep (drop one of them)")


def _int(v: ConfigValue) -> int | None:
    """An int option's value (None: not given)."""
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def preset_axes(
    name: str,
    shared: Shared,
    cuda: bool,
    backends: tuple[str, ...] = ("gloo", "baby-gloo", "nccl", "baby-nccl"),
) -> tuple[list[Axis], Shared]:
    """A preset's axes and the shared values it sets when the user did not (``shared`` = the
    user's flags, None = not given). ``cuda``: whether this host has a CUDA device.

    * ``pgs``: backend ``backends`` (every group the installed torchft offers:
      ``ftrun.torchft_compat.process_group_backends``; torchft's four by default) x bucketize
      off/on x mode streaming/baseline x quantize off/on (what this host cannot run is
      ``unavailable``), and a ``kill`` axis (none, ``KILL``) of which ``cells`` makes one
      recovery cell per process group, not a product (none when the user's flags or file set kill).
    * ``tau``: fragment_sync_delay 0 .. H/F-1, streaming (H and F: the flags, else the preset's).
    * ``fragments``: F over the divisors of H, tau = the flag's, else 0.
    """
    if name not in PRESET_NAMES:
        raise BadInput(f"--preset {name}: unknown (choose from {', '.join(PRESET_NAMES)})")
    mode = shared.get("mode") or "streaming"
    h: int = _int(shared.get("sync_every")) or PRESETS[str(mode)]["sync_every"]
    if name == "pgs":
        axes = [
            Axis("backend", tuple(backends)),
            Axis("bucketize", (False, True)),
            Axis("mode", ("streaming", "baseline")),
            Axis("quantize", (False, True)),
        ]
        return axes + ([] if shared.get("kill") is not None else [Axis("kill", ([], [KILL]))]), {}
    if name == "tau":
        f: int = _int(shared.get("fragments")) or PRESETS["streaming"]["fragments"]
        if h < 1 or f < 1 or h % f:
            raise BadInput(f"--preset tau: needs H a multiple of F (here --sync-every {h}, --fragments {f})")
        return [Axis("fragment_sync_delay", tuple(range(h // f)))], {"mode": "streaming"}
    if h < 1:
        raise BadInput(f"--preset fragments: --sync-every {h} must be at least 1")
    divisors = tuple(d for d in range(1, h + 1) if h % d == 0)
    return [Axis("fragments", divisors)], {"mode": "streaming", "fragment_sync_delay": 0}


def fmt(v: ConfigValue) -> str:
    """A value as the user would write it (on/off, 0.5, none, 1@10+0@20)."""
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, list):
        return "+".join(map(str, v)) if v else "none"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _name_part(key: str, v: AxisValue) -> str:
    text = re.sub(r"[^A-Za-z0-9.]+", "-", fmt(v)).strip("-") or "x"
    return f"{SHORT.get(key, key.replace('_', '-'))}{'' if key in SHORT else '-'}{text}"


def cell_name(params: Params) -> str:
    """A run-dir name from the parameters, in axis order: ``backend-gloo_bucketize-off_F2_tau5``."""
    return "_".join(_name_part(k, v) for k, v in params.items()) or "cell"


def cells(axes: list[Axis], shared: Shared, preset: str | None = None) -> list[Cell]:
    """The grid's cells: the product of ``axes``, except for ``--preset pgs``'s ``kill`` axis
    (next to its ``backend`` axis): the product of the other axes without a fault, then per
    backend and per kill value one recovery cell (every other axis at its first value) run as
    ftrun's recovery tests are, with ``RECOVERY_PARAMS`` where the user's ``shared`` flags do
    not set them (two groups cannot tell a kill from the end of the quorum: three do)."""
    keys = [a.key for a in axes]
    if preset != "pgs" or "kill" not in keys or "backend" not in keys:
        return product(axes)
    kill = axes[keys.index("kill")]
    rest = [a for a in axes if a.key != "kill"]
    out = [Cell(c.name, {**c.params, "kill": []}) for c in product(rest)] if rest else []
    extra: Params
    extra = {k: v for k, v in RECOVERY_PARAMS.items() if shared.get(k) is None}
    for backend in axes[keys.index("backend")].values:
        for fault in (v for v in kill.values if v):
            params: Params = {**{a.key: a.values[0] for a in rest}, "backend": backend, "kill": fault}
            out.append(Cell(cell_name({**params, **extra}), {**params, **extra}))
    return out


def product(axes: list[Axis]) -> list[Cell]:
    """The grid: every combination of the axes' values, in axis order (last axis fastest).
    Names are unique (a clash after sanitising gets ``-2``, ``-3``...)."""
    if not axes:
        raise BadInput("sweep: empty grid (give --preset pgs|tau|fragments or --axis KEY=V1,V2,...)")
    cells: list[Cell] = []
    seen: dict[str, int] = {}
    for combo in itertools.product(*(a.values for a in axes)):
        params = {a.key: v for a, v in zip(axes, combo, strict=True)}
        name = cell_name(params)
        seen[name] = seen.get(name, 0) + 1
        cells.append(Cell(name if seen[name] == 1 else f"{name}-{seen[name]}", params))
    return cells


def classify(
    cells: list[Cell], build: Callable[[Params], RunConfig], why_unavailable: Callable[[RunConfig], str | None]
) -> list[Cell]:
    """Set each cell's status: ``build(params)`` raising ``BadInput`` -> invalid (its message);
    ``why_unavailable(config)`` a string -> unavailable; else run (``config`` kept)."""
    for c in cells:
        try:
            cfg = build(c.params)
        except BadInput as e:
            c.status, c.reason = "invalid", str(e)
            continue
        why = why_unavailable(cfg)
        if why:
            c.status, c.reason = "unavailable", why
        else:
            c.config = cfg
    return cells


def verdict(
    schedule_verdict: str, problems: list[str], unexplained: list[tuple[int, int, int]]
) -> tuple[CellVerdict, str | None]:
    """A cell's verdict from its analysis (``analyze(..., allow_failed_commits=True)``):
    ``fail`` when the schedule or agreement check found a problem (the first one), else
    ``failed-commits`` when commits failed that no injected fault explains (``unexplained``:
    each one's replica, rank and sync step), else ``pass``."""
    if schedule_verdict != "pass":
        return "fail", problems[0] if problems else "the schedule check failed"
    if unexplained:
        where: dict[tuple[int, int], list[int]] = {}
        for replica, rank, sync_step in unexplained:
            where.setdefault((replica, rank), []).append(sync_step)
        r, g = min(where)
        return "failed-commits", (
            f"{len(unexplained)} commit(s) failed on {len(where)} rank(s) that no injected fault "
            f"explains (first: replica {r} rank {g} at sync steps {', '.join(map(str, sorted(where[(r, g)])))})"
        )
    return "pass", None


def exit_code(verdicts: list[str]) -> int:
    """0 when every cell that could run ran and passed (and at least one ran), else 1; ``verdicts``: each cell's."""
    ran = [v for v in verdicts if v not in ("invalid", "unavailable")]
    return 0 if ran and all(v == "pass" for v in ran) else 1
