"""``ftrun inspect-trace --json``: one typed record, the report's JSON (``ReportJson``) with the
recovery breakdowns and, with ``--export-perfetto``, what the export wrote."""

from __future__ import annotations

import msgspec
from msgspec import UNSET, UnsetType

from ftrun.check.result import Report, ReportJson
from ftrun.layout import RecoveryRecord
from ftrun.report.perfetto import PerfettoExport


class InspectJson(ReportJson):
    """``ReportJson``'s keys, then ``recovery`` (``ftrun.check.recovery``: one breakdown per fault
    of the run dirs) and ``perfetto`` (only with ``--export-perfetto``)."""

    recovery: list[RecoveryRecord] = msgspec.field(default_factory=list)  # as summary.json holds them
    perfetto: PerfettoExport | UnsetType = UNSET


def inspect_json(report: Report, recovery: list[RecoveryRecord], exported: PerfettoExport | None) -> InspectJson:
    return InspectJson(
        **msgspec.structs.asdict(report.record()),
        recovery=recovery,
        perfetto=UNSET if exported is None else exported,
    )
