"""``--model MODULE:FACTORY``: parsing, fragments of a user's model, the pre-launch check. No process."""

from __future__ import annotations

import msgspec
import pytest

from ftrun import config as cfgmod
from ftrun.errors import BadInput
from ftrun.model_spec import (
    MODEL_SPEC_LIMIT,
    ModelCheck,
    ModelSpec,
    decode_spec,
    parse_fragment_fqns,
    parse_model,
    parse_model_args,
)

torch = pytest.importorskip("torch")
from ftrun import layout  # noqa: E402
from ftrun.worker import fragments as fr, models, user_model as um  # noqa: E402
from tests import user_model_fixtures as fx  # noqa: E402


def _spec(model="tests.user_model_fixtures:stack", fragments=2, **kw) -> ModelSpec:
    return ModelSpec(model=model, vocab=64, seq_len=8, width=128, blocks=4, fragments=fragments, seed=0, **kw)


def test_parse_model_and_args():
    assert parse_model("pkg.mod:make") == ("pkg.mod", "make")
    assert parse_model_args(["depth=3", "lr=0.5", "tied=true", "name=x=y"]) == {
        "depth": 3,
        "lr": 0.5,
        "tied": True,
        "name": "x=y",
    }
    assert parse_fragment_fqns("a,b; c", 2) == [["a", "b"], ["c"]]


@pytest.mark.parametrize(
    "fn, arg, needle",
    [
        (parse_model, "justamodule", "--model justamodule: expected mlp, transformer, MODULE:FACTORY"),
        (parse_model, "no/such.py:f", "no such file"),
        (parse_model, "a-b:f", "is not a module name"),
        (lambda a: parse_model_args([a]), "depth", "expected KEY=VALUE"),
        (lambda a: parse_model_args([a]), "vocab_size=3", "given by ftrun"),
        (lambda a: parse_fragment_fqns(a, 2), "a;b;c", "names 3 fragment(s) but --fragments is 2"),
        (lambda a: parse_fragment_fqns(a, 2), "a;", "an empty fragment"),
    ],
)
def test_bad_specs(fn, arg, needle):
    with pytest.raises(BadInput) as e:
        fn(arg)
    assert needle in str(e.value)


def test_config_accepts_user_model_and_refuses_model_args_for_builtin():
    cfg = cfgmod.build(model="tests.user_model_fixtures:stack", model_args=["depth=4"], blocks=1, fragments=2)
    assert cfg.resolved()["model_args"] == ["depth=4"]  # blocks do not bound a user model's fragments
    with pytest.raises(BadInput, match="only for --model MODULE:FACTORY"):
        cfgmod.build(model="mlp", model_args=["depth=4"])


def test_default_split_largest_modulelist_with_leading_and_trailing_params():
    m = fx.stack(64, 8, depth=5)
    got = fr.assign_fragments(m, 2)
    assert got == [
        [
            "emb.weight",
            "layers.0.weight",
            "layers.0.bias",
            "layers.1.weight",
            "layers.1.bias",
            "layers.2.weight",
            "layers.2.bias",
        ],
        ["layers.3.weight", "layers.3.bias", "layers.4.weight", "layers.4.bias", "out.weight"],
    ]
    frags = models.build_fragments(m, _spec(fragments=2))
    assert sum(p.numel() for f in frags for p in f.parameters()) == sum(p.numel() for p in m.parameters())
    assert frags[1].fqns[-1] == "out.weight" and frags[1].get_parameter("out/weight") is m.out.weight  # shared


def test_explicit_fqns_and_their_errors():
    m = fx.stack(64, 8, depth=2)
    assert fr.assign_fragments(m, 2, [["emb", "layers.0"], ["layers.1", "out"]])[1] == [
        "layers.1.weight",
        "layers.1.bias",
        "out.weight",
    ]
    with pytest.raises(fr.ModelError, match="layers.1.weight belongs to no fragment"):
        fr.assign_fragments(m, 2, [["emb", "layers.0"], ["out"]])
    with pytest.raises(fr.ModelError, match="belongs to fragments 0 and 1"):
        fr.assign_fragments(m, 2, [["emb", "layers"], ["layers.1", "out"]])
    with pytest.raises(fr.ModelError, match="exceeds the 2 blocks of layers"):
        fr.assign_fragments(m, 3)


def test_check_reports_fragments_and_warns_on_equal_signatures():
    ok = models.check(_spec(model_args={"depth": 4}))
    assert ok.error is None and [f.id for f in ok.fragments] == [0, 1] and ok.warnings == []
    assert ok.fragments[0].params[0] == layout.Param(name="emb.weight", numel=64 * 16, shape=[64, 16])
    # same-width layers, emb and out (64x16 each) on either side: both fragments move the same sizes
    same = models.check(_spec(model_args={"depth": 2, "growing": False}, fragment_fqns="emb,layers.0;layers.1,out"))
    assert len(same.warnings) == 1 and "fragments 0 and 1 have identical parameter sizes" in same.warnings[0]


