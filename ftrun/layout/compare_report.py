"""``COMPARE_DIR/report.json``: what ``ftrun compare`` found (also its ``--json`` and the API's
``Comparison.result``), one typed record of nested Structs. Torch-free.

Written with one encode (``ftrun.json_out.report_json``: strict JSON, a NaN or infinite figure
``null`` and named in ``notes``); read back with one typed, bounded decode
(``read_compare_report``: ``plan --check`` and its goodput check). A field an earlier ftrun did not
write reads as its default; a field of another type is one line naming the file and the field.
Fields that are absent by meaning (a link not calibrated, no ``--expect-hidden``, one repeat) are
``UNSET`` and not written, as before these records.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import msgspec
from msgspec import UNSET, UnsetType

from ftrun.chaos_summary import GoodputComparison
from ftrun.layout.manifest import ScheduleInfo
from ftrun.layout.spec import Link
from ftrun.layout.summary import ReadAsDict
from ftrun.small_files import read_json

REPORT_JSON = "report.json"  # ftrun compare: the result, in the compare dir
# Bytes of a report.json (or sweep.json) read at most: a row per run or cell, kilobytes each; a
# thousand-cell sweep is a few MB
RESULT_LIMIT = 256 << 20

# the loop time's terms (``ftrun.check.throughput``), averaged over replicas: term -> seconds (None:
# not measured for some replica), and ``steps``
Decomposition = dict[str, float | None]


class NumericsBrief(msgspec.Struct):
    """The numeric check of a run in brief (``ftrun.check.metrics.numerics_brief``): its status,
    the syncs checked, how many problems, why it was not checked."""

    status: str
    checked: int = 0
    problems: int = 0
    why: str | None = None


class RunRecovery(msgspec.Struct, kw_only=True):
    """A run's faults and recovery (``ftrun.check.metrics.recovery_of``): each fault's label, the
    restarts, heals and commits lost, each fault's ``recovered_s``, and from the breakdown
    (``ftrun.check.recovery``) each recovery's seconds and its largest phase ``[phase, seconds]``."""

    faults: list[str] = []
    restarts: int = 0
    heals: int = 0
    commits_lost: int = 0
    recovered_s: list[float | None] = []
    recovery_s: list[float | None] = []
    largest_phase: list[tuple[str | None, float | None]] = []


class RepeatRun(msgspec.Struct, kw_only=True):
    """One repeat of a run (``--repeat``): where it ran, its verdict and its figures
    (``ftrun.check.metrics.FIGURES``)."""

    run_dir: str | None = None  # a run dir, or a job's group dirs joined by ","
    verdict: str | None = None
    steps_per_s: float | None = None
    tokens_per_s: float | None = None
    wall_s: float | None = None
    exposed_comm_s: float | None = None
    exposed_data_s: float | None = None
    exposed_control_s: float | None = None
    per_sync_exposed_ms: float | None = None
    per_sync_exposed_control_ms: float | None = None
    hidden_comm_share: float | None = None
    compute_utilisation: float | None = None
    median_step_s: float | None = None
    median_overlapped_step_s: float | None = None
    overlap_slowdown: float | None = None
    overlap_lost_s: float | None = None
    final_loss: float | None = None


class CompareRun(msgspec.Struct, kw_only=True):
    """A run of a compare (``ftrun.check.metrics.run_metrics``; definitions in its docstring),
    over its repeats (``aggregate``: each figure the median, ``spread`` [min, max])."""

    name: str
    run_dir: str | None = None  # a run dir, or a job's group dirs joined by ","
    run_dirs: list[str] = []
    schedule: ScheduleInfo | None = None
    verdict: str | None = None
    problems: list[str] = []
    numerics: NumericsBrief | None = None
    steps_per_s: float | None = None
    steps_per_s_per_replica: list[float | None] = []
    tokens_per_s: float | None = None
    tokens_per_s_per_replica: list[float | None] = []
    wall_s: float | None = None
    syncs: float = 0
    commits: float | None = None
    exposed_comm_s: float = 0.0
    exposed_data_s: float = 0.0
    exposed_control_s: float | None = None  # None: an earlier ftrun's record
    per_sync_exposed_ms: float | None = None
    per_sync_exposed_control_ms: float | None = None
    compute_utilisation: float | None = None
    median_step_s: float | None = None
    median_unoverlapped_step_s: float | None = None
    median_overlapped_step_s: float | None = None
    overlap_slowdown: float | None = None
    overlap_lost_s: float | None = None
    decomposition: Decomposition | None = None
    backend: str | None = None
    profiled_syncs: int = 0
    profiled_comm_ms: float = 0.0
    profiled_hidden_ms: float = 0.0
    hidden_comm_share: float | None = None
    peak_sync_bytes: int = 0
    total_bytes: float | None = None
    final_loss: float | None = None
    loss_at_steps: dict[str, float | None] = {}
    link: Link | None = None  # the run's manifest link (None: not emulated)
    recovery: RunRecovery | None = None
    repeats: int = 1
    spread: dict[str, list[float]] = {}
    repeat_runs: list[RepeatRun] | UnsetType = UNSET  # with --repeat N > 1 only


