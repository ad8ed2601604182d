"""Nothing lost: no command writes onto what it reads or deletes what ftrun did not create, and
bad names, duplicate traces and interrupted run dirs are one-line bad input (exit 2).

Unit tests: no process is started (the CLI runs in-process; ``train`` stops before launching).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ftrun.errors import BadInput
from ftrun.output import RUN_MARKER, atomic_write, check_name, claim_run_dir
from train_fixtures import cli, one_line, torchft_events

FLAGS = ["--fragments", "2", "--sync-every", "8", "--fragment-sync-delay", "2"]


def trace(steps: range, t0: float = 0.0) -> bytes:
    """A minimal torchft chrome trace: ProfilerStep#k spans with FLAGS' sends and syncs."""
    return json.dumps({"traceEvents": torchft_events(steps, t0)}).encode()


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else b"<dir>") for p in sorted(root.rglob("*"))}


# --- --export-perfetto never onto an input -------------------------------------------------


def test_perfetto_export_onto_its_input_trace_is_refused(tmp_path):
    t = tmp_path / "replica0_rank0.1.pt.trace.json"
    t.write_bytes(trace(range(1, 5)))
    before = t.read_bytes()
    res = cli("inspect-trace", str(t), *FLAGS, "--export-perfetto", str(t))
    assert res.exit_code == 2
    assert "--export-perfetto" in one_line(res) and "input" in res.output
    assert t.read_bytes() == before


def test_perfetto_export_into_the_run_dir_being_read_is_refused(tmp_path):
    run = tmp_path / "run"
    (run / "traces").mkdir(parents=True)
    manifest = run / "manifest.json"
    manifest.write_text(json.dumps({"ftrun_version": "0", "job_id": "j", "schedule": {}, "traces": []}))
    before = snapshot(run)
    for target in (manifest, run / "traces" / "new.json", run / "out.json"):
        res = cli("inspect-trace", str(run), "--export-perfetto", str(target))
        assert res.exit_code == 2 and "--export-perfetto" in one_line(res), res.output
    assert snapshot(run) == before  # byte-identical, nothing added


def test_atomic_write_leaves_the_target_alone_when_writing_fails(tmp_path):
    target = tmp_path / "report.json"
    target.write_text("old")

    class Boom(Exception):
        pass

    from ftrun.output import atomic_open

    with pytest.raises(Boom):
        with atomic_open(target, overwrite=True) as f:
            f.write(b"half")
            raise Boom
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]
    atomic_write(target, "new", overwrite=True)  # (a file ftrun did not write: only with --overwrite)
    assert target.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


# --- --overwrite deletes only ftrun's own run dirs ------------------------------------------

TRAIN = ["train", "--steps", "4", "--profile", "none"]


def test_overwrite_refuses_a_directory_ftrun_did_not_write(tmp_path):
    d = tmp_path / "mine"
    d.mkdir()
    (d / "spec.json").write_text("{}")  # looks a bit like a run dir, but is not ftrun's
    (d / "thesis.tex").write_text("years of work")
    before = snapshot(d)
    res = cli(*TRAIN, "--out", str(tmp_path), "--run-name", "mine", "--overwrite")
    assert res.exit_code == 2 and "not an ftrun run dir" in one_line(res)
    assert snapshot(d) == before


def test_overwrite_refuses_an_ftrun_run_dir_holding_user_files(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / RUN_MARKER).write_text(json.dumps({"pid": 1}))
    (d / "manifest.json").write_text(json.dumps({"ftrun_version": "0", "job_id": "j"}))
    (d / "notes.txt").write_text("keep me")
    before = snapshot(d)
    res = cli(*TRAIN, "--out", str(tmp_path), "--run-name", "run", "--overwrite")
    assert res.exit_code == 2 and "notes.txt" in one_line(res)
    assert snapshot(d) == before


def test_overwrite_refuses_a_symlinked_run_dir(tmp_path):
    real = tmp_path / "elsewhere"
    real.mkdir()
    (real / RUN_MARKER).write_text(json.dumps({"pid": 1}))
    (real / "spec.json").write_text("{}")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "run").symlink_to(real)
    before = snapshot(real)
    res = cli(*TRAIN, "--out", str(tmp_path / "out"), "--run-name", "run", "--overwrite")
    assert res.exit_code == 2 and "symlink" in one_line(res)
    assert snapshot(real) == before and (tmp_path / "out" / "run").is_symlink()


