"""ftrun.api: the same verdicts as the CLI (tests/data/cpu_run and its mutations), BadInput with the
CLI's one line, Schedule, config handling, Run and compare on stored run dirs. Unit: no process."""

from __future__ import annotations

import inspect as pyinspect
import json
import os
import shutil
from pathlib import Path

import msgspec
import pytest

import ftrun
from ftrun import api, cli as cli_module, layout, schedule as schedule_module
from ftrun.comparison.outputs import as_recorded
from ftrun.comparison.specs import SHARED_SETTINGS
from train_fixtures import cli, drop_sync, inspect, move_send, read, same_as_cli, swap_send_sizes, write

DATA = Path(__file__).parent.parent / "data" / "cpu_run"
FLAGS = ["--fragments", "2", "--sync-every", "20", "--fragment-sync-delay", "5"]  # cpu_run's schedule


def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(DATA, dst)
    return dst


def _traces(run: Path) -> dict[int, Path]:
    return {t["replica"]: run / t["path"] for t in json.loads((run / "manifest.json").read_text())["traces"]}


def _cli_error(*args: str) -> str:
    res = inspect(*args)
    assert res.exit_code == 2, res.output
    return res.output.strip().removeprefix("error: ")


def test_the_stored_run_passes_as_on_the_cli():
    r = ftrun.check_traces(DATA)
    assert r.ok and r.verdict == "pass" and r.problems == [] and r.failing == [] and r.failing_table() == ""
    assert len(r.events) == 8 and {(e.replica, e.kind) for e in r.events} == {
        (0, "send"),
        (0, "sync"),
        (1, "send"),
        (1, "sync"),
    }
    assert all(e.expected_step == e.observed_step and e.expected_fragment == e.fragment for e in r.events)
    assert r.schedule == ftrun.Schedule(2, 20, 5)
    assert r.numerics is None  # this run carries no numeric check: None, never a pass
    same_as_cli(r, str(DATA))
    table = r.table()
    assert "replica 0 rank 0" in table and "PASS 8 events on 2 worker(s) landed as expected" in table
    assert "\x1b[" not in table  # plain text


def test_moved_send_same_verdict_and_table(tmp_path):
    run = _copy(tmp_path)
    f = _traces(run)[0]
    d = read(f)
    move_send(d, 25)
    write(f, d)
    r = ftrun.check_traces([run])
    assert not r.ok
    assert "replica 0 rank 0: send of fragment 0 expected at step 25, observed at step 26" in r.problems
    same_as_cli(r, str(run))
    table = r.failing_table().splitlines()
    assert table[0].split() == ["replica", "rank", "kind", "step", "fragment", "problem"]
    assert table[1].split()[:5] == ["0", "0", "send", "25→26", "0"]
    assert any(x.startswith("cross-replica: replicas disagree on the send at step 25") for x in table)


@pytest.mark.parametrize("mutation", ["drop_sync", "swap_fragments", "one_replica_disagrees"])
def test_mutations_same_verdict_as_cli(tmp_path, mutation):
    run = _copy(tmp_path)
    files = _traces(run)
    replica = 1 if mutation == "one_replica_disagrees" else 0
    d = read(files[replica])
    if mutation == "drop_sync":
        drop_sync(d, 30)
    else:
        swap_send_sizes(d, 25, 35)
    write(files[replica], d)
    r = ftrun.check_traces(run)
    assert not r.ok and r.problems
    same_as_cli(r, str(run))
    want = {
        "drop_sync": "replica 0 rank 0: sync of fragment 0 missing at step 30",
        "swap_fragments": "replica 0 rank 0: send at step 25: fragment 1, expected fragment 0",
        "one_replica_disagrees": "replica 1 rank 0: send at step 25: fragment 1, expected fragment 0",
    }[mutation]
    assert want in r.problems, r.problems


def _bare_traces(tmp_path: Path) -> Path:
    """cpu_run's trace files without their run dir (no manifest, no event logs)."""
    bare = tmp_path / "bare"
    bare.mkdir()
    for p in _traces(DATA).values():
        shutil.copy(p, bare / p.name)
    return bare


def test_schedule_and_manifest_for_traces_without_one(tmp_path):
    bare = _bare_traces(tmp_path)
    by_schedule = ftrun.check_traces(bare, schedule=ftrun.Schedule(2, 20, fragment_sync_delay=5))
    same_as_cli(by_schedule, str(bare), *FLAGS)
    assert by_schedule.ok and by_schedule.raw.mode == "foreign"
    by_manifest = ftrun.check_traces(bare, manifest=DATA / "manifest.json")
    assert by_manifest.to_json() == by_schedule.to_json()
    assert ftrun.check_traces(bare, manifest=DATA).to_json() == by_schedule.to_json()  # the run dir holding it


