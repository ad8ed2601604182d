"""torchft's own log lines as evidence of the fragment id, and replicas that average different
layers. Hand-made logs and observations; no process."""

from __future__ import annotations

from pathlib import Path

from ftrun.check.cross import cross_replica
from ftrun.check.events import event_results
from ftrun.check.fragment_log import apply, read_fragment_log
from ftrun.check.identify import Identities
from ftrun.check.match import WorkerMatch, pair
from ftrun.check.observe import Obs, WorkerObs
from ftrun.check.workers import Worker
from ftrun.schedule import Schedule
from ftrun.trace.spans import Send, Span, Sync, TraceSpans

SCHEDULE = Schedule(3, 12, 1)  # w = 4: sends at 3, 7, 11; syncs at 4, 8, 12
TRACE = TraceSpans(Path("t.json"), "profiler", [], [], [], [])
LOGGER = "INFO:torchft.local_sgd:"
T = (1, 1)


def _log(tmp_path: Path, name: str, order: list[int], msteps: list[int] | None = None) -> Path:
    lines = ["INFO:torchft.manager:some other line"]
    for k, f in enumerate(order):
        m = k if msteps is None else msteps[k]
        lines += [f"{LOGGER}Preparing fragment={f} step=3", f"{LOGGER}Syncing fragment={f} step=4 manager_step={m}"]
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


def _worker(replica: int) -> WorkerObs:
    obs = []
    for c in range(3):
        ts = 10.0 * c
        send = Send(Span(ts, ts + 1, T), ())
        obs.append(Obs("send", ts, SCHEDULE.send_step(c), c, TRACE, send=send))
        sync = Sync(Span(ts + 5, ts + 6, T), None, None, None, None)
        obs.append(Obs("sync", ts + 5, SCHEDULE.sync_step(c), c, TRACE, sync=sync))
    return WorkerObs(Worker(replica, 0, "file order", [TRACE]), [(1, 12)], obs)


def test_the_log_names_each_cycle_fragment(tmp_path):
    lg = read_fragment_log(_log(tmp_path, "r.log", [0, 1, 2]), 0)
    assert lg is not None and (lg.sends, lg.syncs, lg.unusable) == ([0, 1, 2], [0, 1, 2], None)
    none = tmp_path / "plain.log"
    none.write_text("inner step 1 manager step 0\n")
    assert read_fragment_log(none, 0) is None


def test_a_relaunched_process_log_is_not_read_by_count(tmp_path):
    lg = read_fragment_log(_log(tmp_path, "r.log", [2, 0], msteps=[5, 6]), 1)
    assert lg is not None and lg.unusable and "manager step 5" in lg.unusable


def test_replicas_syncing_fragments_in_another_order_fail_from_the_logs(tmp_path):
    """Equal-sized fragments (nothing in the trace tells them apart): replica 1 syncs 1, 0, 2."""
    logs = {0: read_fragment_log(_log(tmp_path, "a.log", [0, 1, 2]), 0)}
    logs[1] = read_fragment_log(_log(tmp_path, "b.log", [1, 0, 2]), 1)
    wobs = [_worker(0), _worker(1)]
    ids = Identities()
    notes, problems = apply(logs, wobs, ids, SCHEDULE)  # type: ignore[arg-type]
    assert notes == [] and problems == []
    assert [ids.of(o).fragment for o in wobs[1].obs] == [1, 1, 0, 0, 2, 2]
    assert all(ids.of(o).checked and ids.of(o).basis == "log" for o in wobs[0].obs)
    matches = []
    for wo in wobs:
        exp = SCHEDULE.events(12)
        m = WorkerMatch(wo, [], [], exp)
        m.pairs = pair(exp, wo.obs, SCHEDULE.window)
        matches.append(m)
    results, _ = event_results(matches, ids, SCHEDULE)
    bad = [r.problem for r in results if not r.ok]
    assert "sync at step 4: fragment 1, expected fragment 0" in bad
    assert all(r.ok for r in results if r.replica == 0)
    cross = [c for c in cross_replica(matches, results) if not c.ok]
    assert [(c.kind, c.step) for c in cross] == [("send", 3), ("sync", 4), ("send", 7), ("sync", 8)]
    assert cross[1].problem == (
        "replicas disagree on the sync at step 4 (manager step 0): replica 0 rank 0: fragment 0, "
        "replica 1 rank 0: fragment 1"
    )
