"""Mutated real traces: each mutation must give exit 1 and an event naming the problem.

Mutation helpers edit the decoded chrome-trace JSON (plain dicts), the way a broken run would
look: a send moved one step, a sync missing, two sends' tensor sizes swapped (fragment swap),
one replica disagreeing with the others. They run on torchft's own DiLoCo traces (foreign, no
manifest) and on ``ftrun train`` run dirs.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ftrun.cli import app
from ftrun.labels import FTRUN_STEP_RE, LABELS, PROFILER_STEP_RE

from conftest import FOREIGN

# ---------------------------------------------------------------- trace JSON helpers


def read(path: Path) -> dict:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def write(path: Path, d: dict) -> None:
    data = json.dumps(d).encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)


def steps(d: dict) -> dict[int, dict]:
    """Step number -> step span (ftrun::step#S when present, else ProfilerStep#k = step k)."""
    out: dict[int, dict] = {}
    for rx in (FTRUN_STEP_RE, PROFILER_STEP_RE):
        for e in d["traceEvents"]:
            m = rx.match(e.get("name", "")) if e.get("ph") == "X" else None
            if m:
                out[int(m[1])] = e
        if out:
            return out
    raise AssertionError("no step spans")


def spans(d: dict, name: str, step: int) -> list[dict]:
    s = steps(d)[step]
    return [e for e in d["traceEvents"] if e.get("ph") == "X" and e.get("name") == name
            and s["ts"] <= e["ts"] <= s["ts"] + s["dur"]]


def nested(d: dict, outer: dict) -> list[dict]:
    return [e for e in d["traceEvents"] if e.get("ph") == "X" and e.get("tid") == outer["tid"]
            and e.get("pid") == outer["pid"] and outer["ts"] <= e["ts"] <= outer["ts"] + outer["dur"]]


def move_send(d: dict, step: int) -> None:
    """Shift the send at ``step`` (prepare_sync and everything nested in it) into the next step."""
    (ps,) = spans(d, LABELS.prepare_sync, step)
    delta = steps(d)[step + 1]["ts"] + 1.0 - ps["ts"]
    for e in nested(d, ps):
        e["ts"] += delta


def drop_sync(d: dict, step: int) -> None:
    (pf,) = spans(d, LABELS.perform_sync, step)
    d["traceEvents"].remove(pf)


def send_ops(d: dict, step: int) -> list[dict]:
    (ps,) = spans(d, LABELS.prepare_sync, step)
    return [e for e in nested(d, ps) if e.get("name") in LABELS.c10d_allreduce]


def swap_send_sizes(d: dict, a: int, b: int) -> None:
    """The sends at steps ``a`` and ``b`` trade fragments (what each allreduced is swapped).

    Same number of allreduces: swap their ``Input Dims``. Otherwise swap the two sends'
    whole span trees in time (prepare_sync with everything nested in it).
    """
    oa, ob = send_ops(d, a), send_ops(d, b)
    if len(oa) == len(ob):
        for x, y in zip(oa, ob):
            x["args"]["Input Dims"], y["args"]["Input Dims"] = y["args"]["Input Dims"], x["args"]["Input Dims"]
        return
    (pa,), (pb,) = spans(d, LABELS.prepare_sync, a), spans(d, LABELS.prepare_sync, b)
    ta, tb = nested(d, pa), nested(d, pb)
    shift = pb["ts"] - pa["ts"]
    for e in ta:
        e["ts"] += shift
    for e in tb:
        e["ts"] -= shift


# ---------------------------------------------------------------- the traces under test


def run(*args: str):
    return CliRunner().invoke(app, ["inspect-trace", *args, "--json"])


FOREIGN_FLAGS = ["--fragments", str(FOREIGN["fragments"]), "--sync-every", str(FOREIGN["sync_every"]),
                 "--fragment-sync-delay", str(FOREIGN["delay"])]


class Subject:
    """A copy of a passing trace set: ``files`` per replica (first window), args for the CLI."""

    def __init__(self, root: Path, files: dict[int, Path], args: list[str]) -> None:
        self.root, self.files, self.args = root, files, args
        res = run(str(root), *args)
        assert res.exit_code == 0, res.output
        self.baseline = json.loads(res.output)

    def first(self, kind: str, replica: int = 0, fragment_change: bool = False) -> dict:
        evs = [e for e in self.baseline["events"] if e["replica"] == replica and e["kind"] == kind]
        if fragment_change:
            return evs
        return evs[0]

    def check(self) -> dict:
        res = run(str(self.root), *self.args)
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
    assert f"send at step {a['observed_step']}: fragment {b['fragment']}, expected fragment {a['fragment']}" in probs, probs
    assert f"send at step {b['observed_step']}: fragment {a['fragment']}, expected fragment {b['fragment']}" in probs, probs
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
        re.match(rf"replicas disagree on the send at step {a['observed_step']}\b.*replica 0 rank 0: fragment {a['fragment']}"
                 rf", replica 1 rank 0: fragment {b['fragment']}", c["problem"]) for c in bad
    ), bad
    assert not _problems(out, replica=0)
    assert _problems(out, replica=1)
