"""Placement as a real run records it: every rank's device in the manifest and the summary."""

from __future__ import annotations

import pytest


@pytest.mark.e2e
def test_manifest_and_summary_show_every_ranks_device(ftrun_run):
    from ftrun import layout

    run = ftrun_run("streaming")
    manifest = layout.read_train_manifest(run)
    summary = layout.read_train_summary(run)
    want = [layout.DeviceRef(replica=r, rank=0, device="cpu") for r in (0, 1)]
    assert sorted(manifest.devices, key=lambda d: d.replica) == want
    assert summary.devices == manifest.devices