def test_bad_input_is_the_clis_one_line(tmp_path):
    bare = _bare_traces(tmp_path)
    cases = [
        ([str(tmp_path / "nope")], dict(), []),
        ([str(bare)], dict(), []),  # no manifest, no schedule
        (
            [str(DATA)],
            dict(schedule=ftrun.Schedule(1, 20, 0)),
            ["--fragments", "1", "--sync-every", "20", "--fragment-sync-delay", "0"],
        ),
        ([str(DATA)], dict(step_numbering="middle"), ["--step-numbering", "middle"]),
    ]
    for paths, kw, flags in cases:
        with pytest.raises(ftrun.BadInput) as e:
            ftrun.check_traces(paths, **kw)
        assert str(e.value) == _cli_error(*paths, *flags)
        assert "\n" not in str(e.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ftrun.BadInput) as e:
        ftrun.check_traces(tmp_path / "empty")
    assert str(e.value) == _cli_error(str(tmp_path / "empty"))
    with pytest.raises(ftrun.BadInput, match="no paths given"):
        ftrun.check_traces([])
    with pytest.raises(ftrun.BadInput, match="not both"):
        ftrun.check_traces(bare, schedule=ftrun.Schedule(2, 20, 5), manifest=DATA)
    with pytest.raises(ftrun.BadInput, match="no manifest.json there"):
        ftrun.check_traces(bare, manifest=bare)
    with pytest.raises(ftrun.BadInput, match="must be an ftrun.Schedule"):
        ftrun.check_traces(bare, schedule=(2, 20, 5))


def test_schedule_is_the_schedule_module():
    assert ftrun.Schedule is schedule_module.Schedule
    s = ftrun.Schedule(fragments=2, sync_every=20, fragment_sync_delay=5)
    assert [(e.step, e.kind, e.fragment) for e in s.events(40)] == [
        (5, "send", 0),
        (10, "sync", 0),
        (15, "send", 1),
        (20, "sync", 1),
        (25, "send", 0),
        (30, "sync", 0),
        (35, "send", 1),
        (40, "sync", 1),
    ]
    assert [e.fragment for e in s.events(40, failed_cycles=[0]) if e.kind == "sync"] == [
        0,
        0,
        1,
        0,
    ]  # a failed commit repeats
    with pytest.raises(ftrun.ScheduleError, match="fragment_sync_delay=10"):
        ftrun.Schedule(2, 20, 10)


def test_package_exports_lazily():
    assert ftrun.check_traces is api.check_traces and ftrun.Run is api.Run and ftrun.train is api.train
    assert ftrun.BadInput is api.BadInput
    # one list of names: every one is the API's own, the same object through ftrun
    assert ftrun.__all__ == api.__all__ == list(ftrun._API)
    for name in ftrun._API:
        assert getattr(ftrun, name) is getattr(api, name), name
    assert ftrun.EventResult.__name__ == "EventResult"
    with pytest.raises(AttributeError):
        ftrun.no_such_name  # noqa: B018


def test_config_of_dict_toml_and_runconfig(tmp_path):
    from ftrun.config import RunConfig

    cfg = api.config_of({"fragments": 2, "sync-every": 8, "fragment_sync_delay": 2, "steps": 16}, out=tmp_path)
    assert (cfg.schedule.fragments, cfg.schedule.sync_every, cfg.schedule.fragment_sync_delay, cfg.steps, cfg.out) == (
        2,
        8,
        2,
        16,
        str(tmp_path),
    )
    with pytest.raises(ftrun.BadInput, match=r"^config: fragment_sync_delay = 4: torchft needs tau < H/F"):
        api.config_of({"sync_every": 8, "fragment_sync_delay": 4})
    with pytest.raises(ftrun.BadInput, match="unknown option"):
        api.config_of({"nonsense": 1})
    toml = tmp_path / "run.toml"
    toml.write_text("mode = 'baseline'\nsteps = 20\n")
    assert (api.config_of(toml).schedule.fragments, api.config_of(str(toml)).steps) == (1, 20)
    with pytest.raises(ftrun.BadInput, match="not found"):
        api.config_of(tmp_path / "missing.toml")
    mine = RunConfig.from_keys(steps=0)
    with pytest.raises(ftrun.BadInput, match="--steps 0: must be at least 1"):
        api.config_of(mine)
    ok = RunConfig.from_keys(steps=20)
    assert api.config_of(ok, out=tmp_path).out == str(tmp_path) and ok.out == "profiles"  # the caller's is not changed
    with pytest.raises(ftrun.BadInput, match="must be a RunConfig"):
        api.config_of(42)


