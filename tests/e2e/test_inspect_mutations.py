"""Mutated real traces: each mutation must give exit 1 and an event naming the problem.

Mutation helpers edit the decoded chrome-trace JSON (plain dicts), the way a broken run would
look: a send moved one step, a sync missing, two sends' tensor sizes swapped (fragment swap),
one replica disagreeing with the others. They run on torchft's own DiLoCo traces (foreign, no
manifest) and on ``ftrun train`` run dirs.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from train_fixtures import FOREIGN_FLAGS, drop_sync, inspect, move_send, read, swap_send_sizes, write

pytestmark = pytest.mark.e2e  # every test here starts processes (or uses a fixture that trains)

# ---------------------------------------------------------------- the traces under test


class Subject:
    """A copy of a passing trace set: ``files`` per replica (first window), args for the CLI."""

    def __init__(self, root: Path, files: dict[int, Path], args: list[str]) -> None:
        self.root, self.files, self.args = root, files, args
        res = inspect(str(root), *args, "--json")
        assert res.exit_code == 0, res.output
        self.baseline = json.loads(res.output)

    def first(self, kind: str, replica: int = 0, fragment_change: bool = False) -> dict:
        evs = [e for e in self.baseline["events"] if e["replica"] == replica and e["kind"] == kind]
        if fragment_change:
            return evs
        return evs[0]

    def check(self) -> dict:
        res = inspect(str(self.root), *self.args, "--json")
        assert res.exit_code == 1, res.output
        d = json.loads(res.output)
        assert d["verdict"] == "fail"
        return d


@pytest.fixture(params=["foreign", "streaming", "f3"])
def subject(request, tmp_path, foreign_traces) -> Subject:
    if request.param == "foreign":
        root = tmp_path / "foreign"
        shutil.copytree(foreign_traces, root)
        files = {r: root / f"r{r}" / "step-12.json" for r in (0, 1)}
        return Subject(root, files, FOREIGN_FLAGS)
    run_dir = request.getfixturevalue("ftrun_run")(request.param)
    root = tmp_path / request.param
    shutil.copytree(run_dir, root)
    files = {}
    for t in json.loads((root / "manifest.json").read_text())["traces"]:
        files.setdefault(t["replica"], root / t["path"])
    return Subject(root, files, [])


def _problems(d: dict, replica: int = 0) -> list[str]:
    return [e["problem"] for e in d["events"] if not e["ok"] and e["replica"] == replica]


def test_send_moved_one_step(subject):
    send = subject.first("send")
    s = send["observed_step"]
    d = read(subject.files[0])
    move_send(d, s)
    write(subject.files[0], d)
    out = subject.check()
    want = f"send of fragment {send['fragment']} expected at step {s}, observed at step {s + 1}"
    assert want in _problems(out), _problems(out)
    assert any(not c["ok"] and f"send at step {s}" in c["problem"] for c in out["cross_replica"])


def test_sync_missing(subject):
    sync = subject.first("sync")
    s = sync["observed_step"]
    d = read(subject.files[0])
    drop_sync(d, s)
    write(subject.files[0], d)
    out = subject.check()
    assert f"sync of fragment {sync['fragment']} missing at step {s}" in _problems(out), _problems(out)


def test_fragment_swapped(subject):
    sends = subject.first("send", fragment_change=True)
    a = sends[0]
    b = next(e for e in sends if e["fragment"] != a["fragment"])
    d = read(subject.files[0])
    swap_send_sizes(d, a["observed_step"], b["observed_step"])
    write(subject.files[0], d)
    out = subject.check()
    probs = _problems(out)
    assert f"send at step {a['observed_step']}: fragment {b['fragment']}, expected fragment {a['fragment']}" in probs, (
        probs
    )
    assert f"send at step {b['observed_step']}: fragment {a['fragment']}, expected fragment {b['fragment']}" in probs, (
        probs
    )
    assert not _problems(out, replica=1)  # the other replica is untouched


def test_one_replica_disagrees(subject):
    # Replica 1 alone sends the other fragment's tensors at its first send.
    sends = subject.first("send", replica=1, fragment_change=True)
    a = sends[0]
    b = next(e for e in sends if e["fragment"] != a["fragment"])
    d = read(subject.files[1])
    swap_send_sizes(d, a["observed_step"], b["observed_step"])
    write(subject.files[1], d)
    out = subject.check()
    bad = [c for c in out["cross_replica"] if not c["ok"]]
    assert any(
        re.match(
            rf"replicas disagree on the send at step {a['observed_step']}\b.*replica 0 rank 0: fragment {a['fragment']}"
            rf", replica 1 rank 0: fragment {b['fragment']}",
            c["problem"],
        )
        for c in bad
    ), bad
    assert not _problems(out, replica=0)
    assert _problems(out, replica=1)
