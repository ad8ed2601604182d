"""The config tree (``ftrun.config``): one field, one key, one home; flags and help declared on the
field and generated for train, compare and sweep; the typed route into spec.json and the worker.
Unit tests: no process."""

from __future__ import annotations

import msgspec
import pytest
import typer.main

from ftrun import config as cfgmod, layout
from ftrun.cli import app
from ftrun.errors import BadInput
from train_fixtures import cli


def _params(command: str) -> dict[str, list[str]]:
    cmd = typer.main.get_command(app).commands[command]
    return {p.name: [*p.opts, *getattr(p, "secondary_opts", [])] for p in cmd.params}


def test_every_key_lives_in_one_part_and_reads_back() -> None:
    cfg = cfgmod.RunConfig()
    flat = cfg.resolved()
    assert set(flat) == cfgmod.FIELD_NAMES and len(flat) == len(cfgmod.fields())
    assert cfgmod.RunConfig.from_keys(**flat) == cfg
    assert cfg.schedule.fragment_sync_delay == flat["fragment_sync_delay"] == cfg.get("fragment_sync_delay")
    with pytest.raises(TypeError, match="no field 'tau'"):
        cfgmod.RunConfig.from_keys(tau=1)


def test_the_schedule_part_has_torchfts_names_and_gives_the_schedule() -> None:
    assert cfgmod.ScheduleConfig.__struct_fields__ == (
        "fragments",
        "sync_every",
        "fragment_sync_delay",
        "fragment_update_alpha",
    )
    s = cfgmod.ScheduleConfig(fragments=2, sync_every=8, fragment_sync_delay=3).expected
    assert (s.fragments, s.sync_every, s.fragment_sync_delay, s.window) == (2, 8, 3, 4)
    info = layout.ScheduleInfo.of(cfgmod.ScheduleConfig(), 60)  # what the manifest records
    assert (info.fragments, info.sync_every, info.fragment_sync_delay, info.steps) == (2, 20, 5, 60)


def test_the_spec_carries_the_tree_typed(tmp_path) -> None:
    cfg = cfgmod.build(out=str(tmp_path), steps=40, fragment_sync_delay=3, kill=["1@10"])
    spec = layout.Spec(
        config=cfg,
        run_dir=str(tmp_path),
        job_id="j",
        profile_window=None,
        threads=1,
        link=None,
        faults=[],
        quorum_timeout_s=60.0,
        start_barrier=None,
        hostname="h",
    )
    (tmp_path / layout.SPEC).write_text(layout.to_json(spec))
    back = layout.read_spec(tmp_path / layout.SPEC).config
    assert isinstance(back, cfgmod.RunConfig) and back == cfg
    assert back.schedule.fragment_sync_delay == 3 and back.faults.kill == ["1@10"]
    good = msgspec.json.decode((tmp_path / layout.SPEC).read_bytes())
    for part, key, value in (("schedule", "fragments", "two"), ("schedule", "tau", 3)):  # a wrong type, an unknown key
        bad = msgspec.json.decode(msgspec.json.encode(good))
        bad["config"][part][key] = value
        (tmp_path / layout.SPEC).write_bytes(msgspec.json.encode(bad))
        with pytest.raises(BadInput, match=rf"not an ftrun spec .*\$\.config\.{part}"):
            layout.read_spec(tmp_path / layout.SPEC)


def test_each_flag_is_declared_once_and_generated_for_its_commands() -> None:
    train, compare, sweep = (_params(c) for c in ("train", "compare", "sweep"))
    for key, f in cfgmod.fields().items():
        if not f.flags:
            assert key in cfgmod.FILE_ONLY and key not in train
            continue
        assert f.opt.help, key
        for command, params in (("train", train), ("compare", compare), ("sweep", sweep)):
            assert (key in params) == (command in f.opt.commands), (command, key)
        assert f.flags[0] in train[key]
    # the aliases and switches of before
    assert train["replicas"][:2] == ["--replicas", "--num-replica-groups"]
    assert train["stall_timeout_s"] == ["--stall-timeout"] and train["quorum_timeout_s"] == ["--quorum-timeout"]
    assert train["model_args"] == ["--model-arg"] and train["profile_recovery"] == ["--profile-recovery"]
    assert train["sketches"] == ["--sketches", "--no-sketches"]
    # compare keeps its subset: no schedule, no multi-host, no mode
    assert not {"fragments", "sync_every", "fragment_sync_delay", "mode", "lighthouse", "quantize"} & set(compare)
    assert {"fragments", "mode", "quantize"} <= set(sweep) and "lighthouse" not in sweep


def test_overrides_are_typed_and_blank_or_bad_values_are_one_line() -> None:
    opts = cfgmod.overrides({"fragment_sync_delay": 3, "kill": ("1@5",), "profile_recovery": "off", "steps": None})
    assert (opts.fragment_sync_delay, opts.kill, opts.profile_recovery, opts.steps) == (3, ["1@5"], False, None)
    assert cfgmod.given(opts) == {"fragment_sync_delay": 3, "kill": ["1@5"], "profile_recovery": False}
    with pytest.raises(BadInput, match=r"^--model-arg '': must not be empty$"):
        cfgmod.overrides({"model_args": ["a=1", ""]})
    res = cli("train", "--profile-recovery", "maybe")
    assert res.exit_code == 2 and res.output == "error: --profile-recovery maybe: use on or off\n"
    res = cli("compare", "streaming", "baseline", "--fragments", "2")
    assert res.exit_code == 2 and "No such option: --fragments" in res.output


def test_a_flag_and_its_file_key_build_the_same_field(tmp_path) -> None:
    from train_fixtures import write_toml

    p = write_toml(tmp_path / "c.toml", {"fragment-sync-delay": 2, "stall_timeout_s": 30.0})
    from_file = cfgmod.build(file_values=cfgmod.load_toml(p), out=str(tmp_path))
    from_flags = cfgmod.build(
        overrides=cfgmod.overrides({"fragment_sync_delay": 2, "stall_timeout_s": 30.0}), out=str(tmp_path)
    )
    assert from_file == from_flags and from_file.timeouts.stall_timeout_s == 30.0
