"""Build a user's model (``--model MODULE:FACTORY`` or ``hf:NAME``) and split it into fragments.

The contract is in ``ftrun.model_spec``. Run as ``python -m ftrun.worker.user_model JSON`` it is
the parent's pre-launch check: it builds the model once, runs one forward pass on a ``[2, T]``
batch to check the output is ``[2, T, V]`` logits, splits it, and prints one JSON line:
{"fragments": [...], "warnings": [...]} or {"error": "one line"}.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any, Optional

import torch
from torch import nn

from ftrun.model_spec import parse_fragment_fqns, parse_model, parse_model_args


class ModelError(Exception):
    """A problem with the user's model, as one line naming --model / --fragment-fqns."""


def _import(module: str, flag: str):
    try:
        if module.endswith(".py"):
            spec = importlib.util.spec_from_file_location(Path(module).stem, module)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = mod
            spec.loader.exec_module(mod)
            return mod
        if "" not in sys.path and str(Path.cwd()) not in sys.path:
            sys.path.insert(0, str(Path.cwd()))
        return importlib.import_module(module)
    except Exception as e:  # the user's import error, in one line
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ModelError(f"{flag}: cannot import {module}: {type(e).__name__}: {msg}") from None


class _LogitsOf(nn.Module):
    """A Hugging Face causal LM, returning its ``.logits`` tensor."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=tokens).logits


def hf_requirement() -> str:
    """The ``hf`` extra's requirement as ftrun's installed metadata lists it (pyproject.toml)."""
    from importlib import metadata

    try:
        reqs = metadata.requires("ftrun") or []
    except metadata.PackageNotFoundError:
        reqs = []
    return next((r.split(";")[0].strip() for r in reqs if 'extra == "hf"' in r), "transformers")


def _hf(name: str, vocab: int, args: dict[str, Any], flag: str) -> nn.Module:
    if importlib.util.find_spec("transformers") is None:  # ftrun is not on PyPI: name this Python's pip
        raise ModelError(f"{flag}: needs the transformers package; install it with: "
                         f"{sys.executable} -m pip install '{hf_requirement()}'")
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.for_model(name, vocab_size=vocab, **args)
        return _LogitsOf(AutoModelForCausalLM.from_config(config))
    except Exception as e:
        raise ModelError(f"{flag}: transformers cannot build {name!r}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None


def build_user_model(cfg: dict) -> nn.Module:
    """``FACTORY(vocab_size=..., seq_len=..., **model_args)`` (``cfg``: the run config's dict)."""
    flag = f"--model {cfg['model']}"
    module, factory = parse_model(cfg["model"])
    args = cfg["model_args"] if isinstance(cfg["model_args"], dict) else parse_model_args(cfg["model_args"])
    torch.manual_seed(cfg["seed"])
    if module == "hf":
        return _hf(factory, cfg["vocab"], args, flag)
    fn: Any = _import(module, flag)
    for part in factory.split("."):
        if not hasattr(fn, part):
            raise ModelError(f"{flag}: {module} has no attribute {factory!r}")
        fn = getattr(fn, part)
    if not callable(fn):
        raise ModelError(f"{flag}: {factory} is not callable")
    try:
        model = fn(vocab_size=cfg["vocab"], seq_len=cfg["seq_len"], **args)
    except Exception as e:
        raise ModelError(f"{flag}: {factory}(vocab_size={cfg['vocab']}, seq_len={cfg['seq_len']}"
                         + "".join(f", {k}={v!r}" for k, v in args.items()) + f") failed: {type(e).__name__}: {e}") from None
    if not isinstance(model, nn.Module):
        raise ModelError(f"{flag}: {factory} returned {type(model).__name__}, not a torch.nn.Module")
    return model


class UserFragment(nn.Module):
    """Some of the model's parameters (shared, not copied); ``fqns`` are their names in the model."""

    def __init__(self, named: list[tuple[str, nn.Parameter]]) -> None:
        super().__init__()
        self.fqns = [n for n, _ in named]
        for n, p in named:
            self.register_parameter(n.replace(".", "/"), p)


def _largest_list(model: nn.Module) -> tuple[str, nn.ModuleList] | None:
    best = None
    for name, m in model.named_modules():
        if isinstance(m, nn.ModuleList) and len(m) and (best is None or len(m) > len(best[1])):
            best = (name, m)
    return best


def assign_fragments(model: nn.Module, fragments: int, fqns: Optional[list[list[str]]] = None) -> list[list[str]]:
    """Parameter names per fragment (module docstring of ``ftrun.model_spec``); ``ModelError``."""
    names = [n for n, _ in model.named_parameters()]
    if fqns is not None:
        out: list[list[str]] = [[] for _ in fqns]
        for n in names:
            hits = [i for i, g in enumerate(fqns) if any(n == p or n.startswith(p + ".") for p in g)]
            if not hits:
                raise ModelError(f"--fragment-fqns: parameter {n} belongs to no fragment")
            if len(hits) > 1:
                raise ModelError(f"--fragment-fqns: parameter {n} belongs to fragments {hits[0]} and {hits[1]}")
            out[hits[0]].append(n)
        for i, g in enumerate(fqns):
            for p in g:
                if not any(n == p or n.startswith(p + ".") for n in names):
                    raise ModelError(f"--fragment-fqns: {p!r} (fragment {i}) names no parameter of the model")
        return out
    found = _largest_list(model)
    if found is None:
        raise ModelError("--model: the model has no nn.ModuleList of blocks to split; give --fragment-fqns")
    prefix, blocks = found
    n = len(blocks)
    if fragments > n:
        raise ModelError(f"--fragments {fragments}: exceeds the {n} blocks of {prefix or 'the model'} (each fragment is a group of whole blocks)")
    sizes = [n // fragments + (1 if i < n % fragments else 0) for i in range(fragments)]
    frag_of_block = [f for f, size in enumerate(sizes) for _ in range(size)]
    out = [[] for _ in range(fragments)]
    seen_block = False
    lead = f"{prefix}." if prefix else ""
    for name in names:
        rest = name[len(lead):] if name.startswith(lead) else None
        idx = rest.split(".")[0] if rest is not None else None
        if idx is not None and idx.isdigit() and int(idx) < n:
            out[frag_of_block[int(idx)]].append(name)
            seen_block = True
        else:
            out[fragments - 1 if seen_block else 0].append(name)
    return out


def split_user_model(model: nn.Module, fragments: int, fqns: Optional[list[list[str]]] = None) -> list[UserFragment]:
    params = dict(model.named_parameters())
    return [UserFragment([(n, params[n]) for n in group]) for group in assign_fragments(model, fragments, fqns)]


def same_signatures(described: list[dict]) -> list[str]:
    """Warnings for fragments whose parameter sizes are identical (traces cannot tell them apart)."""
    sigs: dict[tuple, int] = {}
    out = []
    for f in described:
        sig = tuple(sorted(p["numel"] for p in f["params"]))  # as inspect-trace matches them
        if sig in sigs:
            out.append(f"fragments {sigs[sig]} and {f['id']} have identical parameter sizes: inspect-trace cannot tell "
                       "them apart from the traces, so their identity will not be checked")
        else:
            sigs[sig] = f["id"]
    return out


def check(cfg: dict) -> dict:
    """The pre-launch check (module docstring)."""
    from ftrun.worker.models import describe_fragments

    try:
        model = build_user_model(cfg)
        with torch.no_grad():
            out = model(torch.zeros(2, cfg["seq_len"], dtype=torch.long))
        want = (2, cfg["seq_len"], cfg["vocab"])
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != want:
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ModelError(f"--model {cfg['model']}: maps token ids [2, {cfg['seq_len']}] to {got}; "
                             f"ftrun needs logits [B, T, V] = {list(want)}")
        frags = split_user_model(model, cfg["fragments"], parse_fragment_fqns(cfg.get("fragment_fqns") or "", cfg["fragments"]))
    except ModelError as e:
        return {"error": str(e)}
    except Exception as e:  # the user's forward pass
        return {"error": f"--model {cfg['model']}: forward pass failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    described = describe_fragments(frags)
    return {"fragments": described, "warnings": same_signatures(described)}


if __name__ == "__main__":
    print(json.dumps(check(json.loads(sys.argv[1]))), flush=True)
