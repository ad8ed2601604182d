"""A rank's event-log line (``layout.EventRecord``) from what its loop saw (``layout.StepNews``:
typed, by the record's own names) and what its recorder saw. No process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from msgspec import UNSET  # noqa: E402

from ftrun import layout  # noqa: E402
from ftrun.event_log import read_event_log  # noqa: E402
from ftrun.worker.recorder import StepRecorder  # noqa: E402

BASE = dict(manager_step=3, manager_step_after=4, participants=2, quorum_id=5, loss=1.5, step_time_s=0.25, restart=1)


def test_the_loops_news_is_written_by_name_and_absent_when_there_is_none(tmp_path: Path) -> None:
    path = tmp_path / "replica1_rank0.jsonl"
    rec = StepRecorder(path)
    q = layout.Quorum(quorum_id=5, participants=[0, 1], replica_rank=1, max_step=3, heal=True, heal_source=0, t=9.5)
    news = layout.StepNews(
        quorums=[q],
        healed=layout.Healed(source_replica=0, peer_step=3, manager_step=4),
        rejoined=layout.Rejoined(local_step=7, aligned_step=12),
    )
    rec.timings = {"quorum_s": 0.0123456789}
    rec.end_step(step=None, news=news, **BASE)
    rec.end_step(step=13, news=layout.StepNews(), **BASE)
    rec.close()
    first, second = (json.loads(line) for line in path.read_text().splitlines())
    assert first["quorums"] == [
        {
            "quorum_id": 5,
            "participants": [0, 1],
            "replica_rank": 1,
            "max_step": 3,
            "heal": True,
            "heal_source": 0,
            "t": 9.5,
        }
    ]
    assert first["healed"] == {"source_replica": 0, "peer_step": 3, "manager_step": 4}
    assert first["rejoined"] == {"local_step": 7, "aligned_step": 12}
    assert first["quorum_s"] == 0.012346 and first["step"] is None
    fixed = ["step", "manager_step", "manager_step_after", "participants", "quorum_id", "loss", "step_time_s"]
    fixed += ["restart", "sent", "synced", "commit", "fingerprint", "t"]
    assert list(second) == fixed and second["step"] == 13  # nothing measured or seen: no optional key
    assert [(r.healed, r.quorums) for r in read_event_log(path)] == [
        (news.healed, [q]),
        (UNSET, UNSET),
    ]  # read back typed