def test_run_handle_on_a_stored_run(tmp_path):
    run = ftrun.Run(DATA)
    assert run.manifest.schedule.fragments == 2 and run.report.ok
    assert run.check(allow_failed_commits=True).ok
    with pytest.raises(ftrun.BadInput, match="unreadable summary"):
        run.summary  # noqa: B018  (the stored run has no summary.json)


def test_compare_reads_two_runs(tmp_path):
    other = _copy(tmp_path)
    junit = tmp_path / "cmp.xml"
    res = cli(
        "compare",
        str(DATA),
        str(other),
        "--out",
        str(tmp_path / "out"),
        "--name",
        "cli",
        "--json",
        "--junit",
        str(junit),
    )
    assert res.exit_code == 0, res.output
    c = ftrun.compare(ftrun.Run(DATA), other, out=tmp_path / "out", name="api")
    assert c.ok and c.dir == tmp_path / "out" / "api" and (c.dir / "report.json").is_file()
    assert [[r.ok for r in reps] for reps in c.reports] == [[True], [True]]
    cli_result = json.loads(res.output)
    assert [r.verdict for r in c.result.runs] == [r["verdict"] for r in cli_result["runs"]]
    assert type(c.result).__name__ == "CompareReport" and c.result.ok
    # the report.json it wrote: the keys docs/output-layout.md lists, decoded into the record returned
    raw = json.loads((c.dir / "report.json").read_text())
    documented = {"compare_dir", "runs", "link", "conclusion", "throughput", "versions", "timeline", "verdict"}
    assert set(raw) == documented | {"goodput"} and raw["goodput"] is None  # no --expect-hidden: no key
    got = layout.read_compare_report(c.dir / "report.json")
    assert got == as_recorded(c.result, c.dir) and msgspec.to_builtins(got) == raw  # every key and value
    assert raw["runs"][1]["run_dir"] == os.path.relpath(other, c.dir)  # run dirs relative to the file
    with pytest.warns(DeprecationWarning, match=r"Comparison.result is a CompareReport .*not result\['runs'\]"):
        assert [r["verdict"] for r in c.result["runs"]] == [r["verdict"] for r in cli_result["runs"]]
    assert junit.read_text().count("<testcase ") == 14  # 2 runs x (2 workers x sends, syncs, commits + agreement)
    with pytest.raises(ftrun.BadInput, match="settings steps2: not shared"):
        ftrun.compare("streaming", "baseline", settings={"steps2": 3})
    with pytest.raises(ftrun.BadInput, match="^--stall-timeout: a training setting applies only when compare trains"):
        ftrun.compare(DATA, other, settings={"stall_timeout_s": 3.0}, out=tmp_path / "out")
    res = cli("compare", str(DATA), str(other), "--steps", "5", "--out", str(tmp_path / "out"))
    assert res.exit_code == 2 and "--steps: a training setting applies only when compare trains" in res.output


def test_shared_settings_are_compares_train_flags():
    own = {"runs", "link", "out", "name", "expect_hidden", "repeat", "junit", "overwrite", "json_out"}
    flags = set(pyinspect.signature(cli_module.compare_cmd).parameters) - own
    assert flags == set(SHARED_SETTINGS)


def test_train_hands_the_config_to_ftrun_train_and_wraps_its_failure(tmp_path, monkeypatch):
    import ftrun.commands.train as train_cmd

    seen = {}

    def fake(cfg, overwrite=False, json_out=False, quiet=False, on_run_dir=None):
        seen.update(cfg=cfg, quiet=quiet)
        run_dir = Path(cfg.out) / (cfg.run_name or "streaming-20260101-000000")  # a name left empty: chosen here
        run_dir.mkdir(parents=True)
        on_run_dir(run_dir)
        if cfg.steps == 21:
            raise ftrun.RunFailed("replica group 1 exited with code 1")
        return 0

    monkeypatch.setattr(train_cmd, "train", fake)
    run = ftrun.train({"steps": 20}, out=tmp_path)
    assert seen["quiet"] and seen["cfg"].steps == 20 and run.path == tmp_path / "streaming-20260101-000000"
    with pytest.raises(ftrun.TrainFailed, match="replica group 1 exited") as e:
        ftrun.train({"steps": 21, "run_name": "bad"}, out=tmp_path)
    assert isinstance(e.value, ftrun.RunFailed) and e.value.run.path == tmp_path / "bad"
    assert str(e.value) == f"replica group 1 exited with code 1 (run dir {tmp_path / 'bad'})"
    with pytest.raises(ftrun.BadInput, match="^config: steps = 0: must be at least 1$"):
        ftrun.train({"steps": 0}, out=tmp_path)  # refused before anything starts
