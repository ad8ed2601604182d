"""Every run-dir file ftrun writes is a ``layout`` Struct, written by ``layout.to_json`` and read
back by the same type (issue 20). Unit tests: no process."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ftrun import layout
from ftrun.output import mark_new_run_dir
from ftrun.worker.meta import RankMeta


class _Version(str):
    """Like torch's ``TorchVersion``: a str subclass msgspec's encoder refuses."""


def test_rank_meta_written_and_read_back(tmp_path: Path) -> None:
    mark_new_run_dir(tmp_path).release()  # a run dir: ftrun rewrites its own files there
    path = layout.meta_file(tmp_path, 1, 0)
    frag = layout.Fragment(id=0, params=[layout.Param(name="w", numel=4, shape=[2, 2])], numel=4, bytes=16)
    traces: list[str] = []
    record = layout.RankMeta(
        replica=1,
        rank=0,
        group_size=1,
        restart=0,
        backend="gloo",
        device="cpu",
        fragments=[frag],
        versions={"torch": _Version("2.13.0"), "torchft": None},
        traces=traces,
        profile_window=[3, 5],
    )
    meta = RankMeta(path, record)
    meta.write("running")
    got = layout.read_rank_meta(path)
    assert got is not None and got.status == "running" and got.pid == os.getpid() and got.versions["torch"] == "2.13.0"
    assert got.fragments[0].params[0].shape == [2, 2] and got.profile_window == [3, 5]
    traces.append("replica1_rank0.3.pt.trace.json.gz")  # the profiler fills the list the rank handed in
    meta.done(commits=3, failed_commits=1, final_manager_step=4)
    got = layout.read_rank_meta(path)
    assert got.traces == ["replica1_rank0.3.pt.trace.json.gz"]
    assert (got.status, got.commits, got.failed_commits, got.final_manager_step, got.error) == ("done", 3, 1, 4, None)


def test_a_half_written_or_foreign_meta_reads_as_none(tmp_path: Path) -> None:
    path = layout.meta_file(tmp_path, 0, 0)
    assert layout.read_rank_meta(path) is None  # missing
    path.parent.mkdir(parents=True)
    path.write_text('{"replica": 0, "rank"')
    assert layout.read_rank_meta(path) is None
    path.write_text(json.dumps({"status": "running"}))  # no replica, rank: not a rank's record
    assert layout.read_rank_meta(path) is None


def test_run_marker_is_a_record(tmp_path: Path) -> None:
    run = tmp_path / "r"
    run.mkdir()
    lock = mark_new_run_dir(run)
    try:
        marker = layout.read_run_marker(run)
        assert marker is not None and marker.pid == os.getpid() and marker.started > 0
        assert set(json.loads((run / layout.RUN_MARKER).read_text())) == {"pid", "started"}
    finally:
        lock.release()


def test_summaries_keep_their_keys_and_accept_extra_ones() -> None:
    """summary.json's keys are fixed by the Struct's field order; a key another ftrun adds (e.g.
    a top-level ``recovery`` in a launch summary) is ignored on reading, never refused."""
    import msgspec

    row = layout.LaunchGroupRow(replica=0, state="exited", exit_codes=[0], restarts=0, quorums=3, last_line="done")
    s = layout.LaunchSummary(
        run_dir="/r",
        script="/s.py",
        seconds=1.0,
        groups=[row],
        quorums_seen=3,
        faults_fired=[],
        traces=[],
        trace_note=None,
        failures=[],
        ok=True,
    )
    d = json.loads(layout.to_json(s, indent=1))
    assert list(d) == [
        "run_dir",
        "script",
        "seconds",
        "groups",
        "quorums_seen",
        "faults_fired",
        "traces",
        "trace_note",
        "failures",
        "inspection",
        "check",
        "ok",
        "format",
    ]
    d["recovery"] = {"breakdown": []}
    assert msgspec.convert(d, layout.LaunchSummary) == s
    assert [f.name for f in msgspec.structs.fields(layout.TrainSummary)] == [
        "run_dir",
        "ok",
        "wall_s",
        "mode",
        "schedule",
        "backend",
        "link",
        "devices",
        "replicas",
        "agreement",
        "numerics",
        "failures",
        "traces",
        "traces_note",
        "manifest",
        "versions",
        "faults",
        "recovery",
        "check",
        "chaos",
        "format",
    ]
