"""The model's one home: the torch-free description (``ftrun.model_desc``) is the model the worker
builds (``ftrun.worker.models``), and every model's fragments come from one split with bytes
from the parameters' real dtype (``ftrun.worker.fragments``). No process."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ftrun import model_desc
from ftrun.model_desc import BUILTIN_MODELS, Architecture, even_split
from ftrun.model_spec import ModelSpec

ARCHS = [
    Architecture("mlp", 256, 32, 4, 64),
    Architecture("transformer", 256, 64, 3, 64),
    Architecture("mlp", 256, 128, 1, 64),
    Architecture("transformer", 64, 30, 5, 16),
]  # 30: one head


def test_even_split() -> None:
    assert even_split(5, 2) == (3, 2)
    assert even_split(7, 3) == (3, 2, 2)
    assert even_split(4, 4) == (1, 1, 1, 1)
    assert even_split(2, 3) == (1, 1, 0)
    assert even_split(0, 1) == (0,)
    for total in range(0, 30):
        for parts in range(1, 8):
            got = even_split(total, parts)
            assert sum(got) == total and max(got) - min(got) <= 1 and list(got) == sorted(got, reverse=True)
    with pytest.raises(ValueError):
        even_split(3, 0)


def test_the_description_is_torch_free() -> None:
    tree = ast.parse(Path(model_desc.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= {"__future__", "collections.abc", "dataclasses", "typing"}, imported  # the stdlib's, no torch


def test_one_list_of_builtin_names() -> None:
    from ftrun.config import MODELS
    from ftrun.model_spec import is_user_model

    assert MODELS is BUILTIN_MODELS
    assert not any(is_user_model(m) for m in BUILTIN_MODELS) and is_user_model("mymodels:f")
    user = ModelSpec(model="mymodels:f", vocab=64, seq_len=8, width=0, blocks=0, fragments=1, seed=0)
    assert user.architecture is None
    with pytest.raises(ValueError, match="not a built-in model"):
        Architecture("mymodels:f", 64, 8, 2, 8)


torch = pytest.importorskip("torch")
from ftrun.worker import fragments as fr  # noqa: E402
from ftrun.worker.models import TokenModel, build_fragments, build_model  # noqa: E402


def _numel(module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: f"{a.kind}-w{a.width}-b{a.blocks}")
def test_parameter_count_is_the_torch_models(arch: Architecture) -> None:
    model = TokenModel(arch)
    assert arch.params() == _numel(model)
    assert [arch.block_params(i) for i in range(arch.blocks)] == [_numel(b) for b in model.blocks]
    pos = model.pos.numel() if model.pos is not None else 0
    assert arch.embedding_params() == _numel(model.embed) + pos
    assert arch.head_params() == _numel(model.norm) + _numel(model.head)
    assert {p.element_size() for p in model.parameters()} == {Architecture.BYTES_PER_PARAM}
    assert arch.param_bytes() == sum(p.numel() * p.element_size() for p in model.parameters())


def test_preflight_refuses_by_the_size_of_the_model_the_worker_builds(tmp_path, monkeypatch) -> None:
    """``check_memory`` refuses exactly when the built model's parameters, once per rank, exceed memory."""
    from ftrun.config import build
    from ftrun.errors import BadInput
    from ftrun.launch import preflight

    cfg = build(
        out=str(tmp_path),
        replicas=1,
        model="transformer",
        width=64,
        blocks=3,
        fragments=1,
        sync_every=4,
        fragment_sync_delay=0,
        batch_size=1,
        seq_len=8,
    )  # one rank on this host
    assert cfg.model_spec().architecture == Architecture("transformer", 256, 64, 3, 8)
    real = sum(p.numel() * p.element_size() for p in build_model(cfg.model_spec()).parameters())
    assert preflight.batch_bytes(cfg) < real  # only the parameters can be refused here
    monkeypatch.setattr(preflight, "host_memory_bytes", lambda: real)
    preflight.check_memory(cfg)
    monkeypatch.setattr(preflight, "host_memory_bytes", lambda: real - 1)
    with pytest.raises(BadInput, match="--width 64 --blocks 3: the model's parameters alone need .* for 1 rank"):
        preflight.check_memory(cfg)


def _spec(arch: Architecture, fragments: int) -> ModelSpec:
    return ModelSpec(
        model=arch.kind,
        vocab=arch.vocab,
        width=arch.width,
        blocks=arch.blocks,
        seq_len=arch.seq_len,
        fragments=fragments,
        seed=0,
    )


@pytest.mark.parametrize("arch, fragments", [(ARCHS[0], 2), (ARCHS[0], 3), (ARCHS[1], 3), (ARCHS[3], 2), (ARCHS[2], 1)])
def test_builtin_fragments_are_whole_blocks_evenly(arch: Architecture, fragments: int) -> None:
    model = build_model(_spec(arch, fragments))
    frags = build_fragments(model, _spec(arch, fragments))
    assert all(isinstance(f, fr.Fragment) for f in frags)
    assert [n for f in frags for n in f.fqns] == [n for n, _ in model.named_parameters()]  # the model's order
    sizes = even_split(arch.blocks, fragments)
    first = 0
    for f, size in enumerate(sizes):
        want = sum(arch.block_params(first + j) for j in range(size))
        want += arch.embedding_params() if f == 0 else 0
        want += arch.head_params() if f == fragments - 1 else 0
        assert _numel(frags[f]) == want
        blocks = {int(n.split(".")[1]) for n in frags[f].fqns if n.startswith("blocks.")}
        assert blocks == set(range(first, first + size))
        first += size
    assert frags[0].fqns[0] == ("pos" if arch.kind == "transformer" else "embed.weight")
    assert frags[-1].fqns[-2:] == ["head.weight", "head.bias"]
    named = dict(model.named_parameters())
    assert all(p is named[n] for f in frags for n, p in zip(f.fqns, f.parameters(), strict=True))  # shared, not copied


def test_fragment_bytes_come_from_the_dtype() -> None:
    model = build_model(_spec(ARCHS[0], 2))
    model.blocks[3].to(torch.bfloat16)  # fragment 1: blocks 2 (fp32) and 3 (bf16), the head (fp32)
    model.head.to(torch.float64)
    rec = fr.describe_fragments(build_fragments(model, _spec(ARCHS[0], 2)))
    assert rec[0].bytes == 4 * rec[0].numel
    a = ARCHS[0]
    assert rec[1].numel == a.block_params(2) + a.block_params(3) + a.head_params()
    head = 4 * 2 * a.width + 8 * (a.width * a.vocab + a.vocab)  # fp32 norm, fp64 projection
    assert rec[1].bytes == 4 * a.block_params(2) + 2 * a.block_params(3) + head
    assert [p.numel for p in rec[1].params] == [p.numel() for p in model.parameters()][-len(rec[1].params) :]