class Recalibration(msgspec.Struct):
    """The first run's measured step was off the calibrated one: the run, its step, the first link."""

    run: str
    measured_step_s: float
    link: str


class CompareLink(msgspec.Struct, kw_only=True):
    """The link both runs trained on (``Link``'s keys), how it was chosen, and when compare chose
    it by calibrating (``ftrun.comparison.link.default_link``) what that measured and what plain DiLoCo's sync
    costs on it (``UNSET``, not written: a link given or recorded)."""

    bandwidth_bps: float | None = None  # None: loopback (not emulated)
    latency_s: float | None = None
    emulated: bool = False
    describe: str = ""
    chosen: str = ""
    calibrated_step_s: float | UnsetType = UNSET
    calibration: str | UnsetType = UNSET
    model_bytes: int | UnsetType = UNSET
    link_step_s: float | UnsetType = UNSET
    plain_sync_s: float | UnsetType = UNSET
    plain_sync_share_of_h: float | UnsetType = UNSET
    recalibrated_from: Recalibration | UnsetType = UNSET
    measured_median_step_s: dict[str, float | None] | UnsetType = UNSET
    plain_sync_share_of_measured_h: dict[str, float] | UnsetType = UNSET


class Told(msgspec.Struct, frozen=True):
    """Whether the runs' spread tells their throughputs apart (``ftrun.report.compare_view.tells``).

    ``repeats``: runs per side (the fewer); ``told``: a difference is claimed (at least two runs
    per side and their min-to-max ranges of steps/s do not overlap); ``difference_ms``: the
    per-step time difference, first run minus second; ``spread_ms``: the run-to-run spread it is
    held against (with repeats: half the widest min-to-max range of step times; with one run each:
    the machine's unoverlapped-compute difference between the two runs, with the runs' own
    per-step spreads); ``repeats_needed``: ``--repeat`` that would tell (None: more than
    ``noise.MAX_REPEATS``, or no difference)."""

    repeats: int
    told: bool
    ratio: float
    difference_ms: float
    spread_ms: float | None
    repeats_needed: int | None


class Explanation(msgspec.Struct, kw_only=True):
    """Where the throughput difference comes from (``ftrun.report.compare_view.explanation``): the
    measured ratio of the first run over the second, the ratio the named terms predict, whether
    they agree ``within``, the largest reason, the machine caveat, the names, ``Told``."""

    measured_ratio: float
    explained_ratio: float | None = None
    explained: bool = False
    within: float = 0.0
    reason: str | None = None
    machine: str | None = None
    names: list[str] = []
    told: Told | None = None  # None: a result written before the spread was recorded


class ExpectHidden(msgspec.Struct):
    """``--expect-hidden MIN``: the first run's hidden share against it."""

    min: float
    observed: float | None
    ok: bool
    run: str = ""  # the run held against it ("": an earlier ftrun's file, the first run)


class CompareReport(ReadAsDict, msgspec.Struct, kw_only=True):
    """``report.json`` (module docstring). ``versions``: what each run ran on (its first run's
    manifest ``versions``, by run name); ``goodput``: a chaos run beside its fault-free twin
    (None: not such a compare). ``result["key"]`` reads as when ``ftrun.api.Comparison.result``
    was the file's dict, with a ``DeprecationWarning`` (``ReadAsDict``)."""

    _READ_AS: ClassVar[tuple[str, str]] = ("Comparison.result", "result")

    compare_dir: str = ""
    runs: list[CompareRun] = []
    link: CompareLink = msgspec.field(default_factory=CompareLink)
    conclusion: str = ""
    throughput: Explanation | None = None
    versions: dict[str, dict[str, str | None] | None] = {}
    timeline: str | None = None
    verdict: str = ""
    goodput: GoodputComparison | None = None
    expect_hidden: ExpectHidden | UnsetType = UNSET

    @property
    def ok(self) -> bool:
        """Both runs passed and ``--expect-hidden`` (when given) held: compare's exit 0."""
        e = self.expect_hidden
        return self.verdict == "pass" and (isinstance(e, UnsetType) or e.ok)


def read_compare_report(path: Path) -> CompareReport:
    """``path`` (a compare dir's report.json) with one typed decode, at most ``RESULT_LIMIT``
    bytes; ``BadInput`` (one line naming the file, and the field) otherwise. Python's JSON
    tokens ``NaN``/``Infinity`` read too (earlier ftruns wrote them)."""
    return read_json(Path(path), RESULT_LIMIT, "result", CompareReport, python_json=True)
