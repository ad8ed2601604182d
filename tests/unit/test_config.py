"""``ftrun train`` input validation: one line on stderr, exit 2, nothing started; and the config
builder as a property (any input builds a valid config or raises ``BadInput``)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

from ftrun import config as cfgmod
from ftrun.config.build import toml_parser
from ftrun.errors import BadInput
from ftrun.schedule import Schedule
from train_fixtures import cli, one_line, write_toml

# --- --config file vs flags ------------------------------------------------------------------


def _train_option_names() -> set[str]:
    import typer.main

    from ftrun.cli import app

    cmd = typer.main.get_command(app).commands["train"]
    return {p.name for p in cmd.params} - {"config", "overwrite", "json_out"}


def test_every_train_flag_is_a_toml_key():
    missing = _train_option_names() - cfgmod.FIELD_NAMES
    assert not missing, f"flags with no config-file key: {missing}"


SAMPLE = {
    "mode": "baseline",
    "replicas": 3,
    "nproc_per_replica": 2,
    "fragments": 1,
    "sync_every": 8,
    "fragment_sync_delay": 2,
    "fragment_update_alpha": 0.5,
    "outer_lr": 0.5,
    "outer_momentum": 0.0,
    "inner_lr": 0.01,
    "quantize": False,
    "bucketize": True,
    "steps": 32,
    "model": "transformer",
    "blocks": 2,
    "width": 48,
    "seq_len": 8,
    "batch_size": 3,
    "vocab": 64,
    "backend": "gloo",
    "min_replicas": 2,
    "seed": 3,
    "profile": "9:16",
    "run_name": "from-file",
    "link": "1gbit,2ms",
    "step_sleep_ms": 1.5,
    "timeout_s": 30.0,
}


@pytest.mark.parametrize("dashes", [False, True])
def test_config_file_gives_same_keys_as_flags(tmp_path, dashes):
    values = {**SAMPLE, "out": str(tmp_path)}
    keys = {k.replace("_", "-") if dashes else k: v for k, v in values.items()}
    p = write_toml(tmp_path / "c.toml", keys)
    from_file = cfgmod.build(file_values=cfgmod.load_toml(p))
    from_flags = cfgmod.build(**values)
    assert from_file.resolved() == from_flags.resolved()
    for k, v in values.items():
        assert cfgmod.get(from_file, k) == v, k


def test_flags_override_config_file(tmp_path):
    p = write_toml(tmp_path / "c.toml", {**SAMPLE, "out": str(tmp_path)})
    cfg = cfgmod.build(
        file_values=cfgmod.load_toml(p), steps=40, width=16, mode="streaming", fragments=2, fragment_sync_delay=None
    )
    assert (cfg.steps, cfg.model.width, cfg.mode, cfg.schedule.fragments) == (40, 16, "streaming", 2)
    assert (
        cfg.schedule.fragment_sync_delay == 2 and cfg.schedule.sync_every == 8
    )  # None = not given: the file's value stays
    # the file beats the preset, the preset fills what neither gives
    cfg = cfgmod.build(file_values={"mode": "streaming", "sync_every": 12, "out": str(tmp_path)})
    assert (cfg.schedule.fragments, cfg.schedule.sync_every, cfg.schedule.fragment_sync_delay) == (2, 12, 5)


# --- property: build() never raises anything but BadInput ----------------------------------

FIELD_TYPES = {k: f.kind for k, f in cfgmod.fields().items()}
wild = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=1),
)
plausible = {
    int: st.one_of(st.integers(1, 8), st.integers(-2, 70)),
    float: st.one_of(st.floats(-0.5, 2.0), st.sampled_from([0.0, 1.0, 0.7, float("nan"), float("inf")])),
    bool: st.booleans(),
    list: st.lists(
        st.one_of(st.sampled_from(["1@5", "0@3:sigterm", "1@2:0.5", "2@1", "0@0"]), st.text(max_size=6)), max_size=2
    ),
    str: st.one_of(
        st.sampled_from(
            [
                "streaming",
                "baseline",
                "auto",
                "none",
                "1:20",
                "0:3",
                "5:2",
                "synthetic",
                "mlp",
                "transformer",
                "gloo",
                "nccl",
                "http://127.0.0.1:29510",
                "1gbit,20ms",
                "10mbit",
                "",
                "x\ny",
                "[/]",
                "/",
                "a:b",
            ]
        ),
        st.text(max_size=12),
    ),
}


@st.composite
def settings_dicts(draw, max_keys: int = 6):
    out = {}
    for name in draw(
        st.lists(st.sampled_from(sorted(cfgmod.FIELD_NAMES - {"out", "data"})), unique=True, max_size=max_keys)
    ):
        good = plausible.get(FIELD_TYPES[name], wild)
        out[name] = draw(st.one_of(good, wild) if draw(st.booleans()) else good)
    if draw(st.integers(0, 9)) == 0:
        out[draw(st.sampled_from(["bogus", "extra", "sync-every"]))] = 1
    return out


@given(
    file_values=st.one_of(settings_dicts(), settings_dicts(max_keys=1)),
    flags=st.one_of(settings_dicts(), settings_dicts(max_keys=2).map(lambda d: {"profile": "none", **d})),
    preset=st.sampled_from(["streaming", "baseline", "nope"]),
)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_build_valid_or_badinput(tmp_path_factory, file_values, flags, preset):
    out = str(tmp_path_factory.getbasetemp())
    try:
        cfg = cfgmod.build(preset, file_values=file_values, out=out, **flags)
    except BadInput as e:
        assert str(e) and "\n" not in str(e)
        event("BadInput")
        return
    event("built")
    # a config that builds is one the run can use
    assert cfg.mode in cfgmod.PRESETS
    for name in cfgmod.FIELD_NAMES:
        v = cfgmod.get(cfg, name)
        assert type(v) is FIELD_TYPES[name], name
        if isinstance(v, float):
            assert math.isfinite(v), name
    Schedule(cfg.schedule.fragments, cfg.schedule.sync_every, cfg.schedule.fragment_sync_delay)
    assert 1 <= cfg.schedule.fragments <= cfg.model.blocks
    window = cfg.profile_window()
    if window is not None:
        assert 1 <= window[0] <= window[1] <= cfg.steps
    assert cfg.timeouts.timeout_s > 0 and cfg.emulation.step_sleep_ms >= 0 and cfg.optimizer.inner_lr > 0
    assert "\n" not in cfg.run_name and "/" not in cfg.run_name
    assert 0 <= cfg.data.seed < 2**32
    json.dumps(cfg.resolved(), allow_nan=False)  # the manifest form is plain JSON


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=8), st.one_of(st.integers(), st.text(max_size=5), st.booleans()), max_size=4
    )
)
@settings(max_examples=100, deadline=None)
def test_load_toml_valid_or_badinput(tmp_path_factory, table):
    p = tmp_path_factory.mktemp("toml") / "c.toml"
    lines = [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items()]
    p.write_text("\n".join(lines) + "\n")
    tomllib = toml_parser()  # tomllib, or tomli on 3.10: the one ftrun reads --config with
    try:
        tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError:
        pass
    try:
        got = cfgmod.load_toml(p)
    except BadInput as e:
        assert "\n" not in str(e)
        return
    assert set(got) <= cfgmod.FIELD_NAMES


def _toml_key(k: str) -> str:
    import json

    return json.dumps(k)


def _toml_value(v) -> str:
    import json

    return ("true" if v else "false") if isinstance(v, bool) else json.dumps(v)


# --- values that used to start a run that died 40-55 s later (issue 24, item 14) --------------
# Each must be refused by the config layer (build / parse_link), one line, before anything starts.

HOSTILE = [
    ({"quorum_timeout_s": 1e308}, "--quorum-timeout 1e+308"),  # timedelta(seconds=1e308): OverflowError in the worker
    ({"stall_timeout_s": 1e308}, "--stall-timeout 1e+308"),
    ({"step_sleep_ms": 1e308}, "--step-sleep-ms 1e+308"),  # time.sleep(1e305): OverflowError in every step
    ({"timeout_s": 1e308}, "config key timeout_s 1e+308"),
    ({"heartbeat_timeout_ms": 2**63}, "config key heartbeat_timeout_ms"),
    ({"restarts": -1}, "--restarts -1"),  # -1 is the default's "1 with a fault, else 0", not a user's value
    ({"link": "1gbit,1e308ms"}, "latency"),
    ({"link": "1gbit,11s"}, "latency"),
]


@pytest.mark.parametrize(
    "flags,needle", HOSTILE, ids=[next(iter(f)) + "=" + str(next(iter(f.values()))) for f, _ in HOSTILE]
)
def test_values_that_cannot_run_are_refused_by_the_config(tmp_path, flags, needle):
    with pytest.raises(BadInput) as e:
        cfgmod.build(out=str(tmp_path), **flags)
    assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_the_bounds_are_not_below_real_use(tmp_path):
    cfg = cfgmod.build(
        out=str(tmp_path),
        quorum_timeout_s=86400.0,
        stall_timeout_s=3600.0,
        step_sleep_ms=60000.0,
        restarts=0,
        link="1kbit,2s",
    )
    assert cfg.faults.max_restarts == 0 and cfg.timeouts.quorum_timeout_s == 86400.0
    assert (
        cfgmod.build(out=str(tmp_path)).faults.max_restarts == 0
    )  # the default -1 still means "1 with a fault, else 0"
    cfgmod.validate_config(cfgmod.RunConfig(out=str(tmp_path)))  # a RunConfig made in code keeps its default
    assert cfgmod.build(out=str(tmp_path), kill=["1@10"], steps=60).faults.max_restarts == 1


def test_a_batch_that_cannot_fit_in_memory_is_refused_before_the_run(tmp_path):
    from ftrun.launch.preflight import check_memory

    cfg = cfgmod.build(out=str(tmp_path), batch_size=9223372036854775807)
    with pytest.raises(BadInput) as e:
        check_memory(cfg)
    assert "--batch-size 9223372036854775807" in str(e.value) and "GiB" in str(e.value), str(e.value)
    check_memory(cfgmod.build(out=str(tmp_path), batch_size=64))  # an ordinary batch passes
    user = cfgmod.build(out=str(tmp_path), model="mymodels:f", batch_size=2**40, seq_len=2**20)
    with pytest.raises(BadInput):  # a user's model's logits [B, T, V] are as big as the built-in one's
        check_memory(user)


def test_train_cli_refuses_a_huge_batch_in_one_line(tmp_path):
    one_line(
        cli("train", "--batch-size", "9223372036854775807", "--out", str(tmp_path)), "--batch-size 9223372036854775807"
    )