@pytest.mark.parametrize(
    "model, needle",
    [
        ("tests.user_model_fixtures:not_a_module", "returned str, not a torch.nn.Module"),
        ("tests.user_model_fixtures:wrong_output", "ftrun needs logits [B, T, V] = [2, 8, 64]"),
        ("tests.user_model_fixtures:missing", "has no attribute 'missing'"),
        ("tests.no_such_module:f", "cannot import tests.no_such_module: ModuleNotFoundError"),
    ],
)
def test_check_errors_are_one_line(model, needle):
    err = models.check(_spec(model=model)).error
    assert err is not None
    assert needle in err and "\n" not in err


def test_a_module_that_cannot_be_imported_suggests_the_file_path_form():
    """Issue 42: ``--model pkg.mod:factory`` failing to import names the ``path/to/file.py:factory`` form."""
    err = models.check(_spec(model="mymodels.net:build")).error or ""
    assert "cannot import mymodels.net: ModuleNotFoundError" in err and "\n" not in err, err
    assert err.endswith("a file is named by its path: --model path/to/net.py:build"), err
    missing_file = models.check(_spec(model="no/such/file.py:build")).error or ""
    assert "path/to/" not in missing_file, missing_file  # already the file form: no hint


def test_the_hf_hint_names_a_command_that_works(monkeypatch):
    """Issue 24 item 19: the hint said ``pip install 'ftrun[hf]'``, but ftrun is not on PyPI.
    Now it names this interpreter's pip and the requirement pyproject.toml's ``hf`` extra lists."""
    import importlib.util
    import sys

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "transformers" else object())
    with pytest.raises(fr.ModelError) as e:
        um._hf("gpt2", 64, {}, "--model hf:gpt2")
    msg = str(e.value)
    assert "ftrun[hf]" not in msg, msg
    assert f"{sys.executable} -m pip install 'transformers>=4.40'" in msg, msg


def test_the_spec_is_the_configs_and_travels_as_itself():
    """Issue 44: one ``ModelSpec`` from the config tree, parent -> child as JSON and back unchanged."""
    cfg = cfgmod.build(
        model="tests.user_model_fixtures:stack",
        model_args=["depth=4", "scale=1.0", "tied=true", "name=x=y"],
        fragment_fqns="emb,layers.0;layers.1,out",
        fragments=2,
        seq_len=8,
        seed=7,
    )
    spec = cfg.model_spec()
    assert spec.model_args == {"depth": 4, "scale": 1.0, "tied": True, "name": "x=y"}
    assert (spec.seq_len, spec.seed, spec.fragments, spec.vocab) == (8, 7, 2, cfg.model.vocab)
    back = decode_spec(msgspec.json.encode(spec))
    assert back == spec and type(back.model_args["scale"]) is float and type(back.model_args["depth"]) is int
    assert spec.architecture is None and cfgmod.build(model="mlp").model_spec().architecture is not None


def test_the_childs_answer_round_trips_and_the_parent_reads_its_part():
    got = models.answer(
        msgspec.json.encode(_spec(model_args={"depth": 2, "growing": False}, fragment_fqns="emb,layers.0;layers.1,out"))
    )
    line = msgspec.json.encode(got)
    assert msgspec.json.decode(line, type=models.ModelAnswer) == got
    assert msgspec.json.decode(line, type=ModelCheck) == ModelCheck(warnings=got.warnings)
    assert msgspec.json.decode(msgspec.json.encode(models.ModelAnswer(error="x")), type=ModelCheck).error == "x"


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"model_args": {"depth": [4]}}, "Expected `bool | int | float | str`, got `array` - at `$.model_args"),
        ({"model_args": "depth=4"}, "Expected `object`, got `str` - at `$.model_args`"),
        ({"seq_len": "8"}, "Expected `int`, got `str` - at `$.seq_len`"),
        ({"layers": 3}, "Object contains unknown field `layers`"),
    ],
)
def test_a_bad_spec_is_one_line(change, needle):
    """A payload the child cannot take (a bad ``model_args`` value, a wrong type, an unknown field)
    answers one line naming the field, as the parent shows it."""
    payload = msgspec.json.encode({**msgspec.to_builtins(_spec()), **change})
    with pytest.raises(BadInput) as e:
        decode_spec(payload)
    assert str(e.value).startswith("model spec: ") and needle in str(e.value) and "\n" not in str(e.value)
    assert models.answer(payload) == models.ModelAnswer(error=str(e.value))


def test_a_spec_over_the_limit_is_refused_before_decoding():
    err = models.answer(b" " * (MODEL_SPEC_LIMIT + 1)).error or ""
    assert err.startswith("model spec: ") and "more than" in err and "\n" not in err


def test_a_model_arg_the_factory_refuses_is_one_line():
    err = models.check(_spec(model_args={"depth": "four"})).error or ""
    assert err.startswith("--model tests.user_model_fixtures:stack: stack(vocab_size=64, seq_len=8, depth='four')")
    assert "failed: TypeError" in err and "\n" not in err, err