def test_overwrite_replaces_an_ftrun_run_dir_and_locks_it(tmp_path):
    run = tmp_path / "run"
    lock = claim_run_dir(run, overwrite=False)
    (run / "events").mkdir()
    (run / "events" / "replica0_rank0.jsonl").write_text('{"step": 1}\n')
    try:
        with pytest.raises(BadInput, match=f"in use by pid {os.getpid()}"):
            claim_run_dir(run, overwrite=True)
        assert (run / "events" / "replica0_rank0.jsonl").exists()  # the holder's files are untouched
    finally:
        lock.release()
    lock = claim_run_dir(run, overwrite=True)  # released: an interrupted (marker-only) run is replaced
    try:
        assert sorted(p.name for p in run.iterdir()) == [RUN_MARKER]
    finally:
        lock.release()
    with pytest.raises(BadInput, match="already exists"):
        claim_run_dir(run, overwrite=False)


def test_overwrite_refuses_a_run_dir_holding_an_input_of_the_run(tmp_path):
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    (run / RUN_MARKER).write_text(json.dumps({"pid": 1}))
    data = run / "logs" / "corpus.txt"
    data.write_text("some text to train on " * 50)
    before = snapshot(run)
    res = cli(*TRAIN, "--out", str(tmp_path), "--run-name", "run", "--overwrite", "--data", str(data))
    assert res.exit_code == 2 and "input" in one_line(res), res.output
    assert snapshot(run) == before


# --- user-given names are one path component -----------------------------------------------


def test_a_300_character_run_name_is_bad_input(tmp_path):
    res = cli(*TRAIN, "--out", str(tmp_path), "--run-name", "x" * 300)
    assert res.exit_code == 2 and "--run-name" in one_line(res)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["../x", "a/b", "..", "x" * 300])
def test_compare_name_must_be_a_plain_name(tmp_path, name):
    out = tmp_path / "out"
    res = cli("compare", "streaming", "baseline", "--out", str(out), "--name", name)
    assert res.exit_code == 2 and "--name" in one_line(res)
    assert list(tmp_path.iterdir()) == []  # neither OUT nor OUT/../x was created


def test_failed_compare_leaves_no_empty_directory(tmp_path):
    runs = []
    for n in ("a", "b"):  # run dirs whose manifests analyze refuses (no schedule)
        d = tmp_path / n
        d.mkdir()
        (d / "manifest.json").write_text(json.dumps({"ftrun_version": "0", "job_id": n, "link": None, "traces": []}))
        runs.append(str(d))
    out = tmp_path / "out"
    out.mkdir()
    res = cli("compare", *runs, "--out", str(out), "--name", "cmp")
    assert res.exit_code == 2, res.output
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("value", ["ok-name_1.2", "x" * 200])
def test_check_name_accepts_plain_names(value):
    assert check_name("--name", value) == value


# --- inspect-trace: interrupted runs, duplicates, mixed runs --------------------------------


def test_inspect_an_interrupted_run_dir(tmp_path):
    run = tmp_path / "run"
    (run / "meta").mkdir(parents=True)
    (run / RUN_MARKER).write_text(json.dumps({"pid": 1}))
    (run / "spec.json").write_text(json.dumps({"config": {}}))
    (run / "meta" / "replica0_rank0.json").write_text(json.dumps({"status": "running"}))
    res = cli("inspect-trace", str(run), *FLAGS)
    assert res.exit_code == 2
    line = one_line(res)
    assert "interrupted run: no traces were written" in line and "spec.json" not in line.split(":")[0]


def test_inspect_an_interrupted_run_dir_uses_only_its_traces(tmp_path):
    run = tmp_path / "run"
    (run / "traces").mkdir(parents=True)
    (run / RUN_MARKER).write_text(json.dumps({"pid": 1}))
    (run / "spec.json").write_text(json.dumps({"config": {}}))
    (run / "traces" / "replica0_rank0.1.pt.trace.json").write_bytes(trace(range(1, 5)))
    res = cli("inspect-trace", str(run), *FLAGS, "--json")
    assert res.exit_code in (0, 1), res.output  # checked (no sends in this trace), not bad input
    files = [f for w in json.loads(res.output)["workers"] for f in w["files"]]
    assert files == [str(run / "traces" / "replica0_rank0.1.pt.trace.json")]


