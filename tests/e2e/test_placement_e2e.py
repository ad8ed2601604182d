"""Placement as a real run records it: every rank's device in the manifest and the summary."""

from __future__ import annotations

import pytest


@pytest.mark.e2e
def test_manifest_and_summary_show_every_ranks_device(ftrun_run):
    import json

    run = ftrun_run("streaming")
    manifest = json.loads((run / "manifest.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    want = [{"replica": r, "rank": 0, "device": "cpu"} for r in (0, 1)]
    assert sorted(manifest["devices"], key=lambda d: d["replica"]) == want
    assert summary["devices"] == manifest["devices"]
