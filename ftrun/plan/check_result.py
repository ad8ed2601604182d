"""What ``ftrun plan --check`` and ``plan --mtbf`` answer, each one typed record (the object
``--json`` prints, ``msgspec.to_builtins``): ``RunsCheck`` (a compare or sweep dir's runs),
``RecoveryCheck`` (a ``--kill`` run dir), ``GoodputPlan`` and ``GoodputCheck`` (goodput under
faults, ``ftrun.plan.goodput``). Built by ``ftrun.plan.check``, ``recovery_check`` and
``goodput_run``; rendered by ``ftrun.report.plan_view`` and ``goodput_view``. Torch-free."""

from __future__ import annotations

import msgspec

from ftrun.link_spec import Link
from ftrun.plan.goodput import GoodputInputs, GoodputPrediction
from ftrun.plan.result import LinkOut


class Checked(msgspec.Struct, kw_only=True):
    """The four figures ``--check`` compares (``ftrun.plan.check.CHECKED``), in ms per sync and
    steps per second (None: not measured, or no error to give)."""

    exposed_ms_per_sync: float | None = None
    exposed_data_ms_per_sync: float | None = None
    exposed_control_ms_per_sync: float | None = None
    steps_per_s: float | None = None


class CheckedOk(msgspec.Struct, kw_only=True):
    """Per figure: within tolerance (None: nothing to compare)."""

    exposed_ms_per_sync: bool | None = None
    exposed_data_ms_per_sync: bool | None = None
    exposed_control_ms_per_sync: bool | None = None
    steps_per_s: bool | None = None


class RunCheck(msgspec.Struct, kw_only=True):
    """One run: predicted from its own run dirs on its own link (the median over its repeats),
    what runs like it give on average (from its drift's statistics), what it measured, the
    relative error and the verdict per figure. ``planes``: what the measured exposed time holds."""

    name: str
    planes: str
    link: Link | None
    repeats: int
    predicted: Checked
    expected_from_statistics: Checked
    measured: Checked
    error: Checked
    within_tolerance: CheckedOk


class RunsCheck(msgspec.Struct, kw_only=True):
    """``plan --check`` of a compare or sweep dir: every run, the verdict, what failed, and the
    runs none of whose gated figures was measured (no evidence either way)."""

    check: str
    tolerance: float
    exposed_floor_ms: float
    runs: list[RunCheck]
    verdict: str
    outside_tolerance: list[str]
    not_checked: list[str]


class HealBytes(msgspec.Struct, kw_only=True):
    """The heal's bytes: predicted, measured (what the group received), sent (None: not recorded)."""

    predicted: int
    measured: int | None
    sent: int | None


class RecoveryRow(msgspec.Struct, kw_only=True):
    """One fault's recovery by phase (``ftrun.check.recovery``'s phases and ``total``): seconds
    predicted and measured, how each was predicted, the heal's bytes, the verdict and error per phase."""

    fault: str
    replica: int
    predicted: dict[str, float | None]
    measured: dict[str, float | None]
    how: dict[str, str]
    heal_bytes: HealBytes
    within_tolerance: dict[str, bool | None]
    error: dict[str, float | None]


class RecoveryCheck(msgspec.Struct, kw_only=True):
    """``plan --check RUN_DIR`` of a ``--kill`` run: each fault's recovery against the prediction."""

    check: str
    kind: str = "recovery"
    tolerance: float
    floor_s: float
    link: LinkOut | None
    recovery: list[RecoveryRow]
    verdict: str
    outside_tolerance: list[str]


class GoodputPlan(msgspec.Struct, kw_only=True):
    """``plan --mtbf/--recovery-s``: the goodput model's inputs (rounded), where each came from,
    its prediction (rounded)."""

    kind: str = "goodput"
    inputs: GoodputInputs
    sources: dict[str, str]
    prediction: GoodputPrediction


class GoodputCheck(msgspec.Struct, kw_only=True):
    """``plan --check`` of a compare of a chaos run with its twin: the prediction against the
    goodput retained that compare measured."""

    check: str
    kind: str = "goodput"
    tolerance: float
    inputs: GoodputInputs
    sources: dict[str, str]
    prediction: GoodputPrediction
    measured_retained: float
    relative_error: float | None
    twin_differs: list[str]
    verdict: str
    measured_spread: float | None = None  # over compare's --repeat (GoodputComparison.retained_spread)
    measured_repeats: int = 1


PlanCheck = RunsCheck | RecoveryCheck | GoodputCheck