def test_a_folder_holding_an_interrupted_run_dir_reads_no_bookkeeping_as_traces(tmp_path):
    run = tmp_path / "profiles" / "run"
    (run / "meta").mkdir(parents=True)
    (run / RUN_MARKER).write_text(json.dumps({"pid": 1}))
    (run / "spec.json").write_text(json.dumps({"config": {}}))
    (run / "meta" / "replica0_rank0.json").write_text(json.dumps({"status": "running"}))
    res = cli("inspect-trace", str(tmp_path / "profiles"), *FLAGS)
    assert res.exit_code == 2 and "no trace files" in one_line(res), res.output


def test_same_trace_twice_is_bad_input(tmp_path):
    t = tmp_path / "replica0_rank0.1.pt.trace.json"
    t.write_bytes(trace(range(1, 5)))
    res = cli("inspect-trace", str(t), str(t), *FLAGS)
    assert res.exit_code == 2 and "given twice" in one_line(res)


def test_copies_of_one_trace_are_bad_input(tmp_path):
    (tmp_path / "a.json").write_bytes(trace(range(1, 5)))
    (tmp_path / "b.json").write_bytes(trace(range(1, 5)))
    res = cli("inspect-trace", str(tmp_path), *FLAGS)
    line = one_line(res)
    assert res.exit_code == 2 and "a.json" in line and "b.json" in line


def test_folder_mixing_two_runs_is_bad_input(tmp_path):
    (tmp_path / "replica0_rank0.1.pt.trace.json").write_bytes(trace(range(1, 9)))
    (tmp_path / "replica0_rank0.5.pt.trace.json").write_bytes(trace(range(5, 13), t0=1e6))  # another run's window
    (tmp_path / "replica1_rank0.1.pt.trace.json").write_bytes(trace(range(1, 9), t0=3.0))
    res = cli("inspect-trace", str(tmp_path), *FLAGS)
    line = one_line(res)
    assert res.exit_code == 2, res.output
    assert "replica0_rank0.1.pt.trace.json" in line and "replica0_rank0.5.pt.trace.json" in line


def test_two_windows_of_one_worker_are_still_fine(tmp_path):
    (tmp_path / "replica0_rank0.1.pt.trace.json").write_bytes(trace(range(1, 5)))
    (tmp_path / "replica0_rank0.9.pt.trace.json").write_bytes(trace(range(9, 13), t0=1e6))
    res = cli("inspect-trace", str(tmp_path), *FLAGS, "--json")
    assert res.exit_code in (0, 1), res.output  # checked (no sends in these traces), not bad input
    (w,) = json.loads(res.output)["workers"]
    assert len(w["files"]) == 2


# --- a failed group's cause is its exception line, not torchrun's banner ---------------------

TORCHRUN_LOG = """\
[W1130 09:00:00.000000000 socket.cpp:755] some warning about an error-prone setting
[rank0]: Traceback (most recent call last):
[rank0]:   File "/x/ftrun/worker/setup.py", line 76, in build
[rank0]: RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory: you tried to allocate 640000000000 bytes.
E1130 09:00:01.000000 123 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: 1) local_rank: 0 (pid: 124) of binary: /usr/bin/python
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
ftrun.worker.main FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  exitcode  : 1 (pid: 124)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""  # noqa: E501 (torchrun's lines, as captured)


def test_group_error_is_the_first_exception_line():
    from ftrun.launch.diagnose import error_line as first_exception

    got = first_exception(TORCHRUN_LOG)
    assert got.startswith("RuntimeError: [enforce fail at alloc_cpu.cpp:117]") and "640000000000 bytes" in got
    assert first_exception("ConnectionRefusedError: [Errno 111] Connection refused\n") == (
        "ConnectionRefusedError: [Errno 111] Connection refused"
    )
    assert "To enable traceback" not in first_exception(
        TORCHRUN_LOG.split("[rank0]: RuntimeError")[1].split("\n", 1)[1]
    )
