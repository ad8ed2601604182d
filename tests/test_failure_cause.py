"""How the launcher tells why a group failed: from the rank's structured meta record (error,
phase), and only for a rank that died before it could write one, from its log. Unit tests."""

from __future__ import annotations

import json
from pathlib import Path

from ftrun import layout
from ftrun.config import RunConfig
from ftrun.launch.supervise import RunState, _group_error


def _state(tmp_path: Path) -> RunState:
    return RunState(RunConfig(nproc_per_replica=2), tmp_path, job_id="j", run_event_log=layout.run_event_log(tmp_path))


def test_meta_error_and_phase_win_over_the_log(tmp_path: Path) -> None:
    st = _state(tmp_path)
    layout.meta_file(tmp_path, 1, 1).parent.mkdir(parents=True)
    layout.meta_file(tmp_path, 1, 0).write_text(json.dumps({"status": "running"}))
    layout.meta_file(tmp_path, 1, 1).write_text(json.dumps(
        {"status": "failed", "error": "RuntimeError: quorum timed out", "error_type": "RuntimeError", "phase": "quorum"}))
    layout.group_log(tmp_path, 1).parent.mkdir(parents=True)
    layout.group_log(tmp_path, 1).write_text("ValueError: something else in the log\n")
    assert _group_error(st, 1) == ("RuntimeError: quorum timed out", "quorum")


def test_without_a_meta_error_the_log_names_the_cause_and_no_phase(tmp_path: Path) -> None:
    st = _state(tmp_path)
    log = layout.group_log(tmp_path, 0)
    log.parent.mkdir(parents=True)
    log.write_text("old incarnation\nKeyError: 'x'\n")
    since = len(log.read_bytes())
    with log.open("a") as f:
        f.write("[rank0]: ModuleNotFoundError: No module named 'nope'\n")
    assert _group_error(st, 0, since) == ("ModuleNotFoundError: No module named 'nope'", None)
    assert _group_error(st, 0) == ("KeyError: 'x'", None)


def test_a_rank_records_the_wait_it_failed_in(tmp_path: Path) -> None:
    import pytest

    from ftrun.worker.meta import RankMeta
    from ftrun.worker.whereabouts import Whereabouts

    where = Whereabouts(tmp_path, 0, enabled=False)

    def quorum() -> None:
        raise TimeoutError("no quorum within 60 s")

    assert where.around("sync", lambda: 3)() == 3 and where.failed_in is None
    with pytest.raises(TimeoutError) as exc:
        where.around("quorum", quorum)()
    meta = RankMeta(layout.meta_file(tmp_path, 0, 0), replica=0, rank=0)
    meta.failed(exc.value, where.failed_in)
    got = json.loads(layout.meta_file(tmp_path, 0, 0).read_text())
    assert (got["status"], got["error"], got["error_type"], got["phase"]) == (
        "failed", "TimeoutError: no quorum within 60 s", "TimeoutError", "quorum")
